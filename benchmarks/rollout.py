"""What ``env.rollout`` costs on top of stepping: ``rollout(T)`` against the loop a user would write by hand.

    python benchmarks/rollout.py                          # brax/fast, 128 envs, 1000 steps
    python benchmarks/rollout.py vmas/balance --num-envs 4096 --steps 100

The loops take turns ``--rounds`` times (the median counts). Each runs ``T`` steps with random actions
(``rand_action``) from a fresh reset:

- ``step_and_maybe_reset`` loop: ``td, root = env.step_and_maybe_reset(env.rand_action(td))``, each step's
  ``td`` kept in a list (what ``rollout`` keeps), nothing stacked;
- ``rollout(T, break_when_any_done=False)``: the same steps, then stacked into one ``(B, T)`` TensorDict;
- ``rollout(T)`` (the default, ``break_when_any_done``): ``step`` then ``step_mdp``, stopping early if an env is
  done (it reports the steps it ran).

The target: ``rollout`` <= 1.2x the time of the ``step_and_maybe_reset`` loop.
"""

from __future__ import annotations

import argparse
import statistics
import time

import marl_envs
from marl_envs.cli.format import table


def step_loop(env, steps: int) -> int:
    td, kept = env.reset(), []
    for _ in range(steps):
        td, root = env.step_and_maybe_reset(env.rand_action(td))
        kept.append(td)
        td = root
    return steps


def rollout_auto_reset(env, steps: int) -> int:
    return env.rollout(steps, break_when_any_done=False).shape[1]


def rollout_default(env, steps: int) -> int:
    return env.rollout(steps).shape[1]


LOOPS = {
    "step_and_maybe_reset loop (kept, not stacked)": step_loop,
    "rollout(T, break_when_any_done=False)": rollout_auto_reset,
    "rollout(T) (break_when_any_done)": rollout_default,
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name", nargs="?", default="brax/fast")
    parser.add_argument("--num-envs", type=int, default=128)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    env = marl_envs.make(args.name, num_envs=args.num_envs, seed=0)
    for loop in LOOPS.values():  # warm-up: compilation, allocator
        loop(env, min(args.steps, 20))
    times = {label: [] for label in LOOPS}
    ran = {}
    labels = list(LOOPS)
    for r in range(args.rounds):
        for k in range(len(labels)):
            label = labels[(k + r) % len(labels)]
            start = time.perf_counter()
            ran[label] = LOOPS[label](env, args.steps)
            times[label].append((time.perf_counter() - start) / ran[label])
    base = statistics.median(times[labels[0]])
    rows = [(label, ran[label], f"{statistics.median(t) * 1e6:,.0f}", f"{statistics.median(t) / base:.2f}")
            for label, t in times.items()]
    print(f"{args.name}: {args.num_envs} envs, up to {args.steps} steps, median of {args.rounds} rounds")
    print(table(("loop", "steps", "us a step", "time / step loop"), rows))


if __name__ == "__main__":
    main()
