"""Worker processes that die or stop answering: one error naming the env, the worker, its rows and the cause, raised
at once (a death) or after ``worker_timeout`` (a hang); ``reset()`` rebuilds the worker and the env steps on, as a
fresh env built with the same seed would; ``close()`` returns whatever state the workers are in."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import resource
import signal
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")

import marl_envs  # noqa: E402
from gymnasium import spaces  # noqa: E402
from marl_envs.backends.pettingzoo import InstanceError, PettingZooWrapper, WorkerError  # noqa: E402
from pettingzoo import ParallelEnv  # noqa: E402

# PettingZoo's own family, and one built on its workers (Level-Based Foraging)
NAMES = ["pettingzoo/mpe/simple_spread_v3", "lbforaging/Foraging-8x8-2p-2f-coop-v3"]


def _make(name: str, **kwargs):
    if not marl_envs.backend_installed(name.partition("/")[0]):
        pytest.skip(f"{name.partition('/')[0]} is not installed")
    return marl_envs.make(name, num_envs=4, seed=0, **kwargs)


def _steps(env, td, actions: list):
    """``step_and_maybe_reset`` with each of ``actions`` in turn; the roots it gave."""
    roots = []
    for action in actions:
        td.update(action)
        _, td = env.step_and_maybe_reset(td)
        roots.append(td.clone())
    return roots


def _same(a, b) -> None:
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    assert (a == b).all()


def _workers_alive() -> list[int]:
    return [p.pid for p in mp.active_children() if p.name.startswith("marl_envs-pettingzoo")]


def _restarts_like_a_fresh_env(env, name: str) -> None:
    """``env.reset()`` after a failure: every env starts from the env's seed, and steps as a fresh twin does."""
    twin = _make(name)  # in this process: results are identical either way
    td, td_twin = env.reset(), twin.reset()
    _same(td, td_twin)
    actions = [env.rand_action(td.clone()).select(*env.action_keys) for _ in range(4)]
    for root, root_twin in zip(_steps(env, td, actions), _steps(twin, td_twin, actions)):
        _same(root, root_twin)
    assert env.rollout(5).batch_size == (4, 5)
    twin.close()


@pytest.mark.parametrize("name", NAMES)
def test_a_killed_worker_is_named_and_reset_rebuilds_it(name):
    # a death is seen at once (the processes' sentinels): the timeout bounds the test if it were not, and the
    # message would then name the timeout, not the signal
    env = _make(name, num_workers=2, worker_timeout=5)
    try:
        td = env.reset()
        td = _steps(env, td, [env.rand_action(td.clone()).select(*env.action_keys) for _ in range(3)])[-1]
        pids = env.worker_pids
        os.kill(pids[1], signal.SIGKILL)
        with pytest.raises(WorkerError, match=rf"^{re.escape(name)}: PettingZoo worker 1 \(envs 2-3\) was killed by "
                                              rf"SIGKILL \(pid {pids[1]}\); env\.reset\(\) builds its instances anew "
                                              rf"and restarts every env from the env's seed$"):
            env.step_and_maybe_reset(env.rand_action(td))
        with pytest.raises(InstanceError, match=r"worker 1 \(envs 2-3\) was killed by SIGKILL"):  # until a reset
            env.rand_step(td)
        td["_reset"] = torch.tensor([[True], [False], [False], [False]])
        with pytest.raises(ValueError, match=r"^after a worker failure every env is reset, to start again from the "
                                             r"env's seed: call env\.reset\(\) without a '_reset' entry; the failure "
                                             r"was: .*worker 1 \(envs 2-3\) was killed by SIGKILL"):
            env.reset(td)
        _restarts_like_a_fresh_env(env, name)
        assert env.worker_pids[0] == pids[0] and env.worker_pids[1] != pids[1]  # the other worker was kept
        assert pids[1] not in _workers_alive()
    finally:
        env.close()
    assert not _workers_alive()


@pytest.mark.parametrize("name", NAMES)
def test_a_hung_worker_times_out_is_killed_and_reset_rebuilds_it(name):
    env = _make(name, num_workers=2, worker_timeout=1)
    try:
        td = env.reset()
        pid = env.worker_pids[0]
        os.kill(pid, signal.SIGSTOP)
        with pytest.raises(WorkerError, match=rf"^{re.escape(name)}: PettingZoo worker 0 \(envs 0-1\) did not answer "
                                              rf"within 1 s and was killed \(pid {pid}\); env\.reset\(\) builds its "
                                              r"instances anew and restarts every env from the env's seed; if its "
                                              r"steps can take that long, build the env with a larger worker_timeout "
                                              r"\(None waits forever\)$"):
            env.step_and_maybe_reset(env.rand_action(td))
        assert pid not in _workers_alive()  # killed: it would write into the buffers if it woke up
        _restarts_like_a_fresh_env(env, name)
    finally:
        env.close()
    assert not _workers_alive()


def test_close_returns_with_a_dead_and_a_stopped_worker():
    env = _make(NAMES[0], num_workers=3, worker_timeout=1)  # close() gives the workers up to the timeout to stop
    pids = env.worker_pids
    env.rollout(2)
    os.kill(pids[0], signal.SIGKILL)
    os.kill(pids[1], signal.SIGSTOP)  # never seen stopped: close() kills it
    env.close()
    env.close()
    assert not _workers_alive()


def test_a_crashed_worker_quotes_its_stderr():
    env = _make(NAMES[0], num_workers=2, worker_timeout=5)
    try:
        td = env.reset()
        pid = env.worker_pids[0]
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))  # no core file, wherever the limit allows one
        os.kill(pid, signal.SIGSEGV)  # what a crash in C code gets: faulthandler writes its stack
        with pytest.raises(WorkerError, match=r"(?s)^.*worker 0 \(envs 0-1\) was killed by SIGSEGV \(pid \d+\); .*; "
                                              r"the last lines of its stderr:\n    .*File \""):
            env.rand_step(td)
    finally:
        env.close()


class Grumpy(ParallelEnv):
    """One walker that writes a line to stderr and exits at its second step."""

    metadata = {"name": "grumpy_v0"}

    def __init__(self):
        self.possible_agents = ["walker_0"]

    def observation_space(self, agent):
        return spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {"walker_0": np.zeros(1, np.float32)}, {"walker_0": {}}

    def step(self, actions):
        self.t += 1
        if self.t == 2:
            print("walker: out of cheese", file=sys.stderr, flush=True)
            os._exit(3)
        return ({"walker_0": np.ones(1, np.float32)}, {"walker_0": 0.0}, {"walker_0": False}, {"walker_0": False},
                {"walker_0": {}})


def test_a_worker_that_exits_gives_its_exit_code_and_last_stderr_lines():
    env = PettingZooWrapper(Grumpy, num_envs=3, num_workers=3, seed=0, worker_timeout=5)
    try:
        td = env.step_mdp(env.rand_step(env.reset()))
        with pytest.raises(WorkerError, match=r"^PettingZooWrapper: PettingZoo worker 0 \(env 0\) died with exit code "
                                              r"3 \(pid \d+\); env\.reset\(\) builds its instances anew and restarts "
                                              r"every env from the env's seed; the last lines of its stderr:\n"
                                              r"    walker: out of cheese\n\(workers \[1, 2\] failed too; the reset "
                                              r"rebuilds them all\)$"):
            env.rand_step(td)
        env.rand_step(env.reset())  # every worker rebuilt
    finally:
        env.close()


def test_bad_worker_timeout():
    with pytest.raises(ValueError, match=r"^worker_timeout must be a positive number of seconds, or None to wait for "
                                         r"the workers forever; got 0$"):
        _make(NAMES[0], num_workers=2, worker_timeout=0)
    env = _make(NAMES[0], num_workers=1, worker_timeout=None)  # waits forever
    assert len(env.worker_pids) == 1 and _make(NAMES[0]).worker_pids == []
    env.close()
