"""Every ```python block of the docs and README runs, top to bottom, one namespace per file."""

import importlib.util
import os
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_docs_have_code():
    assert all(BLOCK.search(path.read_text()) for path in DOCS if path.name != "README.md")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_doc_blocks_run(path, monkeypatch, tmp_path):
    if path.name == "torchrl.md" and importlib.util.find_spec("torchrl") is None:
        if os.environ.get("MARL_ENVS_REQUIRE_TORCHRL") == "1":
            pytest.fail("torchrl.md needs torchrl, which MARL_ENVS_REQUIRE_TORCHRL says is installed")
        pytest.skip("docs/torchrl.md runs in .venv-torchrl (make test runs it there)")
    if path.name == "torchrl.md":
        with warnings.catch_warnings():  # torchrl 0.14.1 deprecates its own weight updaters on import
            warnings.filterwarnings("ignore", message=".*inherits from WeightUpdaterBase is deprecated",
                                    category=DeprecationWarning)
            import torchrl.collectors  # noqa: F401
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"doc_{path.stem}"}
    for i, block in enumerate(BLOCK.findall(path.read_text())):
        code = compile(block, f"{path.name}[block {i}]", "exec")
        exec(code, namespace)
