"""The baselines table (``docs/baselines.md``) is what the kept runs give, and every result the docs and README
state in a table (a final value, a mean of the last updates, a best) is one of a kept run's or its reference's."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [p for p in sorted((ROOT / "docs").rglob("*.md")) if p.relative_to(ROOT / "docs").parts[0]
         not in ("_build", "envs", "_generated")] + [ROOT / "README.md"]
#: A column (or a transposed table's row) that states a run's result
RESULT = re.compile(r"final|last iteration|last 10|at 1\.49M|its best", re.I)
NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d+")
#: Tables of results that are not kept runs, each with why (a new page stating results must keep its runs)
NOT_KEPT = {
    "docs/benchmarl.md": "BenchMARL's own trainer on our task and on its own, its logs kept as the figure",
    "docs/scaling.md": "one process against torchrun's two ranks: a timing comparison of the same trainer",
    "docs/backends/jumanji.md": "Jumanji's runs, from before runs were kept",
}


@pytest.fixture(scope="module")
def baselines(request):
    spec = importlib.util.spec_from_file_location("baselines", ROOT / "scripts" / "baselines.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["baselines"] = module  # dataclasses look their module up there
    request.addfinalizer(lambda: sys.modules.pop("baselines", None))
    spec.loader.exec_module(module)
    return module


def test_the_baselines_table_is_the_one_the_kept_runs_give(baselines):
    page = baselines.PAGE.read_text()
    assert baselines.main(["--check"]) == 0, "docs/baselines.md's table is stale: run make baselines"
    first = baselines.run_result(baselines.ROWS[0].runs[0])
    stale = page.replace(f"{first.final:.3f}", f"{first.final + 0.1:.3f}", 1)
    assert stale != page and baselines.render(stale) == page  # a figure typed over is written back


def test_a_row_whose_run_is_not_kept_is_refused(baselines, monkeypatch):
    monkeypatch.setattr(baselines, "ROWS", (baselines.Row("t", "x", ("no_such_run",)),))
    with pytest.raises(FileNotFoundError, match=r"no kept run .*no_such_run: run the command of docs/baselines.md"):
        baselines.table()


def kept_figures(baselines) -> set[str]:
    """Every figure a kept run or a reference gives, written with 1, 2 and 3 decimals: per run (or reference curve)
    and column, the last row, the mean of the last 10 and the best; per row of the baselines table (its seeds), their
    mean, lowest and highest of each; the published figures the table cites."""
    values: list[float] = []
    runs: dict[str, list[float]] = {}
    for folder in (ROOT / "docs" / "runs").iterdir():
        files = [folder / "metrics.csv"] if folder.name != "reference" else sorted(folder.glob("*.csv"))
        for file in files:
            rows = baselines.read_rows(file)
            per_run = []
            for column in rows[0]:
                if column in ("frames", "wall_s"):
                    continue
                xs = baselines.numbers(rows, column)
                if xs:
                    per_run += [xs[-1], baselines.mean(xs[-baselines.LAST:]), max(xs)]
            runs[file.stem if folder.name == "reference" else folder.name] = per_run
            values += per_run
        if (folder / "summary.json").is_file():
            values += [v for v in json.loads((folder / "summary.json").read_text()).values()
                       if isinstance(v, float)]
    for row in baselines.ROWS:
        if row.reference and row.reference.published is not None:  # a published figure, marked as such in the table
            values.append(row.reference.published)
        sets = [row.runs] + ([tuple(Path(c).stem for c in row.reference.curves)] if row.reference else [])
        sets = [names for names in sets if names]
        for names in sets:
            for i in range(min(len(runs.get(n, [])) for n in names)):
                xs = [runs[n][i] for n in names]
                values += [baselines.mean(xs), min(xs), max(xs)]
    return {f"{v:.{d}f}" for v in values for d in (1, 2, 3)}


def result_cells(page: str):
    """``(line, cell)`` of each table cell that states a result: under a result column, or in a result row."""
    header = None
    for number, line in enumerate(page.splitlines(), 1):
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|-: "):
            for i, cell in enumerate(cells):
                if (i < len(header) and RESULT.search(header[i])) or (i > 0 and RESULT.search(cells[0])):
                    yield number, cell


def test_every_result_the_docs_state_is_a_kept_runs(baselines):
    kept = kept_figures(baselines)
    stated, foreign = [], []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        for line, cell in result_cells(page.read_text()):
            for figure in NUMBER.findall(cell.replace("**", "")):
                stated.append(figure)
                if figure not in kept and name not in NOT_KEPT:
                    foreign.append(f"{name}:{line}: {figure}")
    assert len(stated) > 50  # the tables are found
    assert foreign == [], "stated results that no kept run gives (keep the run in docs/runs, or correct the figure)"


def test_a_typed_result_is_caught(baselines):
    kept = kept_figures(baselines)
    typed = next(f"{x / 1000:.3f}" for x in range(500, 1000) if f"{x / 1000:.3f}" not in kept)
    page = f"| run | final | random |\n|---|---:|---:|\n| seed 0 | 0.846 | 0.123 |\n| seed 9 | {typed} | 0.9 |\n"
    figures = [f for _, cell in result_cells(page) for f in NUMBER.findall(cell)]
    assert figures == ["0.846", typed]  # the results' column only
    assert [f in kept for f in figures] == [True, False]
