"""What TorchRL 0.14's multi-agent example scripts (``sota-implementations/multiagent``: MAPPO/IPPO, IQL, QMIX/VDN,
MADDPG/IDDPG, SAC) ask of the env they build, on one env of each family whose specs fit them: everything in the
``"agents"`` group with flat observations, and the evaluation that renders each step and cuts each episode at its
first ``done``. The scripts themselves run unchanged but for the env constructor (``docs/torchrl_scripts.md``); these
tests pin the API they need through ours, and TorchRL's video recorder on every family that draws.

Each check (``torchrl_scripts_checks.py``) runs in a fresh interpreter, as a script does. These run in .venv-torchrl
(``make test`` sets MARL_ENVS_REQUIRE_TORCHRL=1); elsewhere they skip.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_render import ONE_PER_BACKEND

import marl_envs

if os.environ.get("MARL_ENVS_REQUIRE_TORCHRL") != "1":
    pytest.importorskip("torchrl", reason="the TorchRL interop is tested in .venv-torchrl (make test)")
if tuple(int(part) for part in importlib.metadata.version("torchrl").split(".")[:2]) < (0, 14):
    pytest.skip("these are TorchRL 0.14's scripts (.venv-torchrl); the TorchRL 0.11 of .venv-benchmarl records "
                "its videos otherwise", allow_module_level=True)

HAS = {backend: marl_envs.backend_installed(backend) for backend in marl_envs.available_backends()}
#: One env per family whose specs fit the scripts, with its constructor's keywords and the scripts' max_steps.
CONTINUOUS = {
    "brax/ant_4x2": ({}, 20),
    "playground/CheetahRun_6x1": ({}, 20),
    "mamujoco/Ant_4x2": ({"render_mode": "rgb_array"}, 20),
    "pettingzoo/sisl/multiwalker_v9": ({"render_mode": "rgb_array"}, 20),
    "jaxmarl/MPE_simple_spread_v3": ({"action_type": "Continuous"}, 25),
}
DISCRETE = {
    "jaxmarl/MPE_simple_spread_v3": ({}, 25),
    "pettingzoo/mpe/simple_spread_v3": ({"render_mode": "rgb_array"}, 20),
    "lbforaging/Foraging-8x8-2p-2f-coop-v3": ({"render_mode": "rgb_array"}, 20),
    "rware/rware-tiny-2ag-v2": ({"render_mode": "rgb_array"}, 20),
}
#: a minute of MJX compiling, for the code path brax/ant_4x2 takes: with --all
HEAVY = {"playground/CheetahRun_6x1"}
CASES = [pytest.param(name, kwargs, steps, True, id=f"{name}-continuous",
                      marks=[pytest.mark.slow] if name in HEAVY else []) for name, (kwargs, steps) in
         CONTINUOUS.items()] + [pytest.param(name, kwargs, steps, False, id=f"{name}-discrete")
                                for name, (kwargs, steps) in DISCRETE.items()]


def _needs(name: str) -> None:
    backend = name.partition("/")[0]
    if not HAS[backend]:
        pytest.skip(f"the {backend} backend is not installed")


def check(call: str) -> None:
    """``torchrl_scripts_checks.<call>`` in a fresh interpreter; its failure, with its traceback, fails the test."""
    environ = {key: value for key, value in os.environ.items() if key not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    done = subprocess.run([sys.executable, "-c", f"import torchrl_scripts_checks as c; c.{call}"],
                          capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent, env=environ)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("name, kwargs, steps, continuous", CASES)
def test_what_the_scripts_read_and_their_evaluation(name, kwargs, steps, continuous):
    _needs(name)
    check(f"evaluation({name!r}, {kwargs!r}, {steps}, {continuous})")


@pytest.mark.skipif(not HAS["vmas"], reason="needs the vmas extra")
def test_the_vmas_class_of_the_scripts_builds_ours():
    """``from marl_envs.torchrl import VmasEnv`` in place of TorchRL's: the scripts' own call, in both action
    kinds (SAC's discrete run asks for ``categorical_actions=True``)."""
    check("vmas_class()")


@pytest.mark.parametrize("backend", sorted(ONE_PER_BACKEND))
def test_torchrls_video_recorder_records_every_family_that_draws(backend):
    """TorchRL's ``PixelRenderTransform`` and ``VideoRecorder`` on our env: a video of env 0 where the family
    draws; where it does not, ``env.renders`` says so and the transform's first step raises the reason."""
    name, kwargs = ONE_PER_BACKEND[backend]
    _needs(name)
    check(f"recorder({name!r}, {kwargs!r})")


@pytest.mark.skipif(not HAS["brax"], reason="needs the brax extra")
def test_a_mujoco_env_draws_after_torchrl_imported_mujoco():
    """TorchRL 0.14's ``torchrl.envs`` imports MuJoCo without ``MUJOCO_GL``, so MuJoCo picks GLFW, which needs a
    display: the scripts import TorchRL first, and a Brax env must still draw there (through EGL)."""
    check("mujoco_after_torchrl()")
