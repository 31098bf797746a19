"""Measure the performance page's rows: each ``marl-envs bench`` command below, in a fresh process, appending its
record to ``benchmarks/results.jsonl`` (the docs render the page's table from that file).

    python benchmarks/results.py                 # every row, once
    python benchmarks/results.py --runs 3 gymnax # the rows whose env starts with "gymnax", three runs each
    python benchmarks/results.py --list          # the commands

Run it on an idle machine: each command times our env and the raw library's loops in one process, taking turns,
but a busy machine still widens the spread between runs.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

RECORDS = Path(__file__).resolve().parent / "results.jsonl"

#: ``marl-envs bench`` arguments of each row of the performance page, on the CPU.
ROWS = [
    "vmas/navigation --num-envs 4096 --steps 100",
    "vmas/balance --num-envs 4096 --steps 100",
    "brax/ant_4x2 backend=spring --num-envs 128 --steps 400",
    "brax/fast --num-envs 128 --steps 2000 --rounds 20",
    "jaxmarl/MPE_simple_spread_v3 --num-envs 1024 --steps 300",
    "jaxmarl/SMAX scenario=3m --num-envs 1024 --steps 200",
    "gymnax/CartPole-v1 --num-envs 1024 --steps 1000 --rounds 5",
    "gymnax/CartPole-v1 --num-envs 1 --steps 2000 --rounds 5",
    "jumanji/RobotWarehouse-v0 --num-envs 1024 --steps 100",
    "jumanji/LevelBasedForaging-v0 --num-envs 1024 --steps 100",
    "playground/CheetahRun --num-envs 128 --steps 100",
    "pettingzoo/mpe/simple_spread_v3 --num-envs 8 --steps 500",
    "pettingzoo/sisl/multiwalker_v9 --num-envs 16 --steps 200",
    "lbforaging/Foraging-8x8-2p-2f-coop-v3 --num-envs 64 --steps 100",
    "rware/rware-tiny-2ag-v2 --num-envs 64 --steps 100",
    "mamujoco/HalfCheetah_2x3 --num-envs 64 --steps 100",
    "magent2/battle_v4 --num-envs 64 --steps 40",
    "openspiel/goofspiel --num-envs 64 --steps 100",
    "openspiel/leduc_poker --num-envs 256 --steps 100",
    "meltingpot/collaborative_cooking__asymmetric --num-envs 1 --steps 2000 --rounds 10",
    "meltingpot/collaborative_cooking__asymmetric --num-envs 2 --steps 1000 --rounds 10",
    "meltingpot/collaborative_cooking__asymmetric --num-envs 8 --steps 2000 --rounds 8",
    "meltingpot/predator_prey__open --num-envs 1 --steps 1000 --rounds 8",
    "meltingpot/predator_prey__open --num-envs 2 --steps 400 --rounds 8",
    "meltingpot/predator_prey__open --num-envs 8 --steps 400 --rounds 8",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("only", nargs="*", help="only the rows whose env starts with one of these")
    parser.add_argument("--runs", type=int, default=1, help="runs of each row (each its own record)")
    parser.add_argument("--list", action="store_true", help="print the commands and stop")
    parser.add_argument("--records", default=str(RECORDS), help="the records file to append to")
    args = parser.parse_args(argv)
    rows = [row for row in ROWS if not args.only or any(row.startswith(prefix) for prefix in args.only)]
    commands = [["marl-envs", "bench", *shlex.split(row), "--record", args.records] for row in rows]
    if args.list:
        print("\n".join(shlex.join(c) for c in commands))
        return 0
    failed = 0
    for i, command in enumerate(commands * args.runs, 1):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        status = "ok" if done.returncode == 0 else f"failed ({done.returncode}): {done.stderr.strip()[-300:]}"
        failed += done.returncode != 0
        print(f"[{i}/{len(commands) * args.runs}] {shlex.join(command[2:-2])}: {status} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
