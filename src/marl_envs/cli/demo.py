"""``marl-envs demo``: build envs by name, show their groups and specs, run a batched random rollout.

``make demo`` follows it with MAPPO training (``examples/mappo.py``).
"""

from __future__ import annotations

import time

import torch

from .. import registry
from .format import group_table, spec_table

#: (name, keywords) of the envs the tour builds, when their backend is installed.
TOUR = [
    ("vmas/balance", {"n_agents": 4}),
    ("vmas/simple_adversary", {}),
    ("pettingzoo/mpe/simple_spread_v3", {}),
    ("brax/ant_4x2", {"backend": "spring"}),
]


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:  # the core has no tqdm dependency
        return None
    return tqdm(total=total, desc=desc, unit="step", leave=True, disable=None)  # None: no bar unless a terminal


def tour() -> None:
    for name, kwargs in TOUR:
        backend = name.partition("/")[0]
        if not registry.backend_installed(backend):
            print(f"== {name}: skipped ({backend} is not installed: pip install 'marl-envs[{backend}]')\n")
            continue
        env = registry.make(name, num_envs=2, **kwargs)
        print(f"== {name} {kwargs or ''}\n{env}\n\n{group_table(env)}\n\n{spec_table(env)}\n")
        env.close()


def random_rollout(name: str = "vmas/balance", num_envs: int = 1024, steps: int = 200, **kwargs) -> float:
    """Step ``num_envs`` envs with random actions and auto-reset; return env-steps/s."""
    env = registry.make(name, num_envs=num_envs, **kwargs)
    if env.max_steps is None:  # no time limit of its own: episodes of 100 steps
        env.max_steps = 100
    env.set_seed(0)
    td = env.reset()
    bar = _progress(steps, f"{name} x {num_envs} envs")
    episodes = 0
    start = time.perf_counter()
    for _ in range(steps):
        td, td_next = env.step_and_maybe_reset(env.rand_action(td))
        episodes += int(td["next", "done"].sum())
        td = td_next
        if bar is not None:
            bar.update()
    elapsed = time.perf_counter() - start
    if bar is not None:
        bar.close()
    rate = num_envs * steps / elapsed
    print(f"{name}: {num_envs * steps:,} env-steps in {elapsed:.2f} s = {rate:,.0f} env-steps/s, "
          f"{episodes} episodes ended")
    env.close()
    return rate


def main() -> None:
    torch.manual_seed(0)
    print("marl-envs: envs by backend")
    for backend in registry.available_backends():
        count = len(registry.available_envs(backend)) if registry.backend_installed(backend) else 0
        print(f"  {backend:<11} {count} envs")
    print()
    tour()
    if registry.backend_installed("vmas"):
        random_rollout()
