"""Let ``pip install dm-meltingpot`` build on a machine that reaches only the package registries.

dm-meltingpot is an sdist whose ``setup.py`` (``BuildPy.download_assets``) downloads its bots' TensorFlow models,
``meltingpot-assets-2.3.0.tar.gz``, unless that file is already in ``tempfile.gettempdir()``. Its substrates need
none of them: this writes a tarball there holding an empty ``assets/saved_models/``, so the build passes without the
download (the bots, Melting Pot's scenarios, are then absent; marl-envs builds substrates only). A tarball already
there (the real one, or ours) is left as it is. ``make setup`` runs it before pip.
"""

import io
import os
import tarfile
import tempfile

NAME = "meltingpot-assets-2.3.0.tar.gz"


def main() -> None:
    path = os.path.join(tempfile.gettempdir(), NAME)
    if os.path.exists(path):
        return
    with tarfile.open(path + ".part", "w:gz") as tar:
        for folder in ("assets", "assets/saved_models"):
            entry = tarfile.TarInfo(folder)
            entry.type, entry.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(entry, io.BytesIO())
    os.replace(path + ".part", path)
    print(f"wrote {path}: Melting Pot's assets without its bots' models")


if __name__ == "__main__":
    main()
