import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the test envs in tests/envs.py

# MuJoCo picks its OpenGL backend when it is first imported, and some tests import it through a library (``import
# jaxmarl`` imports MABrax, Brax and MuJoCo) before any env of ours is built: headless rendering is set up first, as
# the first MuJoCo env built would, so that the rendering tests do not depend on which test file ran before.
from marl_envs.backends._mujoco import prepare_mujoco_gl  # noqa: E402

prepare_mujoco_gl()

# Where each test runs (`make test`). The whole suite runs once, in .venv: the newest tensordict the core supports,
# every backend, no TorchRL (the TorchRL and BenchMARL tests skip there). The two other virtualenvs change only the
# versions of TorchRL, BenchMARL and TensorDict, so they run only the tests marked `versions` (`pytest -m versions`):
# .venv-torchrl (TorchRL 0.14, tensordict 0.14) and .venv-benchmarl (BenchMARL 1.5.2, TorchRL 0.11, tensordict
# 0.11). Each entry is a node-id prefix and the reason it depends on those versions.
VERSIONS = {
    "tests/test_torchrl.py": "the TorchRL interop: TorchRL's EnvBase, specs and transforms move between its minors",
    "tests/test_torchrl_classes.py": "TorchRL's class names compared with TorchRL's own classes",
    "tests/test_torchrl_value_based.py": "TorchRL's Q-value modules, losses and spec dispatch on masked envs",
    "tests/test_benchmarl.py": "BenchMARL's tasks and Experiment, with the TorchRL they pin",
    "tests/test_benchmarl_cli.py": "BenchMARL's command line (Hydra) with our tasks",
    "tests/test_torchrl_scripts.py": "what TorchRL's multi-agent example scripts ask of an env",
    "tests/test_examples.py::test_mappo_torchrl": "the TorchRL example's losses, collectors and checkpoints",
    "tests/test_docs.py::test_doc_blocks_run[docs/torchrl.md]": "the TorchRL page's code",
    "tests/test_docs.py::test_doc_blocks_run[docs/torchrl_classes.md]": "the TorchRL class names page's code",
    "tests/test_docs.py::test_doc_blocks_run[docs/torchrl_scripts.md]": "the TorchRL scripts page's code",
    "tests/test_docs.py::test_doc_blocks_run[docs/benchmarl.md]": "the BenchMARL page's code",
    "tests/test_doctests.py::test_docstring_examples[marl_envs.torchrl]": "the TorchRL interop's docstring examples",
    "tests/test_doctests.py::test_docstring_examples[marl_envs.benchmarl]": "the BenchMARL tasks' docstring examples",
    "tests/backends/test_jumanji.py::test_torchrl_check_env_specs": "TorchRL's check_env_specs on Jumanji's "
                                                                     "structured observations",
    "tests/backends/test_playground.py::test_torchrl_check_env_specs": "TorchRL's check_env_specs on Playground",
    "tests/test_specs.py": "our specs are TensorDict's and TorchRL's spec classes, whose API moves between minors",
    "tests/test_env.py": "reset, step, rollout and _reset build and nest TensorDicts",
    "tests/test_checks.py": "check_env_specs compares TensorDicts with specs",
    "tests/test_fuzz.py": "actions and reset masks of every backend through TensorDict inputs",
    "tests/backends/test_pettingzoo.py": "the PettingZoo machinery writes every CPU family's TensorDicts",
    "tests/backends/test_meltingpot_torchrl.py": "Melting Pot beside TorchRL's MeltingpotEnv, and BenchMARL's CNN",
}
#: A smoke test per backend: the first env of each backend in the conformance sweep (check_env_specs, a rollout
#: across episode ends), also marked `versions`.
SMOKE = "tests/test_conformance.py::test_every_registered_env_conforms["


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", default=False, help="also run heavy sweeps (marked slow)")


def pytest_collection_modifyitems(config, items):
    versions = pytest.mark.versions
    smoked = set()
    for item in items:
        if item.nodeid.startswith(tuple(VERSIONS)):
            item.add_marker(versions)
        elif item.nodeid.startswith(SMOKE) and "slow" not in item.keywords:
            backend = item.nodeid[len(SMOKE):].partition("/")[0]
            if backend not in smoked:
                smoked.add(backend)
                item.add_marker(versions)
    if config.getoption("--all"):
        return
    skip = pytest.mark.skip(reason="heavy sweep: run with --all")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
