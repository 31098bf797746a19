"""Install Melting Pot's substrates into this Python's environment, without TensorFlow and without internet.

``python scripts/meltingpot_install.py [PIP ARGS...]`` installs what the ``meltingpot`` extra of ``pyproject.toml``
asks for, with two differences from ``pip install -e '.[meltingpot]'``:

- **dm-meltingpot builds without downloading its bots' models.** It is an sdist whose ``setup.py``
  (``BuildPy.download_assets``) downloads ``meltingpot-assets-2.3.0.tar.gz`` (the bots' TensorFlow models) unless
  that file is already in ``tempfile.gettempdir()``. Substrates need none of them: this writes a tarball there
  holding an empty ``assets/saved_models/`` first (a tarball already there, the real one or ours, is left as it is).
- **No TensorFlow.** dm-meltingpot requires it (about 2 GB in a virtualenv), but only its bots import it, and
  marl-envs imports Melting Pot without it. dm-meltingpot is installed without its requirements, then those
  requirements but TensorFlow (read from its metadata), so ``pip check`` names TensorFlow as missing.

PIP ARGS go to each ``pip install`` (the Makefile passes its torch, TorchRL and TensorDict pins, so that nothing
installed here moves them).
"""

import importlib.metadata
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

ASSETS = "meltingpot-assets-2.3.0.tar.gz"
LIBRARY = "dm-meltingpot"
LEFT_OUT = "tensorflow"


def write_assets() -> None:
    path = os.path.join(tempfile.gettempdir(), ASSETS)
    if os.path.exists(path):
        return
    with tarfile.open(path + ".part", "w:gz") as tar:
        for folder in ("assets", "assets/saved_models"):
            entry = tarfile.TarInfo(folder)
            entry.type, entry.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(entry, io.BytesIO())
    os.replace(path + ".part", path)
    print(f"wrote {path}: Melting Pot's assets without its bots' models")


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *args], check=True)


def name_of(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0).lower().replace("_", "-")


def main(pip_args: list[str]) -> None:
    pyproject = tomllib.loads(Path(__file__).parents[1].joinpath("pyproject.toml").read_text())
    extra = pyproject["project"]["optional-dependencies"]["meltingpot"]
    (library,) = [r for r in extra if name_of(r) == LIBRARY]
    write_assets()
    pip("--no-deps", library, *pip_args)
    needs = [r for r in importlib.metadata.requires(LIBRARY) or () if "extra ==" not in r]
    pip(*[r for r in extra if r != library], *[r for r in needs if name_of(r) != LEFT_OUT], *pip_args)
    print(f"installed {library} without {LEFT_OUT}, which only its bots import (pip names it missing: expected)")


if __name__ == "__main__":
    main(sys.argv[1:])
