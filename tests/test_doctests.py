"""Every docstring example of the package runs: its modules are found by walking ``src/`` (not listed), each
module's examples run where its libraries are installed (a module whose optional library is missing skips, naming
it: ``marl_envs.torchrl`` runs in .venv-torchrl, ``marl_envs.benchmarl`` in .venv-benchmarl)."""

import doctest
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(SRC.rglob("*.py")):
        if ">>> " in path.read_text():
            parts = path.relative_to(SRC).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _modules_with_examples()


def test_the_walk_finds_the_packages_and_their_backends():
    assert {"groupings", "marl_envs", "marl_envs.specs", "marl_envs.registry", "marl_envs.backends.vmas",
            "marl_envs.backends.brax", "marl_envs.torchrl"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
# TorchRL 0.11 and 0.14 deprecate their own weight-updater classes when BenchMARL imports their collectors
@pytest.mark.filterwarnings("ignore:.*inherits from WeightUpdaterBase is deprecated:DeprecationWarning")
def test_docstring_examples(name):
    try:
        module = importlib.import_module(name)
    except ImportError as err:  # an optional library (TorchRL, BenchMARL, a backend's) is not installed here
        pytest.skip(f"{name} needs what is not installed here: {err}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
