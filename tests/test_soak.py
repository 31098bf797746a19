"""A short soak per backend (the long one is ``benchmarks/soak.py``): enough steps that a leak of a few KB per step
shows in the process's RSS, which must stay flat after warm-up."""

import sys
from pathlib import Path

import pytest
import torch
from envs import Drift

import marl_envs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import soak  # noqa: E402

WARMUP, CALLS = 100, 1600  # calls before the reference RSS sample, calls measured after it
# A leak of 4 KB per call grows the RSS by ~6.4 MB over CALLS calls (measured: 7.1 MB); the limit allows 1.25 KB per
# call. Leak-free envs move by whole allocator arenas and pages, once: a PettingZoo env grew by 0.84 MB in CI
# (2026-11-28, 1600 calls) and by 0.04-0.13 MB here, so the limit sits well above one 1 MiB arena and well below the
# smallest leak it must catch. Smaller leaks (a (64, 2, 1) tensor, 512 bytes) are the long soak's job.
LIMIT_MB = 2.0
LEAK = 1024  # float32 elements kept per call by LeakyDrift

CASES = {
    "user": lambda: Drift(num_envs=64, max_steps=50),
    "vmas": lambda: marl_envs.make("vmas/transport", num_envs=4, n_agents=2, max_steps=50, seed=0),
    "brax": lambda: marl_envs.make("brax/fast", num_envs=16, max_steps=50, seed=0),
    "brax-grad": lambda: marl_envs.make("brax/fast", num_envs=16, max_steps=50, seed=0, requires_grad=True),
    "pettingzoo": lambda: marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, N=2, max_cycles=50,
                                                   seed=0),
    "jaxmarl": lambda: marl_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=16, max_steps=25, seed=0),
    "gymnax": lambda: marl_envs.make("gymnax/CartPole-v1", num_envs=16, max_steps=50, seed=0),
}


class LeakyDrift(Drift):
    """``Drift`` keeping a 4 KB tensor per step: the leak the short soak must catch."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.kept = []

    def _step(self, tensordict):
        out = super()._step(tensordict)
        self.kept.append(torch.ones(LEAK))
        return out


def short_soak(env, differentiable=False) -> soak.Result:
    return soak.run_soak(env, (WARMUP + CALLS) * env.num_envs, warmup=WARMUP / (WARMUP + CALLS), progress=False,
                         differentiable=differentiable)


@pytest.mark.parametrize("case", CASES)
def test_short_soak_memory_stays_flat(case):
    """A leak grows the RSS in every window of calls; a one-off step does not come back (a function compiled late, a
    new allocator arena: a gymnax env grew 4.9 MB once in CI, 2026-11-28, and 0.0 MB in every run here). So a window
    over the limit is followed by a second one on the same env, which must stay under it."""
    env = CASES[case]()
    results = [short_soak(env, differentiable=case == "brax-grad")]
    if results[0].growth_mb >= LIMIT_MB:
        results.append(short_soak(env, differentiable=case == "brax-grad"))
    env.close()
    assert all(result.calls == WARMUP + CALLS for result in results)
    grown = [round(result.growth_mb, 2) for result in results]
    assert grown[-1] < LIMIT_MB, f"{case}: RSS grew {grown} MB in each window of {CALLS} calls after warm-up"


def test_short_soak_catches_a_leak_of_4kb_per_step():
    env = LeakyDrift(num_envs=64, max_steps=50)
    for window in (1, 2):  # in the first window and the second alike
        result = short_soak(env)
        assert len(env.kept) == window * (WARMUP + CALLS)
        assert result.growth_mb > LIMIT_MB, f"a leak of 4 KB per step grew the RSS by only {result.growth_mb:.2f} MB"


@pytest.mark.parametrize("case", [name for name in soak.SOAKS if name in CASES])
def test_floor_times_the_raw_loop_the_soak_names(case):
    """``--floor``: each soak names a raw loop of ``marl_envs.bench`` that its backend has, timed in the soak's
    pattern (a renamed loop fails here, not after a long soak)."""
    env = CASES[case]()
    spec = soak.SOAKS[case]
    result = soak.run_soak(env, 40 * env.num_envs, progress=False, differentiable=spec.differentiable)
    assert result.gap_us > 0  # the untimed work between calls: action sampling (and the backward pass)
    p50, p99 = soak.reference_floor(env, spec, result, window=16)
    env.close()
    assert 0 < p50 <= p99
