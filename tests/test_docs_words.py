"""Every page of the docs answers one question, in at most ``LIMIT`` words (``len(text.split())`` of its source)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS_DIR = ROOT / "docs"
GENERATED = ("_build", "_generated", "envs")  # the built site, the included tables and the catalogue pages
LIMIT = 2000


def test_every_page_is_at_most_2000_words():
    pages = sorted(p for p in DOCS_DIR.rglob("*.md") if p.relative_to(DOCS_DIR).parts[0] not in GENERATED)
    assert pages, f"no Markdown page under {DOCS_DIR}"
    counts = {p.relative_to(ROOT).as_posix(): len(p.read_text().split()) for p in pages}
    over = [f"{page} has {words:,} words; a page answers one question in at most {LIMIT:,} words: split it"
            for page, words in counts.items() if words > LIMIT]
    if over:
        pytest.fail("\n".join(over), pytrace=False)
