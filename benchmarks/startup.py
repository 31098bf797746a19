"""How fast a JAX-family env starts: each measurement in a fresh Python process, ours against the raw library.

    python benchmarks/startup.py                   # four envs, caches warm, once each
    python benchmarks/startup.py --all             # and playground/CartpoleBalance (minutes)
    python benchmarks/startup.py --cache both --repeat 3 --json startup.jsonl

Each row is a child process (``python -c``) that times, with ``time.perf_counter()``, up to the first step's
data on the host, on the CPU, with 4 envs (``--num-envs``):

- **ours**: ``import marl_envs``; ``marl_envs.make(name, num_envs=4)`` (it imports JAX and the library); the
  first ``env.reset()``; the first ``env.step_and_maybe_reset(env.rand_action(td))``, each until a value of
  every leaf has been read on the host.
- **ours, num_envs=2**: the same with 2 envs, in a cache that only a ``num_envs=4`` run of the env has filled
  (with ``--cache warm``, a private one: an untimed ``num_envs=4`` child fills it first): does a new batch size
  compile again? (Ours: yes, each batch size once; Brax's saved steps take any.) With ``--cache
  cold`` it is a cold start of 2 envs, to compare with.
- **raw**: the library's own start: import JAX and the library (import s), build the env the library's way
  (build s), then ``jax.jit(jax.vmap(env.reset))`` and ``jax.jit(jax.vmap(env.step))`` on 4 keys and zero
  actions, each until ``block_until_ready``. ``brax/ant_4x2`` is Brax's ant split into 4 agents: its raw row is
  Brax's own ``ant`` (``brax.envs.get_environment("ant")``), one robot per env, the same physics. The raw step
  is the env's own ``step``: JaxMARL's and gymnax's reset the envs that end, Jumanji's and Brax's bare ones do
  not (ours does, every family), so those two raw rows compile a little less than ours.
- **raw, num_envs=2**: the raw start with 2 envs in a cache that only the raw ``num_envs=4`` child filled: the
  library's own loop compiles again for a new batch size too (XLA compiles static shapes).

Caches. marl_envs keeps JAX's persistent compilation cache in ``${XDG_CACHE_HOME:-~/.cache}/marl_envs/jax``
(compilations over 0.2 s kept; ``backends/jax/_runtime.py``); the raw child uses the same settings with a
directory of its own beside it, ``${XDG_CACHE_HOME:-~/.cache}/marl_envs/jax-raw``. ``--cache warm`` (the
default) runs one untimed child of each kind first, then the timed ones on these caches; ``--cache cold`` gives
every timed child fresh empty caches (``XDG_CACHE_HOME`` and both JAX cache directories in a temporary
directory); ``--cache both`` does both. ``--repeat N`` runs each row N times and reports each column's median.

Columns: ``import``, ``build``, ``reset``, ``step`` (the first of each), ``total`` (from just before the parent
starts the child, so including the interpreter's start, to the first step's data; both read the system's
monotonic clock), ``wall`` (the child's whole life, as the parent sees it, exit included).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENVS = ["jaxmarl/MPE_simple_spread_v3", "gymnax/CartPole-v1", "jumanji/LevelBasedForaging-v0", "brax/ant_4x2"]
SLOW_ENVS = ["playground/CartpoleBalance"]
LIBRARIES = ["jax", "jaxlib", "torch", "tensordict", "marl-envs", "jaxmarl", "gymnax", "jumanji", "brax",
             "playground", "mujoco"]
COLUMNS = ["import", "build", "reset", "step", "total", "wall"]
MARK = "STARTUP_TIMES "

OURS = """import sys, time, json
t0, name, B = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def read(td):  # one value of every leaf, on the host
    return [leaf.reshape(-1)[:1].tolist() for leaf in td.values(True, True)]
t = [time.perf_counter()]
import marl_envs
t.append(time.perf_counter())
env = marl_envs.make(name, num_envs=B)
t.append(time.perf_counter())
td = env.reset(); read(td)
t.append(time.perf_counter())
out, _ = env.step_and_maybe_reset(env.rand_action(td)); read(out)
t.append(time.perf_counter())
"""

RAW = """import sys, time, json
t0, name, B, cache = float(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
t = [time.perf_counter()]
import numpy as np
import jax
jax.config.update("jax_compilation_cache_dir", cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
jax.config.update("jax_default_device", "cpu")
{imports}
t.append(time.perf_counter())
{build}
t.append(time.perf_counter())
keys = jax.random.split(jax.random.PRNGKey(0), B)
carry = jax.block_until_ready(jax.jit(jax.vmap(reset))(keys))
t.append(time.perf_counter())
jax.block_until_ready(jax.jit(jax.vmap(step))(keys, carry, action))
t.append(time.perf_counter())
"""

REPORT = "print(%r + json.dumps({'times': [b - a for a, b in zip(t, t[1:])], 'total': t[-1] - t0}))" % MARK

#: The raw library's start of each env: its imports, then the code that defines ``reset(key)``,
#: ``step(key, carry, action)`` (one env each, vmapped by the child) and ``action`` (numpy, for ``B`` envs).
RAW_ENVS = {
    "jaxmarl/MPE_simple_spread_v3": ("import jaxmarl", """env = jaxmarl.make("MPE_simple_spread_v3")
reset = env.reset
step = lambda key, carry, action: env.step(key, carry[1], action)
action = {a: np.zeros((B,), "int32") for a in env.agents}"""),
    "gymnax/CartPole-v1": ("import gymnax", """env, params = gymnax.make("CartPole-v1")
reset = lambda key: env.reset(key, params)
step = lambda key, carry, action: env.step(key, carry[1], action, params)
action = np.zeros((B,), "int32")"""),
    "jumanji/LevelBasedForaging-v0": ("import jumanji", """env = jumanji.make("LevelBasedForaging-v0")
reset = env.reset
step = lambda key, carry, action: env.step(carry[0], action)
action = np.zeros((B, *env.action_spec.shape), "int32")"""),
    "brax/ant_4x2": ("from brax import envs", """env = envs.get_environment("ant")
reset = env.reset
step = lambda key, carry, action: env.step(carry, action)
action = np.zeros((B, env.action_size), "float32")"""),
    "playground/CartpoleBalance": ("from mujoco_playground import registry", """env = registry.load(
    "CartpoleBalance", config_overrides={"impl": "jax"})
reset = env.reset
step = lambda key, carry, action: env.step(carry, action)
action = np.zeros((B, env.action_size), "float32")"""),
}


def cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def child_env(home: Path | None) -> dict[str, str]:
    """The child's environment: ours, or a fresh cache home (``XDG_CACHE_HOME`` and marl_envs's JAX cache)."""
    env = dict(os.environ)
    if home is not None:
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        env.update(XDG_CACHE_HOME=str(home), MARL_ENVS_JAX_CACHE_DIR=str(home / "marl_envs" / "jax"))
    return env


def run_child(who: str, name: str, num_envs: int, home: Path | None) -> dict[str, float]:
    """One fresh process; its times (s) by column. ``home``: a cache home of its own, else the normal caches."""
    if who == "raw":
        imports, build = RAW_ENVS[name]
        code = RAW.format(imports=imports, build=build) + REPORT
        cache = (home or cache_home()) / "marl_envs" / "jax-raw"
    else:
        code, cache = OURS + REPORT, Path()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, repr(start), name, str(num_envs), str(cache)],
                          capture_output=True, text=True, env=child_env(home))
    wall = time.perf_counter() - start
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode or not lines:
        raise RuntimeError(f"{who} child of {name} failed ({done.returncode}): {done.stderr.strip()[-600:]}")
    out = json.loads(lines[-1][len(MARK):])
    return dict(zip(COLUMNS, [*out["times"], out["total"], wall]))


def measure(name: str, who: str, cache: str, repeat: int, num_envs: int) -> dict[str, float]:
    """The median of ``repeat`` timed children of one row, with the caches ``cache`` says."""
    runs = []
    kind, new = who.split(",")[0], who.endswith("new num_envs")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="marl-envs-startup-") as tmp:
            home = Path(tmp) if cache == "cold" or new else None
            if new and cache == "warm":  # a cache only the usual batch size filled
                run_child(kind, name, num_envs, home)
            runs.append(run_child(kind, name, num_envs // 2 if new else num_envs, home))
    return {column: statistics.median(run[column] for run in runs) for column in COLUMNS}


def machine() -> dict[str, object]:
    """The date, the processor, the core count, Python's and the libraries' versions (read without importing)."""
    cpu = platform.processor()
    if not cpu and Path("/proc/cpuinfo").exists():
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    versions = {"python": platform.python_version()}
    for library in LIBRARIES:
        try:
            versions[library] = importlib.metadata.version(library)
        except importlib.metadata.PackageNotFoundError:
            versions[library] = "absent"
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": f"{cpu or platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
            "versions": versions}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--all", action="store_true", help="also playground/CartpoleBalance (minutes)")
    parser.add_argument("--cache", choices=["warm", "cold", "both"], default="warm")
    parser.add_argument("--repeat", type=int, default=1, help="timed children per row (the median is shown)")
    parser.add_argument("--num-envs", type=int, default=4, help="the batch size (the new one is half of it)")
    parser.add_argument("--json", metavar="FILE", help="append one JSON record per row to FILE")
    parser.add_argument("envs", nargs="*", help="only these envs (default: the four, or five with --all)")
    args = parser.parse_args(argv)
    names = args.envs or ENVS + (SLOW_ENVS if args.all else [])
    if set(names) - set(RAW_ENVS):
        parser.error(f"no raw start for {sorted(set(names) - set(RAW_ENVS))}; known: {', '.join(RAW_ENVS)}")
    caches = ["warm", "cold"] if args.cache == "both" else [args.cache]
    info = machine()
    print(f"{info['date']}  {info['machine']}  "
          + " ".join(f"{k} {v}" for k, v in info["versions"].items()), flush=True)
    header = ["env", "who", "cache", *(f"{c} s" for c in COLUMNS)]
    widths = [max(len(n) for n in names), len("ours, num_envs=2"), 5, *(7,) * len(COLUMNS)]

    def row(cells: list[str]) -> str:  # text left, numbers right
        return "  ".join(c.ljust(w) if i < 3 or not c[:1].isdigit() else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths + [0]))).rstrip()

    print(row(header))
    failed = 0
    for cache in caches:
        for name in names:
            if cache == "warm":  # fill both caches, untimed
                for who in ("ours", "raw"):
                    try:
                        run_child(who, name, args.num_envs, None)
                    except RuntimeError as error:
                        print(f"warm-up: {error}", file=sys.stderr)
            for who in ("ours", "ours, new num_envs", "raw", "raw, new num_envs"):
                label = who.replace("new num_envs", f"num_envs={args.num_envs // 2}")
                cells = [name, label, cache]
                try:
                    times = measure(name, who, cache, args.repeat, args.num_envs)
                    cells += [f"{times[c]:.2f}" for c in COLUMNS]
                except RuntimeError as error:
                    failed, times = failed + 1, {"error": str(error)}
                    cells.append(f"failed: {str(error).splitlines()[-1][:80]}")
                print(row(cells), flush=True)
                if args.json:
                    record = {"env": name, "who": label, "cache": cache, "repeat": args.repeat,
                              **{f"{c}_s": t for c, t in times.items() if c != "error"},
                              **({"error": times["error"]} if "error" in times else {}), **info}
                    with open(args.json, "a") as file:
                        file.write(json.dumps(record) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
