"""Regenerate ``src/marl_envs/_core/names_snapshot.json``: each installed backend's env names, listed live (this
imports every backend), stamped with the versions they were listed with (``marl_envs._core.names.stamp``).

    .venv/bin/python scripts/snapshot_env_names.py

A backend not installed here keeps the entry it had. ``tests/test_names.py`` fails until this is rerun after a
backend's version or its list of names changes.
"""

from __future__ import annotations

import json

from marl_envs import registry
from marl_envs._core import names

TARGET = names.SNAPSHOT_FILE


def main() -> None:
    snapshot = dict(names.SNAPSHOT)
    for backend in registry.available_backends():
        if not registry.backend_installed(backend):
            print(f"{backend}: not installed, entry kept")
            continue
        versions = names.stamp(registry.backend_record(backend).extra)
        if versions is None:
            raise SystemExit("marl-envs is not installed (no metadata to stamp the names with): pip install -e .")
        snapshot[backend] = {"versions": versions, "names": registry._live_names(backend)}
        print(f"{backend}: {len(snapshot[backend]['names'])} names, {versions}")
    ordered = {b: snapshot[b] for b in registry.available_backends() if b in snapshot}
    TARGET.write_text(json.dumps(ordered, indent=1) + "\n")  # one version and one name a line: diffs line by line
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
