"""Importing, building and running third-party code quietly: dropping the warnings and printed lines it emits
that are nothing a user can act on; and importing only the module an env needs (``import_alone``), not the
package ``__init__`` above it that imports every env of the library.

The machinery is here, once; what to drop stays with the backend that knows the library (Box2D's SWIG warnings
in the PettingZoo backend, MuJoCo's notices in the Brax one, ...). Only the named warnings and the lines
matching the given pattern are dropped, and only while the block runs: everything else is passed on, and the
warning filters are back as they were afterwards.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Literal

__all__ = ["EVERYTHING", "EVERY_WARNING", "Filter", "filtered_output", "ignored_warnings", "import_alone",
           "quiet_import"]

Filter = tuple[str, type[Warning]]
"""A warning to ignore: ``(message regex, category)``, as ``warnings.filterwarnings`` takes them."""
EVERY_WARNING: Filter = ("", Warning)
EVERYTHING = re.compile(r".*", re.S)
"""A ``drop`` pattern matching whatever was printed."""


@contextlib.contextmanager
def ignored_warnings(*ignore: Filter) -> Iterator[None]:
    """Run the block with the warnings ``ignore`` names ignored (the filters are restored afterwards)."""
    with warnings.catch_warnings():
        for message, category in ignore:
            warnings.filterwarnings("ignore", message=message, category=category)
        yield


@contextlib.contextmanager
def filtered_output(stream: Literal["stdout", "stderr"], drop: re.Pattern[str]) -> Iterator[None]:
    """Run the block with what it prints on ``stream`` captured, then write back what is left once ``drop``
    is removed from it (also when the block raises).

    Capture is at the file-descriptor level as well as Python's, so lines C code prints are caught too.
    ``sys.stdout`` and ``sys.stderr`` are put back afterwards: some libraries reset them on import (JaxMARL's
    MABrax, to ``sys.__stdout__`` / ``sys.__stderr__``), which would break any capture in place (pytest's too).
    """
    fd = 1 if stream == "stdout" else 2
    streams, original = (sys.stdout, sys.stderr), getattr(sys, stream)
    original.flush()
    saved, captured, printed = os.dup(fd), tempfile.TemporaryFile(), io.StringIO()
    os.dup2(captured.fileno(), fd)
    redirect = contextlib.redirect_stdout if stream == "stdout" else contextlib.redirect_stderr
    try:
        with redirect(printed):
            yield
    finally:
        for buffered in (original, getattr(sys, f"__{stream}__")):  # what they hold back goes to the capture too
            if buffered is not None:
                buffered.flush()
        os.dup2(saved, fd)
        os.close(saved)
        sys.stdout, sys.stderr = streams
        captured.seek(0)
        text = captured.read().decode(errors="replace") + printed.getvalue()
        captured.close()
        text = drop.sub("", text)
        if text:
            original.write(text)


def quiet_import(module: str, *ignore: Filter, drop: re.Pattern[str] | None = None, alone: bool = False
                 ) -> ModuleType:
    """``importlib.import_module(module)`` (``alone``: ``import_alone(module)``) with the warnings ``ignore`` names
    ignored and the lines it prints on stdout matching ``drop`` dropped (``filtered_output``)."""
    printed = contextlib.nullcontext() if drop is None else filtered_output("stdout", drop)
    with ignored_warnings(*ignore), printed:
        return import_alone(module) if alone else importlib.import_module(module)


def _completing(name: str, bare: ModuleType):
    """The ``__getattr__`` of the bare package ``name``: an attribute it lacks is read from the real package, imported
    now (its ``__init__`` run once, by the first such read after ``import_alone`` has returned)."""

    def getattr_(attribute: str):
        if sys.modules.get(name) is bare:  # still being imported alone: the real package is not there yet
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        return getattr(importlib.import_module(name), attribute)

    return getattr_


def import_alone(module: str) -> ModuleType:
    """``importlib.import_module(module)`` without running the ``__init__`` of the packages above it that are not
    imported yet.

    A library whose package ``__init__`` imports every env it has (JaxMARL's imports Brax and MuJoCo for its MABrax
    envs, gymnax's seaborn and SciPy for Pong) costs seconds to import for an env that needs one module. Each
    package above ``module`` not in ``sys.modules`` yet is put there as a bare module object (its ``__path__``,
    nothing run) while ``module`` is imported, then taken out again: a later ``import`` of the package (the user's,
    or ours of the whole library) runs its real ``__init__`` and gets the complete package, which reuses the
    submodules already imported (``sys.modules``), so their classes stay the same objects. Only a submodule imported
    here is then missing as an attribute of its package until something imports it by name again (``from package
    import submodule`` finds it). A module imported here that keeps a bare package (``import jumanji``, then
    ``jumanji.environments.is_colab()`` when it draws) gets the real package's attributes from it, imported then.

    Raises:
        ModuleNotFoundError: a package above ``module``, or ``module`` itself, is not installed.
    """
    if module in sys.modules:
        return sys.modules[module]
    parts, placed = module.split("."), []
    try:
        path = None
        for depth in range(1, len(parts)):
            name = ".".join(parts[:depth])
            package = sys.modules.get(name)
            if package is None:
                spec = next((s for finder in sys.meta_path if hasattr(finder, "find_spec")
                             and (s := finder.find_spec(name, path)) is not None), None)
                if spec is None or spec.submodule_search_locations is None:
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                package = importlib.util.module_from_spec(spec)  # its __init__ is not run
                package.__getattr__ = _completing(name, package)
                sys.modules[name] = package
                placed.append((name, package))
            path = package.__path__
        return importlib.import_module(module)
    finally:
        for name, package in placed:
            if sys.modules.get(name) is package:
                del sys.modules[name]
