"""How long a fresh process takes to its first step of a Brax env: cold, then with what earlier processes saved.

    python benchmarks/compile_once.py                       # brax/ant_4x2, spring, 128 envs, 3 cold/warm pairs
    python benchmarks/compile_once.py --env brax/fast --num-envs 16 --pairs 1 --kwargs

Each pair runs, in a new empty cache folder (``MARL_ENVS_JAX_CACHE_DIR``), three processes one after the other:

1. **cold**: nothing saved; it traces, compiles, and saves the compiled code (JAX's persistent cache) and the
   exported reset and step (``marl_envs-exported/``);
2. **JAX cache only**: the exports deleted first, so this one imports Brax, builds and traces the env again and
   loads the compiled code from JAX's cache (what JAX's persistent cache alone gives);
3. **warm**: everything the first two saved; no Brax import, no tracing.

A process's time runs from just before it is started to the end of its first ``step`` (read by the child's
clock, which the parent shares), so interpreter start and every import count. The table gives the median over
the pairs and each process's phases.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from marl_envs.cli import parse_kwargs

CHILD = r"""
import json, sys, time
t = [time.time()]
import torch, tensordict
t.append(time.time())
import marl_envs
env = marl_envs.make(sys.argv[1], num_envs=int(sys.argv[2]), **json.loads(sys.argv[3]))
t.append(time.time())
td = env.reset()
t.append(time.time())
env.rand_step(td)
t.append(time.time())
print(json.dumps({"times": t, "brax_imported": "brax" in sys.modules}))
"""
KINDS = ("cold", "JAX cache only", "warm")


def run_child(env: str, num_envs: int, kwargs: dict, cache: str) -> dict:
    environ = dict(os.environ, MARL_ENVS_JAX_CACHE_DIR=cache)
    for variable in ("MARL_ENVS_JAX_CACHE", "JAX_COMPILATION_CACHE_DIR"):
        environ.pop(variable, None)
    start = time.time()
    done = subprocess.run([sys.executable, "-c", CHILD, env, str(num_envs), json.dumps(kwargs)], env=environ,
                          capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"the child process failed:\n{done.stderr}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    t = report["times"]
    return {"total": t[-1] - start, "start + torch/tensordict": t[1] - start, "marl_envs + jax + make": t[2] - t[1],
            "first reset": t[3] - t[2], "first step": t[4] - t[3], "brax imported": report["brax_imported"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="brax/ant_4x2")
    parser.add_argument("--num-envs", type=int, default=128)
    parser.add_argument("--pairs", type=int, default=3, help="cold/warm rounds, each in a new cache folder")
    parser.add_argument("--kwargs", nargs="*", default=["backend=spring"], metavar="K=V",
                        help="env keywords, parsed as by `marl-envs bench`")
    args = parser.parse_args()
    kwargs = parse_kwargs(args.kwargs)

    runs: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for pair in range(args.pairs):
        cache = tempfile.mkdtemp(prefix="marl_envs_compile_once_")
        try:
            runs["cold"].append(run_child(args.env, args.num_envs, kwargs, cache))
            shutil.rmtree(os.path.join(cache, "marl_envs-exported"), ignore_errors=True)
            runs["JAX cache only"].append(run_child(args.env, args.num_envs, kwargs, cache))
            runs["warm"].append(run_child(args.env, args.num_envs, kwargs, cache))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        print(f"pair {pair + 1}/{args.pairs}: " + ", ".join(f"{k} {runs[k][-1]['total']:.2f} s" for k in KINDS),
              file=sys.stderr)

    cold = statistics.median(r["total"] for r in runs["cold"])
    phases = [p for p in runs["cold"][0] if p not in ("total", "brax imported")]
    print(f"\n{args.env}, num_envs={args.num_envs}, {kwargs or ''} (median of {args.pairs}; seconds from process "
          f"start to the end of the first step)\n")
    header = f"{'process':<16} {'total':>7} {'/ cold':>7} " + " ".join(f"{p:>25}" for p in phases) + "  Brax imported"
    print(header)
    print("-" * len(header))
    for kind in KINDS:
        total = statistics.median(r["total"] for r in runs[kind])
        cells = " ".join(f"{statistics.median(r[p] for r in runs[kind]):>25.2f}" for p in phases)
        imported = "yes" if all(r["brax imported"] for r in runs[kind]) else "no"
        print(f"{kind:<16} {total:>7.2f} {total / cold:>7.2f} {cells}  {imported}")
    ratios = [w["total"] / c["total"] for w, c in zip(runs["warm"], runs["cold"])]
    print(f"\nwarm / cold per pair: {', '.join(f'{r:.3f}' for r in ratios)}")


if __name__ == "__main__":
    main()
