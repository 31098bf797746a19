"""Every ```python block of the docs and README runs, top to bottom, one namespace per file."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_docs_have_code():
    assert all(BLOCK.search(path.read_text()) for path in DOCS if path.name != "README.md")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_doc_blocks_run(path, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"doc_{path.stem}"}
    for i, block in enumerate(BLOCK.findall(path.read_text())):
        code = compile(block, f"{path.name}[block {i}]", "exec")
        exec(code, namespace)
