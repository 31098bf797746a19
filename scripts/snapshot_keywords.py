"""Regenerate ``src/marl_envs/_core/keywords_snapshot.json``: the keywords each env of the backends whose libraries
take ``**kwargs`` accepts, with their defaults, read from the installed libraries' source (this imports those
backends), stamped with the versions they were read from (``marl_envs._core.names.stamp``).

    .venv/bin/python scripts/snapshot_keywords.py

A backend not installed here keeps the entry it had. ``tests/test_keywords.py`` fails until this is rerun after a
backend's version changes; the package itself reads only the JSON (``marl_envs._core.keywords``).

What is read:

- VMAS: each scenario's ``make_world(**kwargs)``: the keys it reads (``kwargs.pop("n_agents", 3)``), and those of the
  scenario's methods it passes ``**kwargs`` to (football's ``self.init_params(**kwargs)``);
- JaxMARL, Brax, Jumanji: the env class's ``__init__`` and, where that takes ``**kwargs``, the keys it reads and the
  keywords of what it passes them to (``super().__init__``, a class of its module by name); an env whose keywords
  go anywhere else is declared ``null`` (not checked). JaxMARL's classes are read from ``jaxmarl.make``'s if-chain.
"""

from __future__ import annotations

import ast
import inspect
import json
import sys
import textwrap
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

from marl_envs import registry
from marl_envs._core import keywords, names

TARGET = keywords.SNAPSHOT_FILE
Keywords = keywords.Keywords


def literal(node: ast.expr) -> str | None:
    """The repr of the constant ``node`` spells (``3``, ``(1200, 800)``, ``-0.5``), None for any other expression."""
    try:
        return repr(ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def value_repr(value: Any) -> str | None:
    """The repr of a signature default that reads back as the same constant, None for any other (an object, an
    array: reprs that may change from run to run) and for no default."""
    if value is inspect.Parameter.empty:
        return None
    text = repr(value)
    try:
        ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return text


class KeywordUse(NamedTuple):
    """What a function does with its ``**kwargs`` dict (``keyword_use``)."""

    reads: Keywords  # the keys it reads (``kwargs["x"]``, ``.get``, ``.pop``, ``"x" in kwargs``), with their defaults
    forwards: list[ast.expr]  # the callees it passes ``**kwargs`` to (``super().__init__``, a class by name, ...)
    closed: bool  # every use of the dict is one of those: no key can be read another way (``kwargs.items()``)


def keyword_use(function: Callable[..., Any]) -> KeywordUse | None:
    """How ``function`` uses its ``**kwargs`` dict, read from its source (None without source or ``**kwargs``).

    A key's default: ``.get("x", 3)`` / ``.pop("x", 3)`` -> ``"3"``, ``.get("x")`` -> ``"None"``; None where the
    default is not a constant or there is none (``kwargs["x"]``, ``.pop("x")``).
    """
    try:
        params = inspect.signature(function).parameters.values()
        var = next(p.name for p in params if p.kind is p.VAR_KEYWORD)
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, ValueError, SyntaxError, StopIteration):
        return None
    is_var = lambda node: isinstance(node, ast.Name) and node.id == var  # noqa: E731
    key = lambda node: node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None  # noqa: E731
    reads: Keywords = {}
    forwards, understood, dynamic = [], [], False  # understood: the uses of the dict read above

    def read(node: ast.expr, default: str | None) -> None:
        nonlocal dynamic
        name = key(node)
        if name is None:
            dynamic = True
        elif reads.get(name) is None:  # the first constant default found
            reads[name] = default

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_var(node.value):
            read(node.slice, None)
            understood.append(node.value)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                and is_var(node.comparators[0]):
            read(node.left, None)
            understood.append(node.comparators[0])
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and is_var(func.value) and func.attr in ("get", "pop") and node.args:
                if len(node.args) > 1:
                    default = literal(node.args[1])
                else:
                    default = "None" if func.attr == "get" else None
                read(node.args[0], default)
                understood.append(func.value)
            for k in node.keywords:
                if k.arg is None and is_var(k.value):
                    forwards.append(func)
                    understood.append(k.value)
    uses = [node for node in ast.walk(tree) if is_var(node)]
    return KeywordUse(reads, forwards, not dynamic and len(uses) == len(understood))


def _is_super_init(func: ast.expr) -> bool:
    """``func`` is ``super().__init__``."""
    return (isinstance(func, ast.Attribute) and func.attr == "__init__" and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name) and func.value.func.id == "super")


def init_keywords(cls: type) -> Keywords | None:
    """The keywords a library's class takes with their defaults, None where they cannot be told.

    Its ``__init__``'s, and where that takes ``**kwargs``: the keys it reads from them, and the keywords of what
    it passes them to (``super().__init__``, a class of its module by name); None once they go anywhere else. A
    keyword met twice keeps its first default (a subclass's over its base's).
    """
    accepted: Keywords = {}

    def add(found: Keywords) -> None:
        for name, default in found.items():
            accepted.setdefault(name, default)

    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]
        add({p.name: value_repr(p.default) for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)})
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return accepted
        use = keyword_use(init)
        if use is None or not use.closed:  # the keys it takes cannot be told from its source
            return None
        add(use.reads)
        onward = False
        for func in use.forwards:
            target = vars(sys.modules[klass.__module__]).get(func.id) if isinstance(func, ast.Name) else None
            if _is_super_init(func):
                onward = True
            elif isinstance(target, type) and (inner := init_keywords(target)) is not None:
                add(inner)
            else:
                return None
        if not onward:
            return accepted
    return None


def scenario_keywords(cls: type, method: str = "make_world", seen: frozenset[str] = frozenset()) -> Keywords | None:
    """The keywords a VMAS scenario class reads in ``make_world(**kwargs)``, and in the methods of its own it passes
    ``**kwargs`` to (``self.init_params(**kwargs)``); None where its source cannot be read. VMAS warns about the
    keywords a scenario leaves unread: these only name the ones it reads."""
    function = getattr(cls, method)
    if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(function).parameters.values()):
        return {}  # no **kwargs: no scenario keyword
    use = keyword_use(function)
    if use is None:
        return None
    found = dict(use.reads)
    for func in use.forwards:
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"
                and func.attr not in seen | {method} and callable(getattr(cls, func.attr, None))):
            for name, default in (scenario_keywords(cls, func.attr, seen | {method}) or {}).items():
                found.setdefault(name, default)
    return found


def _vmas() -> dict[str, Keywords | None]:
    from marl_envs.backends.vmas._scenarios import env_names, load_scenario

    return {name: scenario_keywords(type(load_scenario(name))) for name in env_names()}


def _brax() -> dict[str, Keywords | None]:
    from marl_envs.backends.brax._compat import import_brax

    return {robot: init_keywords(cls) for robot, cls in import_brax()._envs.items()}


def jaxmarl_classes() -> dict[str, type]:
    """JaxMARL env name -> the class ``jaxmarl.make`` builds for it, read from ``make``'s source (an if-chain on the
    name: JaxMARL keeps no table); a name ``make`` builds by a function (``MPE_simple_facmac_3a_v1``) is left out."""
    from marl_envs.backends.jaxmarl._env import import_jaxmarl

    registration = sys.modules[import_jaxmarl().make.__module__]
    classes: dict[str, type] = {}

    def visit(body: list[ast.stmt], name: str | None) -> None:
        for node in body:
            if isinstance(node, ast.If):
                test = node.test
                equal = (isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.Eq)
                         and isinstance(test.comparators[0], ast.Constant))
                visit(node.body, test.comparators[0].value if equal else name)
                visit(node.orelse, name)
            elif isinstance(node, ast.Assign) and name and isinstance(node.value, ast.Call) \
                    and isinstance(node.value.func, ast.Name):
                cls = getattr(registration, node.value.func.id, None)
                if isinstance(cls, type):
                    classes[name] = cls

    visit(ast.parse(textwrap.dedent(inspect.getsource(registration.make))).body[0].body, None)
    return classes


def _jaxmarl() -> dict[str, Keywords | None]:
    from marl_envs.backends.jaxmarl._env import env_names, library_name

    classes = jaxmarl_classes()
    out: dict[str, Keywords | None] = {}
    for name in env_names():
        cls = classes.get(library_name(name))
        out[name] = None if cls is None else init_keywords(cls)
    return out


def _jumanji() -> dict[str, Keywords | None]:
    from marl_envs.backends.jumanji._env import env_names, import_jumanji

    jumanji = import_jumanji()
    registry_ = jumanji.registration._REGISTRY
    return {name: init_keywords(jumanji.registration.load(registry_[name].entry_point)) for name in env_names()}


#: The backends whose libraries take ``**kwargs``, and how their envs' keywords are read.
READERS: dict[str, Callable[[], dict[str, Keywords | None]]] = {
    "brax": _brax, "jaxmarl": _jaxmarl, "jumanji": _jumanji, "vmas": _vmas,
}


def live(backend: str) -> dict[str, Any]:
    """``backend``'s entry of the snapshot, read now from the installed library: ``{"versions", "envs"}``."""
    versions = names.stamp(registry.backend_record(backend).extra)
    if versions is None:
        raise SystemExit("marl-envs is not installed (no metadata to stamp the keywords with): pip install -e .")
    with warnings.catch_warnings():  # importing the libraries and building scenarios warns about unrelated things
        warnings.simplefilter("ignore")
        envs = READERS[backend]()
    return {"versions": versions, "envs": dict(sorted(envs.items()))}


def main() -> None:
    snapshot = dict(keywords.snapshot()) if TARGET.exists() else {}
    for backend in READERS:
        if not registry.backend_installed(backend):
            print(f"{backend}: not installed, entry kept")
            continue
        snapshot[backend] = live(backend)
        envs = snapshot[backend]["envs"]
        print(f"{backend}: {len(envs)} envs ({sum(e is None for e in envs.values())} undeclared), "
              f"{snapshot[backend]['versions']}")
    # one keyword a line, envs and backends sorted, keywords in the library's order (the messages list them so)
    TARGET.write_text(json.dumps(dict(sorted(snapshot.items())), indent=1) + "\n")
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
