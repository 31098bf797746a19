"""Every ```python block of the docs and README runs, top to bottom, one namespace per file (each block in its own
on a page marked ``STANDALONE``); the env catalogue lists exactly the registered envs."""

import importlib.util
import json
import os
import re
import sys
import warnings
from pathlib import Path

import pytest

import marl_envs

ROOT = Path(__file__).resolve().parent.parent
DOCS_DIR = ROOT / "docs"
GENERATED = ("_build", "envs", "_generated")  # the built site, the catalogue pages and the results table
DOCS = sorted(p for p in DOCS_DIR.rglob("*.md") if p.relative_to(DOCS_DIR).parts[0] not in GENERATED)
DOCS.append(ROOT / "README.md")
#: Reference pages: their content is generated from the code (autodoc, the CLI's parser), not examples.
REFERENCE = ("api",)
#: Pages that only include a table generated from records (the benchmark records), not examples.
GENERATED_TABLES = ("performance_records.md", "baselines.md")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
#: A page holding this line promises that each of its blocks runs when copied alone: each runs in a namespace of
#: its own (other pages are tutorials, whose blocks build on the ones before).
STANDALONE = "<!-- docs test: every block runs alone -->"


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_docs_have_code():
    guides = [p for p in DOCS if p.name not in ("README.md", *GENERATED_TABLES)
              and p.relative_to(DOCS_DIR).parts[0] not in REFERENCE]
    assert len(guides) >= 8
    assert [_name(p) for p in guides if not BLOCK.search(p.read_text())] == []


#: Pages that need an optional library: page -> (its module, the variable make test sets where it is installed, the
#: virtualenv that has it).
NEEDS = {"torchrl.md": ("torchrl", "MARL_ENVS_REQUIRE_TORCHRL", ".venv-torchrl"),
         "torchrl_classes.md": ("torchrl", "MARL_ENVS_REQUIRE_TORCHRL", ".venv-torchrl"),
         "torchrl_scripts.md": ("torchrl", "MARL_ENVS_REQUIRE_TORCHRL", ".venv-torchrl"),
         "benchmarl.md": ("benchmarl", "MARL_ENVS_REQUIRE_BENCHMARL", ".venv-benchmarl")}


#: Warnings a library emits about its own code while a page runs (BenchMARL 1.5.2 builds TorchRL 0.11's
#: deprecated collector).
LIBRARY_WARNINGS = {"benchmarl.md": [(".*SyncDataCollector has been deprecated", DeprecationWarning)]}


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_doc_blocks_run(path, monkeypatch, tmp_path):
    module, required, venv = NEEDS.get(path.name, (None, None, None))
    if module is not None and importlib.util.find_spec(module) is None:
        if os.environ.get(required) == "1":
            pytest.fail(f"{path.name} needs {module}, which {required} says is installed")
        pytest.skip(f"docs/{path.name} runs in {venv} (make test runs it there)")
    if module is not None:
        with warnings.catch_warnings():  # torchrl 0.14.1 deprecates its own weight updaters on import
            warnings.filterwarnings("ignore", message=".*inherits from WeightUpdaterBase is deprecated",
                                    category=DeprecationWarning)
            import torchrl.collectors  # noqa: F401
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        for message, category in LIBRARY_WARNINGS.get(path.name, ()):
            warnings.filterwarnings("ignore", message=message, category=category)
        run_blocks(path.read_text(), path.name)


def run_blocks(text: str, name: str) -> None:
    """Run a page's blocks top to bottom: in one namespace, or each in a fresh one on a ``STANDALONE`` page."""
    alone = STANDALONE in text
    namespace = {"__name__": f"doc_{Path(name).stem}"}
    for i, block in enumerate(BLOCK.findall(text)):
        code = compile(block, f"{name}[block {i}]", "exec")
        exec(code, {"__name__": f"doc_{Path(name).stem}_{i}"} if alone else namespace)


def test_standalone_page_runs_each_block_alone():
    """A block that leans on an earlier block's import passes on a tutorial page, fails on a STANDALONE one."""
    page = "```python\nimport math\n```\n\n```python\nmath.pi\n```\n"
    run_blocks(page, "tutorial.md")
    with pytest.raises(NameError, match="math"):
        run_blocks(f"{STANDALONE}\n\n{page}", "standalone.md")


# --------------------------------------------------------------------------------------------------
# The env catalogue (docs/_ext/env_catalogue.py)
# --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def catalogue():
    spec = importlib.util.spec_from_file_location("env_catalogue", DOCS_DIR / "_ext" / "env_catalogue.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_entry(name: str) -> dict:
    return {
        "name": name, "backend": name.partition("/")[0], "build": {"num_envs": 2, "seed": 0}, "repr": name,
        "group_map": {"agents": ["agent_0"]}, "group_table": [["group", "agents", "n"], [["agents", "agent_0", "1"]]],
        "spec_table": [["key", "role", "shape", "dtype", "spec"], [["done", "done", "(2, 1)", "bool", "Binary"]]],
        "keywords": [], "keywords_from": "nowhere", "seconds": 0.0,
    }


def _listed(out: Path) -> list[str]:
    """The env names the generated backend pages list (from their tables of links)."""
    names = []
    for page in sorted(out.glob("*/index.md")):
        cells = re.findall(r"\[`([^`]+)`\]\([^)]+\.md\)", page.read_text())
        names += [cell.replace("\\|", "|") for cell in cells]  # a table cell escapes | (GFM)
    return names


def test_catalogue_lists_exactly_the_registered_envs(catalogue, tmp_path, monkeypatch):
    monkeypatch.setattr(marl_envs.registry, "_USER_ENVS", {})  # the tests' idiom (tests/test_registry.py)
    marl_envs.register("docs_test/user_env", lambda **kw: None)  # user envs are not listed
    names = catalogue.catalogue_names()
    assert "docs_test/user_env" in marl_envs.available_envs()
    assert sorted(names) == sorted(set(marl_envs.available_envs()) - set(marl_envs.available_envs("user")))
    cache, out, manifest = tmp_path / "cache", tmp_path / "envs", tmp_path / "pictures.json"
    keys = catalogue.entry_keys(names)
    pictures = {}
    for i, name in enumerate(names):  # a filled cache: generate() computes nothing, it writes the pages
        (cache / keys[name]).mkdir(parents=True)
        (cache / keys[name] / "record.json").write_text(json.dumps(_fake_entry(name)))
        if i % 3 == 0:
            pictures[name] = {"key": "k", "file": f"{name.partition('/')[0]}/{catalogue.stem(name)}.png"}
        elif i % 3 == 1:
            pictures[name] = {"key": "k", "why": "RuntimeError: no OpenGL here"}
    manifest.write_text(json.dumps(pictures))
    (out / "vmas").mkdir(parents=True)
    (out / "vmas" / "unregistered.md").write_text("stale")
    assert catalogue.generate(cache, out, manifest) == names
    assert sorted(_listed(out)) == sorted(names)
    assert not (out / "vmas" / "unregistered.md").exists()
    pages = {p for p in out.rglob("*.md") if p.name != "index.md"}
    assert len(pages) == len(names)
    for i, name in enumerate(names):
        backend = name.partition("/")[0]
        page = (out / backend / f"{catalogue.stem(name)}.md").read_text()
        assert page.startswith(f"# {name}\n")
        if i % 3 == 0:  # the committed picture, from the page's folder
            assert f"../../img/envs/{backend}/{catalogue.stem(name)}.png" in page
        elif i % 3 == 1:
            # the reader's words, not the exception's text (kept in the manifest)
            backend_title = catalogue.backend_title(backend)
            assert f"No picture: {backend_title} could not draw this env on the machine that built" in page
            assert "no OpenGL here" not in page and "RuntimeError" not in page
        else:
            assert "No picture yet: `make pictures` renders it." in page


def test_catalogue_landing_is_a_gallery_filtered_by_tag(catalogue, tmp_path):
    """A card per family with its picture (or why it has none), its count and per-tag counts; a button per tag."""
    def entry(name, actions, groups=("agents",), mask=False):
        rows = [[f"{g}.action", "action", "(2, 1)", "float32", spec] for g, spec in zip(groups, actions)]
        rows += [["agents.action_mask", "observation", "(2, 1, 3)", "bool", "Binary"]] if mask else []
        return {**_fake_entry(name), "group_map": {g: ["a"] for g in groups}, "spec_table": [[], rows]}

    vmas = [entry("vmas/a", ["Bounded[-1, 1]"]), entry("vmas/b", ["Categorical(n=5)"], groups=("red", "blue"))]
    spiel = [entry("openspiel/c", ["Categorical(n=3)"], mask=True)]
    assert catalogue.env_tags(vmas[1]) == {"discrete", "groups", "gpu"}
    assert catalogue.env_tags(spiel[0]) == {"discrete", "masks"}
    assert catalogue.env_tags(entry("brax/d", ["Bounded[-1, 1]"])) == {"continuous", "differentiable", "gpu"}
    pictures = {"vmas/b": {"key": "k", "file": "vmas/balance.gif"},
                "openspiel/c": {"key": "k", "why": "ValueError: these envs draw no images"}}
    page = catalogue._index_page({"vmas": vmas, "openspiel": spiel}, [], pictures, tmp_path)
    assert (tmp_path / "vmas.gif").exists() and '<img src="../_static/covers/vmas.gif"' in page
    assert '<div class="no-picture">No pictures: OpenSpiel draws no picture of this env.</div>' in page
    assert ('<a class="env-card" href="vmas/index.html" data-all="2" data-continuous="1" data-discrete="1" '
            'data-masks="0" data-groups="1" data-differentiable="0" data-gpu="2">') in page
    assert all(f'<button data-tag="{tag}">' in page for tag in ["all", *catalogue.TAGS])
    assert "| [OpenSpiel](openspiel/index.md) | 1 | 0 | 1 | 1 | 0 | 0 | 0 |" in page


def test_keys_follow_what_makes_the_entry_and_the_picture(catalogue, monkeypatch):
    names = ["vmas/balance", "vmas/navigation"]
    entries, pictures = catalogue.entry_keys(names), catalogue.picture_keys(names)
    assert entries == catalogue.entry_keys(names) and len(set(entries.values())) == 2
    assert pictures == catalogue.picture_keys(names) and len(set(pictures.values())) == 2
    monkeypatch.setitem(catalogue.PICTURE, "steps", catalogue.PICTURE["steps"] + 1)
    assert catalogue.picture_keys(names)["vmas/balance"] != pictures["vmas/balance"]
    assert catalogue.entry_keys(names) == entries  # the entry does not depend on how the env is pictured
    steps_changed = catalogue.picture_keys(names)
    monkeypatch.setattr(catalogue, "installed_version", lambda distribution: "0.0.0")  # another vmas, pyglet or torch
    assert catalogue.picture_keys(names)["vmas/balance"] != steps_changed["vmas/balance"]
    assert catalogue.entry_keys(names)["vmas/balance"] != entries["vmas/balance"]


def test_catalogue_entry_and_picture_of_a_real_env(catalogue, tmp_path):
    pytest.importorskip("vmas")
    from marl_envs.cli.format import spec_rows

    entry = catalogue.compute_entry("vmas/simple_adversary")
    env = marl_envs.make("vmas/simple_adversary", num_envs=2, seed=0)
    assert entry["group_map"] == env.group_map == {"adversary": ["adversary_0"], "agent": ["agent_0", "agent_1"]}
    assert entry["spec_table"][1] == [list(map(str, row)) for row in spec_rows(env)]
    assert ("n_adversaries", "1") in entry["keywords"]
    stale = {"vmas/renamed": "vmas/renamed.png", "gone/env": "gone/env.png", "rware/kept": "rware/kept.png"}
    for file in stale.values():
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file).write_bytes(b"png")
    (tmp_path / "pictures.json").write_text(json.dumps({n: {"key": "k", "file": f} for n, f in stale.items()}))
    installed = marl_envs.backend_installed
    with pytest.MonkeyPatch.context() as patch:  # rware not installed here: its records stay
        patch.setattr(marl_envs, "backend_installed", lambda b: b != "rware" and installed(b))
        assert catalogue.update_pictures(["vmas/simple_adversary"], folder=tmp_path) == ["vmas/simple_adversary"]
    manifest = catalogue.read_manifest(tmp_path / "pictures.json")
    assert set(manifest) == {"vmas/simple_adversary", "rware/kept"}
    assert (tmp_path / "rware/kept.png").exists() and not (tmp_path / "vmas/renamed.png").exists()
    assert not (tmp_path / "gone/env.png").exists()
    record = manifest["vmas/simple_adversary"]
    assert record["key"] == catalogue.picture_keys(["vmas/simple_adversary"])["vmas/simple_adversary"]
    if "why" in record:  # a machine without EGL: the page says why
        assert record["why"]
    else:
        from PIL import Image

        assert record["file"] == "vmas/simple_adversary.png"
        with Image.open(tmp_path / record["file"]) as image:
            assert image.size[0] > 100 and image.mode == "P"  # a thumbnail on a palette
    assert catalogue.update_pictures(["vmas/simple_adversary"], check=True, folder=tmp_path) == []
    assert not (tmp_path / ".render").exists()
    with pytest.raises(ValueError, match=r"not registered: \['vmas/nope'\]; pass names from marl_envs.available_envs"):
        catalogue.update_pictures(["vmas/nope"], folder=tmp_path)


def test_every_registered_env_has_its_committed_picture(catalogue):
    """The docs never render (a JAX env compiles for that): each registered env's picture, or why it has none, is
    committed with its record, and no picture is left of an env no longer registered."""
    manifest = catalogue.read_manifest()
    names = catalogue.catalogue_names()
    missing = sorted(set(names) - set(manifest))
    assert not missing, f"no picture for {missing}: run make pictures and commit docs/img/envs"
    files = {p.relative_to(catalogue.PICTURES).as_posix() for p in catalogue.PICTURES.rglob("*.*")
             if p.name != "pictures.json"}
    assert files == {record["file"] for record in manifest.values() if "file" in record}
    assert all(("file" in record) != ("why" in record) and record["key"] for record in manifest.values())


def test_training_figures_are_drawn_from_kept_runs_with_their_published_reference(tmp_path, monkeypatch):
    """Each training figure of the docs is declared once (``scripts/training_figures.py``), its runs are kept in
    ``docs/runs`` and it is redrawn from them with the published result, or the reason none is drawn."""
    spec = importlib.util.spec_from_file_location("training_figures", ROOT / "scripts" / "training_figures.py")
    figures = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "training_figures", figures)  # dataclasses look their module up there
    spec.loader.exec_module(figures)
    pages = "\n".join(p.read_text() for p in DOCS)
    for name, figure in figures.FIGURES.items():
        assert f"img/{name}.png" in pages, f"{name}.png is drawn but no page shows it"
        for run in figure.runs:
            assert {"metrics.csv", "summary.json"} <= {p.name for p in (figures.RUNS / run).iterdir()}, run
        for curve in figure.curves:  # another trainer's curve, measured on the same machine
            assert (figures.RUNS / "reference" / curve.rpartition("=")[2]).is_file(), curve
        assert figure.published or figure.curves or any(note.startswith("No published") for note in figure.notes), name
    monkeypatch.setattr(figures, "IMG", tmp_path)
    assert figures.main(["smax_2s3z"]) == 0
    assert (tmp_path / "smax_2s3z.png").read_bytes()[:4] == b"\x89PNG"
    assert figures.main(["smax_2s3m"]) == 2


#: How the README and the MAPPO guide state the demo's training run (make demo's last command)
DEMO_FIGURE = re.compile(r"mean\s+episode\s+reward\s+of\s+(-?\d+\.\d+)\s+\(a\s+random\s+policy:\s+(-?\d+\.\d+)\)\s+after\s+"
                         r"(\d+)\s+s\s+of\s+training")


def test_the_demo_figures_are_the_kept_demo_run():
    """The guide's figures for make demo's MAPPO run are those of the run kept in docs/runs/navigation_s0 (the same
    command and seed, on this code); the README states none (it keeps no run log: it links the docs' tables)."""
    summary = json.loads((ROOT / "docs" / "runs" / "navigation_s0" / "summary.json").read_text())
    kept = (f"{summary['final_mean_episode_reward']:.2f}", f"{summary['random_policy_reward']:.2f}",
            f"{summary['wall_s']:.0f}")
    for page, expected in ((ROOT / "README.md", []), (DOCS_DIR / "mappo.md", [kept])):
        stated = DEMO_FIGURE.findall(page.read_text())
        assert stated == expected, f"{page.name} states {stated}; the kept demo run: {kept}"


def test_the_training_guide_counts_each_example_files_lines():
    """The guide's table of the example files says how long each is; a file that grows or shrinks says it there."""
    stated = re.findall(r"^\| `(examples/[\w.]+)` \| (\d+) \|", (DOCS_DIR / "mappo.md").read_text(), re.M)
    assert len(stated) >= 5
    counted = [(name, str(len((ROOT / name).read_text().splitlines()))) for name, _ in stated]
    assert stated == counted
