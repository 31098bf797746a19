"""Hard-link the files of a virtualenv that are byte for byte those of another, to save disk.

``python scripts/share_venv_files.py VENV BASE``: each regular file under VENV's ``site-packages`` that has a twin at
the same path under BASE's (the same size and bytes) becomes a hard link to that twin. The Makefile runs it on each
virtualenv it makes beside ``.venv``: they hold the same torch, JAX and backends (about 3 GB), and differ in TorchRL,
TensorDict and BenchMARL. Nothing writes into an installed file: pip and Python replace files (an upgrade in one
virtualenv leaves the other's copy as it was). A missing BASE, or a filesystem without hard links, shares nothing.
"""

import filecmp
import os
import sys
from pathlib import Path


def site_packages(venv: Path) -> Path | None:
    found = sorted(venv.glob("lib/python*/site-packages"))
    return found[0] if found else None


def share(venv: Path, base: Path) -> tuple[int, int]:
    """(files, bytes) of VENV made links to BASE's."""
    ours, theirs = site_packages(venv), site_packages(base)
    files = size = 0
    if ours is None or theirs is None:
        return files, size
    for folder, _, names in os.walk(ours):
        for name in names:
            path = Path(folder, name)
            twin = theirs / path.relative_to(ours)
            if path.is_symlink() or not twin.is_file() or twin.is_symlink():
                continue
            stat, twin_stat = path.stat(), twin.stat()
            if stat.st_ino == twin_stat.st_ino or stat.st_size != twin_stat.st_size:
                continue
            if not filecmp.cmp(path, twin, shallow=False):
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
