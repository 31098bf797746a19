"""What TorchRL 0.14's multi-agent example scripts (``sota-implementations/multiagent``: MAPPO/IPPO, IQL, QMIX/VDN,
MADDPG/IDDPG, SAC) ask of the env they build, on one env of each family whose specs fit them: everything in the
``"agents"`` group with flat observations, and the evaluation that renders each step and cuts each episode at its
first ``done``. The scripts themselves run unchanged but for the env constructor (``docs/torchrl.md``); these tests
pin the API they need through ours, and TorchRL's video recorder on every family that draws.

These run in .venv-torchrl (``make test`` sets MARL_ENVS_REQUIRE_TORCHRL=1); elsewhere they skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch
from test_render import ONE_PER_BACKEND

import marl_envs
from groupings import MarlGroupMapType

if os.environ.get("MARL_ENVS_REQUIRE_TORCHRL") != "1":
    pytest.importorskip("torchrl", reason="the TorchRL interop is tested in .venv-torchrl (make test)")

with warnings.catch_warnings():  # torchrl 0.14.1 deprecates its own weight-updater classes on import
    warnings.filterwarnings("ignore", message=".*inherits from WeightUpdaterBase is deprecated",
                            category=DeprecationWarning)
    from torchrl.envs import RewardSum, TransformedEnv
    from torchrl.record import PixelRenderTransform, VideoRecorder
    from torchrl.record.loggers import CSVLogger

from marl_envs.torchrl import VmasEnv, to_torchrl  # noqa: E402

#: JaxMARL's first import brings Brax's, whose JAXopt warns that it is unmaintained (in whichever test runs first)
pytestmark = pytest.mark.filterwarnings("ignore:JAXopt is no longer maintained:DeprecationWarning")
HAS = {backend: marl_envs.backend_installed(backend) for backend in marl_envs.available_backends()}
ALL_IN_ONE = {"group_map": MarlGroupMapType.ALL_IN_ONE_GROUP}
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
CASES = [pytest.param(name, kwargs, steps, True, id=f"{name}-continuous") for name, (kwargs, steps) in
         CONTINUOUS.items()] + [pytest.param(name, kwargs, steps, False, id=f"{name}-discrete") for name, (kwargs, steps)
                                in DISCRETE.items()]


def _built(name: str, kwargs: dict, steps: int, num_envs: int = 2):
    """The scripts' env: ``to_torchrl(make(...))`` in place of ``VmasEnv(...)``, every agent in ``"agents"``."""
    backend = name.partition("/")[0]
    if not HAS[backend]:
        pytest.skip(f"the {backend} backend is not installed")
    return to_torchrl(marl_envs.make(name, num_envs=num_envs, max_steps=steps, seed=0, **ALL_IN_ONE, **kwargs))


def _evaluation(env, steps: int):
    """The scripts' evaluation: a frame drawn after each step, the rollout kept going past dones."""
    env.frames = []

    def rendering_callback(env, td):
        env.frames.append(env.render(mode="rgb_array", agent_index_focus=None))

    with torch.no_grad():
        return env.rollout(max_steps=steps, callback=rendering_callback, auto_cast_to_device=True,
                           break_when_any_done=False)


@pytest.mark.parametrize("name, kwargs, steps, continuous", CASES)
def test_what_the_scripts_read_and_their_evaluation(name, kwargs, steps, continuous):
    env = _built(name, kwargs, steps)
    observation = env.observation_spec["agents", "observation"]
    assert observation.shape == (2, env.n_agents, observation.shape[-1])  # flat, one row per agent
    action = env.full_action_spec_unbatched[env.action_key]
    assert env.action_key == ("agents", "action") and env.reward_key == ("agents", "reward")
    if continuous:  # TanhNormal's bounds (MAPPO, MADDPG, SAC)
        assert action.space.low.shape == action.space.high.shape == action.shape[-1:] or action.space.low.shape == \
            action.shape
    else:  # the Q-value heads' width (IQL, QMIX/VDN, discrete SAC)
        assert action.space.n >= 2
    assert {"done", "terminated"} <= set(env.done_keys)  # what the scripts' DoneTransform expands per agent
    transformed = TransformedEnv(env, RewardSum(in_keys=[env.reward_key], out_keys=[("agents", "episode_reward")]))
    assert transformed.rollout(3)["next", "agents", "episode_reward"].shape == (2, 3, env.n_agents, 1)

    rollouts = _evaluation(env, steps)
    done = rollouts["next", "done"].reshape(2, steps)
    assert done.any(-1).all()  # each evaluation episode ends within max_steps: the scripts cut it at its first done
    assert len(env.frames) == steps - 1
    if ("agents", "done") in env.done_keys:  # the PettingZoo machinery's own per-agent ends: what the scripts'
        for end in ("done", "terminated"):   # DoneTransform builds, so docs/torchrl_scripts.md drops that line
            root = rollouts["next", end].unsqueeze(-1).expand_as(rollouts["next", "agents", end])
            assert torch.equal(rollouts["next", "agents", end], root)
    assert all(frame.ndim == 3 and frame.shape[-1] == 3 and frame.dtype.name == "uint8" for frame in env.frames)
    assert not env.is_closed
    env.close()
    assert env.is_closed


@pytest.mark.skipif(not HAS["vmas"], reason="needs the vmas extra")
def test_the_vmas_class_of_the_scripts_builds_ours():
    """``from marl_envs.torchrl import VmasEnv`` in place of TorchRL's: the scripts' own call, in both action
    kinds (SAC's discrete run asks for ``categorical_actions=True``)."""
    for continuous in (True, False):
        env = VmasEnv(scenario="balance", num_envs=4, continuous_actions=continuous, max_steps=10, device="cpu",
                      seed=0, categorical_actions=True, n_agents=3)
        assert env.n_agents == 3 and env.observation_spec["agents", "observation"].shape[:2] == (4, 3)
        rollouts = _evaluation(env, 10)
        assert rollouts["next", "done"].reshape(4, 10)[:, -1].all() and len(env.frames) == 9


RENDERERS = sorted(backend for backend in ONE_PER_BACKEND if HAS[backend])


@pytest.mark.parametrize("backend", RENDERERS)
def test_torchrls_video_recorder_records_every_family_that_draws(backend, tmp_path):
    """TorchRL's ``PixelRenderTransform`` and ``VideoRecorder`` on our env: a video of env 0 where the family
    draws; where it does not, ``env.renders`` says so and the transform is refused with the reason."""
    name, kwargs = ONE_PER_BACKEND[backend]
    adapted = to_torchrl(marl_envs.make(name, num_envs=2, seed=0, max_steps=20, **kwargs))
    env = TransformedEnv(adapted, PixelRenderTransform())
    if not adapted.renders:
        with pytest.raises((NotImplementedError, ValueError), match="draw|render"):
            env.rollout(1)
        return
    env.append_transform(VideoRecorder(logger=CSVLogger("video", log_dir=str(tmp_path), video_format="pt"),
                                       tag="episode"))
    env.rollout(5, break_when_any_done=False)
    env.transform[-1].dump()
    [video] = tmp_path.rglob("*.pt")
    frames = torch.load(video)
    # the reset's frame and 5 steps', and one more for each episode that ended and restarted (Cleaner's do)
    assert frames.shape[0] == 1 and frames.shape[1] >= 6 and frames.shape[2] == 3 and frames.dtype == torch.uint8


@pytest.mark.skipif(not HAS["brax"], reason="needs the brax extra")
def test_a_mujoco_env_draws_after_torchrl_imported_mujoco():
    """TorchRL 0.14's ``torchrl.envs`` imports MuJoCo without ``MUJOCO_GL``, so MuJoCo picks GLFW, which needs a
    display: the scripts import TorchRL first, and a Brax env must still draw there (through EGL)."""
    script = ("import sys, warnings; warnings.simplefilter('ignore'); import torchrl.envs; "
              "assert 'mujoco' in sys.modules; import marl_envs; "
              "env = marl_envs.make('brax/ant_4x2', num_envs=1, seed=0); env.reset(); "
              "print(env.render(mode='rgb_array', agent_index_focus=None).shape)")
    environ = {key: value for key, value in os.environ.items() if key not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=environ)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "(240, 320, 3)"
