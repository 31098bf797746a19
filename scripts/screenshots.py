"""Screenshots of what a newcomer reads first, taken by a headless Chromium: the README as a repository page renders
it, the docs' landing page, the env catalogue's gallery, one env's page of every family and the performance page.

    make docs && .venv/bin/python scripts/screenshots.py OUT_DIR

Needs Debian's ``chromium`` (``apt-get install chromium``). The README is rendered to HTML with markdown-it (GitHub's
flavour's tables and strikethrough) in a page styled like a repository's README; the docs pages are the
built site's (``docs/_build/html``). Each screenshot is 1280 pixels wide and as tall as ``--height``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "docs" / "_build" / "html"
PAGES = {"docs_landing": "index.html", "catalogue_gallery": "envs/index.html", "performance": "performance.html"}
#: One env of each family, as its catalogue page shows it.
ENV_PAGES = {
    "vmas": "vmas/balance", "brax": "brax/ant_4x2", "playground": "playground/CheetahRun_6x1",
    "pettingzoo": "pettingzoo/sisl-multiwalker_v9", "jaxmarl": "jaxmarl/SMAX", "gymnax": "gymnax/CartPole-v1",
    "jumanji": "jumanji/RobotWarehouse-v0", "openspiel": "openspiel/leduc_poker", "magent2": "magent2/battle_v4",
    "mamujoco": "mamujoco/Ant_4x2", "lbforaging": "lbforaging/Foraging-8x8-2p-2f-coop-v3",
    "rware": "rware/rware-tiny-2ag-v2",
}
PAGES.update({f"env_{family}": f"envs/{name}.html" for family, name in ENV_PAGES.items()})
README_STYLE = """
body { margin: 0; background: #fff; font: 16px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       color: #1f2328; }
.box { max-width: 880px; margin: 24px auto; border: 1px solid #d1d9e0; border-radius: 6px; padding: 8px 32px 32px; }
.bar { font-weight: 600; font-size: 14px; padding: 8px 0; border-bottom: 1px solid #d1d9e0; margin-bottom: 16px; }
h1, h2 { border-bottom: 1px solid #d1d9e0; padding-bottom: .3em; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 85%; background: #f6f8fa;
            border-radius: 6px; }
code { padding: .2em .4em; } pre { padding: 16px; overflow: auto; } pre code { padding: 0; background: none; }
table { border-collapse: collapse; } th, td { border: 1px solid #d1d9e0; padding: 6px 13px; }
img { max-width: 100%; } a { color: #0969da; text-decoration: none; }
"""


def readme_page(folder: Path) -> Path:
    """The README as HTML beside copies of what it links (its pictures), in ``folder``."""
    markdown = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    body = markdown.render((ROOT / "README.md").read_text())
    (folder / "docs").symlink_to(ROOT / "docs")  # the README's pictures live under docs/img
    page = folder / "README.html"
    page.write_text(f"<!doctype html><meta charset=utf-8><style>{README_STYLE}</style>"
                    f'<div class="box"><div class="bar">README.md</div>{body}</div>')
    return page


def screenshot(chromium: str, page: Path, out: Path, height: int) -> None:
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size=1280,{height}", f"--screenshot={out}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    print(f"{out} <- {page}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder for the PNG files")
    parser.add_argument("--height", type=int, default=2000, help="height of each screenshot in pixels")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium found: apt-get install chromium")
    missing = [p for p in PAGES.values() if not (SITE / p).exists()]
    if missing:
        raise SystemExit(f"the built docs lack {missing}: run make docs first")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        screenshot(chromium, readme_page(Path(tmp)), args.out / "readme.png", args.height)
    for name, page in PAGES.items():
        screenshot(chromium, SITE / page, args.out / f"{name}.png", args.height)


if __name__ == "__main__":
    main()
