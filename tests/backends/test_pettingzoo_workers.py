"""PettingZoo instances in worker processes: identical results, failures reported, no process left behind."""

from __future__ import annotations

import multiprocessing as mp
import os

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")

import marl_envs  # noqa: E402
from gymnasium import spaces  # noqa: E402
from marl_envs.backends.pettingzoo import PettingZooWrapper  # noqa: E402
from pettingzoo import ParallelEnv  # noqa: E402


def _twin_rollouts(name: str, steps: int, **kwargs):
    """The same seeded env with and without workers (seed=3 also seeds rand_action: the same actions), partial
    resets included."""
    out = []
    for workers in (0, 2):
        env = marl_envs.make(name, num_envs=5, seed=3, max_steps=4, num_workers=workers, **kwargs)
        td, frames = env.reset(), []
        for t in range(steps):
            td, td_next = env.step_and_maybe_reset(env.rand_action(td))
            frames.append(td.clone())
            if t == 2:
                td_next["_reset"] = torch.tensor([[True], [False], [False], [True], [False]])
                td_next = env.reset(td_next)
            td = td_next
        env.close()
        out.append(torch.stack(frames))
    return out


@pytest.mark.parametrize("name, kwargs", [
    ("pettingzoo/mpe/simple_spread_v3", {"return_state": True}),
    ("pettingzoo/classic/tictactoe_v3", {}),  # turn-based, action masks
])
def test_workers_give_identical_results(name, kwargs):
    serial, parallel = _twin_rollouts(name, 9, **kwargs)
    assert set(serial.keys(True, True)) == set(parallel.keys(True, True))
    assert (serial == parallel).all()


class Faulty(ParallelEnv):
    """One walker; the instance reset with seed 13 raises (``"raise"``) or dies (``"die"``) at its second step."""

    metadata = {"name": "faulty_v0"}

    def __init__(self, how: str = "raise"):
        self.possible_agents, self.how, self.seed = ["walker_0"], how, None

    def observation_space(self, agent):
        return spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents, self.t, self.seed = list(self.possible_agents), 0, seed
        return {"walker_0": np.zeros(1, np.float32)}, {"walker_0": {}}

    def step(self, actions):
        self.t += 1
        if self.seed == 13 and self.t == 2:
            if self.how == "die":
                os._exit(7)
            raise RuntimeError("walker fell over")
        obs = {"walker_0": np.full(1, self.t, np.float32)}
        return obs, {"walker_0": 1.0}, {"walker_0": False}, {"walker_0": False}, {"walker_0": {}}


def test_an_instance_that_raises_is_reported_with_its_env_index_and_traceback():
    env = PettingZooWrapper(lambda: Faulty("raise"), num_envs=4, num_workers=2, seed=10)
    td = env.step_mdp(env.rand_step(env.reset()))
    with pytest.raises(RuntimeError, match=r"(?s)the PettingZoo instance of env 3 raised in worker 1:\nTraceback.*"
                                           r"in step\n.*RuntimeError: walker fell over"):
        env.rand_step(td)
    env.close()
    assert not any(p.name.startswith("marl_envs-pettingzoo") for p in mp.active_children())


def test_a_worker_that_dies_is_reported_and_close_leaves_no_process():
    env = PettingZooWrapper(lambda: Faulty("die"), num_envs=4, num_workers=2, seed=10)
    td = env.step_mdp(env.rand_step(env.reset()))
    with pytest.raises(RuntimeError, match=r"PettingZoo worker 1 \(envs 2-3\) died with exit code 7"):
        env.rand_step(td)
    env.close()
    env.close()  # idempotent
    assert not any(p.name.startswith("marl_envs-pettingzoo") for p in mp.active_children())


def test_workers_stop_when_the_env_is_collected():
    env = PettingZooWrapper(lambda: Faulty(), num_envs=2, num_workers=2)
    env.reset()
    assert sum(p.name.startswith("marl_envs-pettingzoo") for p in mp.active_children()) == 2
    del env
    assert not any(p.name.startswith("marl_envs-pettingzoo") for p in mp.active_children())


def test_bad_num_workers():
    with pytest.raises(ValueError, match=r"num_workers must be an int in \[0, num_envs=2\], got 3"):
        marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, num_workers=3)
    with pytest.raises(ValueError, match="num_workers > 0 needs a zero-argument factory"):
        PettingZooWrapper(Faulty(), num_envs=1, num_workers=1)
    env = marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, num_workers=1)
    with pytest.raises(AttributeError, match="live in the worker processes"):
        env.envs
    env.close()


def test_workers_start_quietly_where_jax_runs():
    # JAX warns at every fork of a process where its threads run; the workers never touch JAX, and our fork says
    # nothing (with filterwarnings = error, a warning here fails the test)
    jnp = pytest.importorskip("jax.numpy")
    jnp.ones(3).sum().block_until_ready()
    env = marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, N=2, num_workers=2, seed=0)
    env.rollout(2)
    env.close()

