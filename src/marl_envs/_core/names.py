"""Each backend's env names without importing the backend: a snapshot shipped in the package, else a user cache.

Listing a backend's names live imports it (JAX, Brax, PettingZoo building every task: seconds each). The names
follow from the installed versions of what the backend's extra installs, so they are kept under that *stamp*
(``stamp``): the version of each distribution ``pip install 'marl-envs[<extra>]'`` installs, and of those the
extras it asks of them add (``pettingzoo[classic,butterfly,sisl]``: ``rlcard``, ``chess``, ``pymunk`` ...: a
missing one drops a family), ``None`` for those not installed. Versions are read from the installed metadata,
importing nothing. ``lookup`` finds the names of a stamp:

1. in ``names_snapshot.json``, shipped in the package. ``python scripts/snapshot_env_names.py`` regenerates
   it; ``tests/test_names.py`` fails when it differs from the live names of the installed versions;
2. in ``${XDG_CACHE_HOME:-~/.cache}/marl_envs/names/<backend>.json``, written by ``remember`` after a live listing
   of a stamp the snapshot does not have (with the marl_envs version: our code filters the names too). Delete
   the folder to list live again.

Where marl-envs' metadata is missing (a source tree on ``PYTHONPATH``, not installed) there is no stamp and the
names are listed live.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
from collections.abc import Collection
from pathlib import Path

from .._version import __version__, installed_version

__all__ = ["SNAPSHOT", "SNAPSHOT_FILE", "Stamp", "cache_path", "lookup", "remember", "stamp", "user_cache"]

#: The names shipped in the package: ``{backend: {"versions": Stamp, "names": [...]}}``.
SNAPSHOT_FILE = Path(__file__).with_name("names_snapshot.json")
SNAPSHOT: dict[str, dict] = json.loads(SNAPSHOT_FILE.read_text())

Stamp = dict[str, str | None]
"""Distribution name (normalised: ``pygame-ce``) -> installed version, or None if it is not installed."""

_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _normalise(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _added_by(distribution: str, extras: Collection[str]) -> list[tuple[str, list[str]]]:
    """(name, extras it is asked with) of each requirement of ``distribution`` that one of ``extras`` adds
    (requirement markers other than the extra are not evaluated: a distribution they leave out is simply None)."""
    added = []
    for line in importlib.metadata.requires(distribution) or ():
        extra = _EXTRA.search(line)
        if extra is not None and extra.group(1) in extras:
            name, asked = _REQUIREMENT.match(line).groups()
            added.append((name, [a.strip() for a in asked.split(",")] if asked else []))
    return added


def stamp(extra: str) -> Stamp | None:
    """The installed version of each distribution ``marl-envs[extra]`` installs and of those the extras it asks
    of them add; None if marl-envs' metadata is missing (not installed)."""
    try:
        direct = _added_by("marl-envs", {extra})
    except importlib.metadata.PackageNotFoundError:
        return None
    names = []
    for name, asked in direct:
        names.append(name)
        if asked and installed_version(name) is not None:
            names += [sub for sub, _ in _added_by(name, asked)]
    return {n: installed_version(n) for n in sorted({_normalise(n) for n in names})}


def user_cache(*parts: str) -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/marl_envs/<parts>``: where marl_envs keeps what it caches for a user (names,
    JAX's compilations, the docs catalogue's entries)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "marl_envs", *parts)


def cache_path(backend: str) -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/marl_envs/names/<backend>.json``."""
    return user_cache("names", f"{backend}.json")


def lookup(backend: str, versions: Stamp | None) -> list[str] | None:
    """``backend``'s names for ``versions`` from the snapshot, else from the user cache; None if neither has them."""
    if versions is None:
        return None
    entry = SNAPSHOT.get(backend)
    if entry is not None and entry["versions"] == versions:
        return list(entry["names"])
    try:
        cached = json.loads(cache_path(backend).read_text())
    except (OSError, ValueError):  # no cache yet, or one that cannot be read: list live
        return None
    if (isinstance(cached, dict) and cached.get("marl_envs") == __version__
            and cached.get("versions") == versions and isinstance(cached.get("names"), list)):
        return cached["names"]
    return None


def remember(backend: str, versions: Stamp | None, names: list[str]) -> None:
    """Cache ``names`` as ``backend``'s for ``versions``; silently skipped where the cache cannot be written."""
    if versions is None:
        return
    path = cache_path(backend)
    entry = {"marl_envs": __version__, "versions": versions, "names": names}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(entry, indent=1))
        os.replace(partial, path)  # readers see the old file or the new one, never half of it
    except OSError:  # a read-only home: the names are listed live again next time
        pass
