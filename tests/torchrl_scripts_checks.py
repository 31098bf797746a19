"""The checks of ``test_torchrl_scripts.py``, each run in a fresh interpreter as a training script runs
(``python -c "import torchrl_scripts_checks as c; c.evaluation(...)"``): what a process did before (other tests'
renderers, forked workers) cannot change what a script sees."""

from __future__ import annotations

import pathlib
import tempfile
import warnings

warnings.simplefilter("ignore")  # the libraries' own notices: the test asserts behaviour, not their warnings

import torch  # noqa: E402
from torchrl.envs import RewardSum, TransformedEnv  # noqa: E402
from torchrl.record import PixelRenderTransform, VideoRecorder  # noqa: E402
from torchrl.record.loggers import CSVLogger  # noqa: E402

import marl_envs  # noqa: E402
from groupings import MarlGroupMapType  # noqa: E402
from marl_envs.torchrl import VmasEnv, to_torchrl  # noqa: E402


def _evaluation(env, steps: int):
    """The scripts' evaluation: a frame drawn after each step, the rollout kept going past dones."""
    env.frames = []

    def rendering_callback(env, td):
        env.frames.append(env.render(mode="rgb_array", agent_index_focus=None))

    with torch.no_grad():
        return env.rollout(max_steps=steps, callback=rendering_callback, auto_cast_to_device=True,
                           break_when_any_done=False)


def evaluation(name: str, kwargs: dict, steps: int, continuous: bool) -> None:
    """What the scripts read from the env, and their evaluation, on ``to_torchrl(make(name, ...))`` with every
    agent in ``"agents"``."""
    env = to_torchrl(marl_envs.make(name, num_envs=2, max_steps=steps, seed=0,
                                    group_map=MarlGroupMapType.ALL_IN_ONE_GROUP, **kwargs))
    observation = env.observation_spec["agents", "observation"]
    assert observation.shape == (2, env.n_agents, observation.shape[-1])  # flat, one row per agent
    action = env.full_action_spec_unbatched[env.action_key]
    assert env.action_key == ("agents", "action") and env.reward_key == ("agents", "reward")
    if continuous:  # TanhNormal's bounds (MAPPO, MADDPG, SAC)
        assert action.space.low.shape[-1:] == action.space.high.shape[-1:] == action.shape[-1:]
    else:  # the Q-value heads' width (IQL, QMIX/VDN, discrete SAC)
        assert action.space.n >= 2
    assert {"done", "terminated"} <= set(env.done_keys)  # what the scripts' DoneTransform expands per agent
    transformed = TransformedEnv(env, RewardSum(in_keys=[env.reward_key], out_keys=[("agents", "episode_reward")]))
    assert transformed.rollout(3)["next", "agents", "episode_reward"].shape == (2, 3, env.n_agents, 1)

    rollouts = _evaluation(env, steps)
    done = rollouts["next", "done"].reshape(2, steps)
    assert done.any(-1).all()  # each evaluation episode ends within max_steps: the scripts cut it at its first done
    assert len(env.frames) == steps - 1
    assert all(frame.ndim == 3 and frame.shape[-1] == 3 and frame.dtype.name == "uint8" for frame in env.frames)
    if ("agents", "done") in env.done_keys:  # the PettingZoo machinery's own per-agent ends: what the scripts'
        for end in ("done", "terminated"):   # DoneTransform builds, so docs/torchrl_scripts.md drops that line
            root = rollouts["next", end].unsqueeze(-1).expand_as(rollouts["next", "agents", end])
            assert torch.equal(rollouts["next", "agents", end], root)
    assert not env.is_closed
    env.close()
    assert env.is_closed


def vmas_class() -> None:
    """``from marl_envs.torchrl import VmasEnv`` in place of TorchRL's, called as the scripts call it."""
    for continuous in (True, False):
        env = VmasEnv(scenario="balance", num_envs=4, continuous_actions=continuous, max_steps=10, device="cpu",
                      seed=0, categorical_actions=True, n_agents=3)
        assert env.n_agents == 3 and env.observation_spec["agents", "observation"].shape[:2] == (4, 3)
        rollouts = _evaluation(env, 10)
        assert rollouts["next", "done"].reshape(4, 10)[:, -1].all() and len(env.frames) == 9


def recorder(name: str, kwargs: dict) -> None:
    """TorchRL's ``PixelRenderTransform`` and ``VideoRecorder`` on ``to_torchrl(make(name, ...))``: a video of env
    0 where the env draws; where it does not, ``renders`` says so and the first step raises the reason."""
    adapted = to_torchrl(marl_envs.make(name, num_envs=2, seed=0, max_steps=20, **kwargs))
    env = TransformedEnv(adapted, PixelRenderTransform())
    if not adapted.renders:
        try:
            env.rollout(1)
        except (NotImplementedError, ValueError) as error:
            assert "draw" in str(error) or "render" in str(error), error
            return
        raise AssertionError(f"{name} says it does not render, and rendered")
    folder = pathlib.Path(tempfile.mkdtemp())
    env.append_transform(VideoRecorder(logger=CSVLogger("video", log_dir=str(folder), video_format="pt"),
                                       tag="episode"))
    env.rollout(5, break_when_any_done=False)
    env.transform[-1].dump()
    [video] = folder.rglob("*.pt")
    frames = torch.load(video)
    # the reset's frame and 5 steps', and one more for each episode that ended and restarted (Cleaner's do)
    assert frames.shape[0] == 1 and frames.shape[1] >= 6 and frames.shape[2] == 3 and frames.dtype == torch.uint8


def mujoco_after_torchrl() -> None:
    """TorchRL 0.14's ``torchrl.envs`` (imported above) imports MuJoCo without ``MUJOCO_GL``, so MuJoCo picks
    GLFW, which needs a display: a Brax env must still draw (through EGL)."""
    import sys

    assert "mujoco" in sys.modules
    env = marl_envs.make("brax/ant_4x2", num_envs=1, seed=0)
    env.reset()
    assert env.render(mode="rgb_array", agent_index_focus=None).shape == (240, 320, 3)
