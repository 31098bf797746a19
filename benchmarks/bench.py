"""The speed table of the README: ``marl_envs.bench`` (the harness behind ``marl-envs bench``) over a set of envs.

    python benchmarks/bench.py                     # the README's rows
    python benchmarks/bench.py vmas/balance        # one of them

Each row times our env against its backend's raw reference loops in one process, the loops taking turns (see
``marl_envs.bench``); the ratios are printed per env.
"""

from __future__ import annotations

import argparse
import platform

import torch

from marl_envs import available_envs
from marl_envs.bench import format_bench, run

#: name -> (num_envs, steps, rounds, env keywords)
ROWS = {
    "vmas/navigation": (4096, 100, 5, {}),
    "vmas/balance": (4096, 100, 5, {}),
    "brax/ant_4x2": (128, 400, 20, {"backend": "spring"}),
    "brax/fast": (128, 2000, 5, {}),
    "pettingzoo/mpe/simple_spread_v3": (8, 500, 5, {}),
    "pettingzoo/sisl/multiwalker_v9": (16, 200, 5, {}),  # CPU-heavy (Box2D): serial against num_workers=2
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"default: {', '.join(ROWS)}")
    args = parser.parse_args(argv)
    print(f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads\n")
    installed = set(available_envs())
    for name in args.names or ROWS:
        if name not in installed:
            print(f"{name}: skipped (its backend is not installed)\n")
            continue
        num_envs, steps, rounds, kwargs = ROWS.get(name, (None, 100, 5, {}))
        rows = run(name, num_envs=num_envs, steps=steps, rounds=rounds, **kwargs)
        print(format_bench(name, rows[0][2] // steps, steps, rows), "\n", flush=True)


if __name__ == "__main__":
    main()
