"""Hard-link the files of a virtualenv that are byte for byte those of another, to save disk.

``python scripts/share_venv_files.py VENV BASE``: each regular file under VENV's ``site-packages`` that has a twin at
the same path under BASE's (the same size and bytes) becomes a hard link to that twin, and so does the compiled
``__pycache__/*.pyc`` of a source file so linked: a ``.pyc`` names its source's modification time, which is now
BASE's, so VENV's own would be stale, and compiled again at every import where ``PYTHONDONTWRITEBYTECODE`` is set.
The Makefile runs it on each virtualenv it makes beside ``.venv``: they hold the same torch, JAX and backends (about
3 GB), and differ in TorchRL, TensorDict and BenchMARL. Nothing writes into an installed file: pip and Python
replace files (an upgrade in one virtualenv leaves the other's copy as it was). A missing BASE, or a filesystem
without hard links, shares nothing.
"""

import filecmp
import os
import sys
from pathlib import Path


def site_packages(venv: Path) -> Path | None:
    found = sorted(venv.glob("lib/python*/site-packages"))
    return found[0] if found else None


def shared_source(pyc: Path, twin: Path) -> bool:
    """Whether ``pyc`` (in a ``__pycache__``) was compiled from a source file that is now its twin's."""
    if pyc.parent.name != "__pycache__" or pyc.suffix != ".pyc":
        return False
    source = pyc.name.split(".")[0] + ".py"
    ours, theirs = pyc.parent.parent / source, twin.parent.parent / source
    return ours.is_file() and theirs.is_file() and ours.stat().st_ino == theirs.stat().st_ino


def share(venv: Path, base: Path) -> tuple[int, int]:
    """(files, bytes) of VENV made links to BASE's."""
    ours, theirs = site_packages(venv), site_packages(base)
    files = size = 0
    if ours is None or theirs is None:
        return files, size
    for folder, _, names in os.walk(ours):  # top down: a folder's sources before its __pycache__
        for name in names:
            path = Path(folder, name)
            twin = theirs / path.relative_to(ours)
            if path.is_symlink() or not twin.is_file() or twin.is_symlink():
                continue
            stat, twin_stat = path.stat(), twin.stat()
            if stat.st_ino == twin_stat.st_ino:
                continue
            if not shared_source(path, twin) and (stat.st_size != twin_stat.st_size
                                                 or not filecmp.cmp(path, twin, shallow=False)):
                continue
            temporary = path.with_name(name + ".share-tmp")
            try:
                os.link(twin, temporary)
            except OSError:
                return files, size
            os.replace(temporary, path)
            files, size = files + 1, size + stat.st_size
    return files, size


def main(venv: str, base: str) -> None:
    files, size = share(Path(venv), Path(base))
    print(f"{venv}: {files} files ({size / 2**30:.1f} GiB) shared with {base}")


if __name__ == "__main__":
    main(*sys.argv[1:])
