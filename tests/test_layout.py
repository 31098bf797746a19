"""The package's layout: a backend declares itself once, no module reads another package's private names, and
``docs/architecture.md`` lists the modules the package has."""

import ast
import importlib.util
import itertools
import re
import sys
import textwrap
from pathlib import Path

import pytest

import marl_envs
from marl_envs import registry

SRC = Path(marl_envs.__file__).resolve().parent.parent
ARCHITECTURE = SRC.parent / "docs" / "architecture.md"

TOY_INIT = '''
"""A backend of one env, declared as the built-in ones are."""

from marl_envs.registry import Backend

BACKEND = Backend(
    __name__,
    packages=("json",),
    extra="toy",
    name="toy",
    env_class="ToyDrift",
    check_env=("toy/drift", {"n_agents": 3}),
    exports=("ToyDrift",),
    title="Toy",
    distributions=("packaging",),
)
__getattr__, __dir__ = BACKEND.lazy_attributes()
'''
TOY_ENV = '''
from envs import Drift
from marl_envs.registry import unknown_env


class ToyDrift(Drift):
    """``Drift`` as a backend's env class: it refuses a name it does not build, the one check of a name."""

    def __init__(self, name, *, seed=None, **kwargs):
        if name not in env_names():
            raise unknown_env("toy env", name, env_names())
        super().__init__(**kwargs)
        if seed is not None:
            self.set_seed(seed)


def env_names():
    return ["drift"]
'''
TOY_BENCH = '''
from marl_envs.bench import References


class Idle:
    def __call__(self, steps):
        pass

    def sync(self):
        pass


BENCH = References(default_num_envs=2, loops=lambda env, plan, chunks: ({"raw toy loop": Idle()}, {}))
'''


@pytest.fixture
def toy_backend(tmp_path, monkeypatch):
    """A backend package outside marl_envs, registered through its record (``register_backend``)."""
    package = tmp_path / "toy_backend"
    package.mkdir()
    for name, text in {"__init__": TOY_INIT, "_env": TOY_ENV, "bench": TOY_BENCH}.items():
        (package / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # its listed names are cached there
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))
    monkeypatch.setattr(registry, "_NAME_CACHE", {})
    import toy_backend

    registry.register_backend(toy_backend.BACKEND)
    yield toy_backend
    for module in [m for m in sys.modules if m.startswith("toy_backend")]:
        del sys.modules[module]


def _catalogue():
    spec = importlib.util.spec_from_file_location("env_catalogue", SRC.parent / "docs" / "_ext" / "env_catalogue.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_backend_declared_once_is_built_listed_checked_benchmarked_and_exported(toy_backend, capsys):
    """The package and its record are all a backend needs: make, list, info, the doctor, the bench and the
    catalogue read the record."""
    from marl_envs import bench, cli, doctor

    assert "toy" in marl_envs.available_backends() and marl_envs.backend_installed("toy")
    assert marl_envs.available_envs("toy") == ["toy/drift"]
    env = marl_envs.make("toy/drift", num_envs=2, n_agents=3)
    assert env.reset()["agents", "observation"].shape == (2, 3, 1)
    with pytest.raises(ValueError, match=r"^unknown toy env 'toy/drif'; did you mean 'toy/drift'\? available: "
                                         r"toy/drift \(marl_envs.available_envs\('toy'\) lists them all\)$"):
        marl_envs.make("toy/drif", num_envs=2)
    assert marl_envs.ToyDrift is toy_backend.ToyDrift is type(env)  # the record's exports, from the top level
    rows = doctor.run(backends=["toy"], devices=["cpu"]).rows
    assert [(r.check, r.where, r.status) for r in rows] == [("toy", "cpu", "ok")]
    labels = [label for label, _, _ in bench.run("toy/drift", steps=4, rounds=2)]
    assert labels[:2] == ["marl_envs ToyDrift, auto-reset", "raw toy loop"]
    assert cli.main(["list", "toy"]) == 0 and capsys.readouterr().out == "toy/drift\n"
    assert cli.main(["info", "toy/drift", "n_agents=3"]) == 0
    info = capsys.readouterr().out
    assert info.startswith("toy/drift: ToyDrift(num_envs=1, groups={agents: 3}") and "agents.observation " in info
    assert "packaging" in doctor.PACKAGES  # its distributions' versions are shown
    record = bench.record("toy/drift", 2, 4, 2, "cpu", {}, [("ours", 1.0, 8), ("raw toy loop", 1.0, 8)], "test")
    assert set(record["versions"]) == {"marl-envs", "torch", "packaging"}
    catalogue = _catalogue()
    assert "toy/drift" in catalogue.catalogue_names() and catalogue.backend_title("toy") == "Toy"
    assert "| [Toy](backends/toy.md) | `toy/...` | `pip install -e '.[toy]'` |" in catalogue.backends_table()
    assert "\n| Toy | `" in catalogue.families_table()  # the architecture page's table of packages
    entry = catalogue.compute_entry("toy/drift")
    assert entry["backend"] == "toy" and entry["group_map"] == {"agents": ["agent_0", "agent_1"]}  # Drift's default


def test_a_backend_name_is_registered_once():
    record = registry.backend_record("vmas")
    registry.register_backend(record)  # the same record again: nothing changes
    with pytest.raises(ValueError, match=r"a backend named 'vmas' is registered already \(marl_envs.backends.vmas\); "
                                         r"pass overwrite=True to replace it"):
        registry.register_backend(registry.Backend("elsewhere.vmas", ("vmas",), "vmas"))
    with pytest.raises(TypeError, match=r"register_backend takes a marl_envs.registry.Backend, got 'vmas'"):
        registry.register_backend("vmas")


def test_every_builtin_backend_is_a_package_with_a_record():
    backends = SRC / "marl_envs" / "backends"
    packages = sorted(p.name for p in backends.iterdir() if (p / "__init__.py").exists() and not p.name.startswith("_"))
    assert sorted(marl_envs.available_backends()) == [p for p in packages if p != "jax"]  # jax: the shared JAX core
    for name, record in registry.backends().items():
        assert record.module == f"marl_envs.backends.{name}" and record.check_env[0].startswith(f"{name}/")
        assert (backends / name / "_env.py").exists()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def _is_module(dotted: str) -> bool:
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def private_reads(path: Path) -> list[str]:
    """Where a module of ours reads a private name of another of our packages or modules: an ``_name`` module or
    package is private to the package holding it (and that package's subpackages), an ``_name`` attribute to
    its module."""
    module, is_package = _module_name(path)
    package = module if is_package else module.rpartition(".")[0]
    found = []

    def check(target: str, line: int) -> None:
        parts = target.split(".")
        for i, part in enumerate(parts[1:], 1):
            owner = ".".join(parts[:i])
            if _private(part) and not (module == owner or module.startswith(owner + ".")):
                found.append(f"{path.relative_to(SRC)}:{line}: {target}")
                return

    aliases = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if not target.startswith(("marl_envs", "groupings")):
                continue  # third-party private reads are not ours to rename (jax_started's is guarded)
            check(target, node.lineno)
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if _is_module(full):
                    check(full, node.lineno)
                    aliases[alias.asname or alias.name] = full
                elif _private(alias.name) and module != target:
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}: {full}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(("marl_envs", "groupings")):
                    check(alias.name, node.lineno)
                    aliases[alias.asname or alias.name] = alias.name
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
              and _private(node.attr)):
            full = f"{aliases[node.value.id]}.{node.attr}"
            if _is_module(full):
                check(full, node.lineno)
            elif aliases[node.value.id] != module:
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {full}")
    return found


def test_no_module_reads_another_packages_private_names():
    found = [hit for path in sorted(SRC.rglob("*.py")) for hit in private_reads(path)]
    assert not found, "\n".join(found)


def test_the_private_name_scan_sees_what_it_should(tmp_path):
    """The scan itself: a read of another package's private module, or of another module's private name."""
    cases = {
        "from ..brax import _scenes": True, "from ..brax._scenes import partition": True,
        "from ...registry import _BACKENDS": True, "from ... import registry\nregistry._BACKENDS": True,
        "from ..._core.env import EnvBase": False, "from .._quiet import quiet_import": False,
        "from . import _env": False,
    }
    package = SRC / "marl_envs" / "backends" / "playground"
    for code, expected in cases.items():
        probe = package / "_probe_layout_test.py"
        probe.write_text(code + "\n")
        try:
            assert bool(private_reads(probe)) is expected, code
        finally:
            probe.unlink()


def _listed_modules(text: str) -> set[str]:
    """The modules and packages the tree of ``docs/architecture.md`` names, as paths under ``src/``: a line starts
    with its names (``name.py``, ``name/``), indented two spaces a level; names after a package's on its line are
    its modules."""
    block = re.search(r"```\nsrc/\n(.*?)```", text, re.S).group(1)
    listed, stack = set(), []
    for line in block.splitlines():
        names = list(itertools.takewhile(lambda token: re.fullmatch(r"\w+(\.py|/)", token), line.split()))
        if not names:
            continue  # a description carried over
        del stack[(len(line) - len(line.lstrip())) // 2 - 1:]
        if names[0].endswith("/"):
            listed.add("/".join([*stack, names[0][:-1]]))
            stack.append(names.pop(0)[:-1])
        listed.update("/".join([*stack, name]) for name in names)
    return listed


def test_architecture_page_lists_the_modules_of_the_package():
    listed = _listed_modules(ARCHITECTURE.read_text())
    actual = set()
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC)
        if "__pycache__" in relative.parts or relative.name in ("__init__.py", "__main__.py"):
            continue
        actual.add(str(relative))
    for path in SRC.rglob("*.py"):  # every package, namespace packages (no __init__.py) included
        if "__pycache__" not in path.parts:
            actual.add(str(path.parent.relative_to(SRC)))
    actual = {a for a in actual if not a.endswith(".egg-info")}
    # the families' packages are the table the docs build writes from the registry, not the tree
    families = [record.module.replace(".", "/") for record in registry.backends().values()]
    actual = {a for a in actual if not any(a == f or a.startswith(f + "/") for f in families)}
    assert listed == actual, f"missing from the page: {sorted(actual - listed)}; not in the package: {sorted(listed - actual)}"


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(path: Path) -> set[str]:
    """Our modules and packages that the module at ``path`` imports, anywhere in it but under ``TYPE_CHECKING``;
    its own packages (imported before it by Python anyway) are left out."""
    module, is_package = _module_name(path)
    package = module if is_package else module.rpartition(".")[0]
    targets = set()
    tree = ast.parse(path.read_text())
    skipped = {id(n) for top in ast.walk(tree) if _type_checking_only(top) for n in ast.walk(top)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            names = [f"{target}.{alias.name}" for alias in node.names]
            found = [name for name in names if _is_module(name)] or [target]
        elif isinstance(node, ast.Import):
            found = [alias.name for alias in node.names]
        else:
            continue
        if id(node) in skipped:
            continue
        targets.update(t for t in found if _is_module(t) and t.startswith(("marl_envs", "groupings")))
    return {t for t in targets if not (module == t or module.startswith(t + "."))}


def import_circles(paths) -> list[list[str]]:
    """Every strongly connected set of more than one module in the graph of ``imports_of`` (Tarjan's algorithm)."""
    graph = {_module_name(path)[0]: imports_of(path) for path in paths}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                circles.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def _sources():
    return [path for path in sorted(SRC.rglob("*.py")) if "__pycache__" not in path.parts]


def test_no_import_circle_in_the_package():
    circles = import_circles(_sources())
    assert not circles, "modules importing each other: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_import_circle_scan_sees_a_circle(tmp_path):
    """The scan itself: two modules importing each other (one inside a function) are a circle; an import
    under ``TYPE_CHECKING`` is not."""
    package = SRC / "marl_envs" / "_core"
    first, second = package / "_probe_circle_a.py", package / "_probe_circle_b.py"
    try:
        first.write_text("from . import _probe_circle_b\n")
        second.write_text("def f():\n    from ._probe_circle_a import x\n")
        assert import_circles([first, second]) == [["marl_envs._core._probe_circle_a", "marl_envs._core._probe_circle_b"]]
        second.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._probe_circle_a import x\n")
        assert import_circles([first, second]) == []
    finally:
        first.unlink(missing_ok=True)
        second.unlink(missing_ok=True)


MAX_LINES = 500


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(SRC)): n for p in _sources() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"
