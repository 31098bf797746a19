"""Run the README's quick start against an installed marl-envs (the wheel in a fresh venv: ``make wheel-check``).

    .venv-wheel/bin/python scripts/check_wheel.py README.md

Fails unless ``marl_envs`` is imported from the venv's site-packages (not from this checkout), its version is the
one ``pyproject.toml`` reads, both packages ship their ``py.typed``, and the README's first ```python block runs.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path


def main(readme: Path) -> None:
    import groupings
    import marl_envs

    installed = Path(marl_envs.__file__).resolve()
    if "site-packages" not in installed.parts:
        raise SystemExit(f"marl_envs was imported from {installed}, not from an installed wheel")
    if marl_envs.__version__ != importlib.metadata.version("marl-envs"):
        raise SystemExit(f"marl_envs.__version__ {marl_envs.__version__} differs from the installed "
                         f"distribution's {importlib.metadata.version('marl-envs')}")
    missing = [p.__name__ for p in (marl_envs, groupings) if not (Path(p.__file__).parent / "py.typed").exists()]
    if missing:
        raise SystemExit(f"no py.typed in the installed {missing}")
    quick_start = re.search(r"^```python\n(.*?)^```", readme.read_text(), re.S | re.M).group(1)
    exec(compile(quick_start, f"{readme.name} quick start", "exec"), {"__name__": "quick_start"})
    print(f"marl-envs {marl_envs.__version__} from {installed.parent}: the README's quick start ran")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
