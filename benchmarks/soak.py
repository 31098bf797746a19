"""Soak: step one representative env per backend for a long time; watch memory and step latency.

    python benchmarks/soak.py                                   # every soak, 1M env-steps each
    python benchmarks/soak.py vmas brax-grad --env-steps 200000 # some of them, shorter
    python benchmarks/soak.py --plot soak.png                   # also draw RSS and latency over the run
    python benchmarks/soak.py gymnax --floor                    # and its raw loop's tail in the same pattern

Each soak builds its env, then calls ``step_and_maybe_reset`` (random actions; the differentiable one runs a
small policy and backpropagates through windows of ``--window`` steps, ``detach_state()`` between them) until
``--env-steps`` env-steps (calls x num_envs) are done. Every call is timed alone (``perf_counter`` around the env
call only, not the action sampling), and the process's resident memory (RSS: psutil, else /proc/self/statm) is
sampled every ``--every`` calls. The first ``--warmup`` fraction of the calls is warm-up (compilation, allocator
and cache growth); the table gives the RSS growth from the end of warm-up to the end of the run, both samples
taken after a garbage collection and glibc's ``malloc_trim(0)`` (memory in use, not the allocator's free
space), and the latency percentiles over the calls after warm-up.

The targets: RSS growth < 50 MB after warm-up over 1M env-steps, p99 latency <= 2x the median.

``--floor`` also times, right after each soak, the backend's own raw loop (the reference loop of
``marl-envs bench`` that the soak names: the raw backend stepping the same env, no marl_envs or torch on its path)
one step a call in the soak's pattern: as many calls as the soak made in a fifth of its time (at most 60 s of it),
with the soak's untimed time between them (the differentiable soak's all after each window), spun on a clock. Its
p99 / p50 is what the machine does to the raw backend in a loop of that shape: a soak at or under it adds no tail
of its own.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

import marl_envs
from marl_envs import bench
from marl_envs.cli.format import table as text_table

try:
    import psutil

    _PROCESS = psutil.Process()

    def rss_bytes() -> int:
        """Resident set size of this process, in bytes."""
        return _PROCESS.memory_info().rss
except ImportError:  # pragma: no cover - psutil comes with the dev dependencies
    _PAGE = os.sysconf("SC_PAGE_SIZE")

    def rss_bytes() -> int:
        """Resident set size of this process, in bytes (from /proc/self/statm)."""
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE


MB = 2**20

try:  # glibc: hand the heap's free pages back to the OS before each RSS sample, so that RSS is memory in use
    import ctypes

    _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # pragma: no cover - not glibc
    _malloc_trim = None


def settled_rss_mb() -> float:
    """RSS in MB after a garbage collection and (glibc) ``malloc_trim(0)``: memory in use, not the free space
    the allocator holds (which would hide a leak that refills it, and count freed memory as growth)."""
    gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)
    return rss_bytes() / MB

#: growth and latency limits of the acceptance criteria
MAX_GROWTH_MB = 50.0
MAX_P99_OVER_P50 = 2.0


@dataclass
class Soak:
    """One soak: how to build the env and how to drive it."""

    env: str
    num_envs: int
    kwargs: dict = field(default_factory=dict)
    differentiable: bool = False  # a policy trained through the env, backprop every ``window`` calls
    reference: str = ""  # the raw loop of ``marl_envs.bench`` that ``--floor`` times


#: the soaks of ``benchmarks/soak.py``: one representative env per backend, and a differentiable Brax rollout
_BRAX_LOOP = "pure JAX: jit(vmap(step)) Python loop, Brax auto-reset"
SOAKS = {
    "vmas": Soak("vmas/balance", 256, {"n_agents": 4}, reference="raw vmas, no resets"),
    "brax": Soak("brax/ant_4x2", 128, {"backend": "spring"}, reference=_BRAX_LOOP),
    "pettingzoo": Soak("pettingzoo/mpe/simple_spread_v3", 16, {"N": 3}, reference="raw PettingZoo loop"),
    "jaxmarl": Soak("jaxmarl/MPE_simple_spread_v3", 256,
                    reference="pure JAX: jit(vmap(env.step)) Python loop, JaxMARL auto-reset"),
    "gymnax": Soak("gymnax/CartPole-v1", 256, reference="pure JAX: jit(vmap(env.step)) Python loop, gymnax auto-reset"),
    "brax-grad": Soak("brax/fast", 128, {"requires_grad": True}, differentiable=True, reference=_BRAX_LOOP),
}


@dataclass
class Result:
    name: str
    env: str
    num_envs: int
    calls: int
    env_steps: int
    seconds: float
    rss_warm_mb: float  # at the end of warm-up
    rss_end_mb: float
    rss_peak_mb: float  # highest sample after warm-up
    p50_us: float
    p90_us: float
    p99_us: float
    max_us: float
    gap_us: float = 0.0  # untimed time per call after warm-up (actions, policy, backward pass, RSS samples)
    floor_us: tuple[float, float] | None = None  # p50, p99 of the raw loop in the soak's pattern (``--floor``)
    rss_samples: list = field(default_factory=list, repr=False)  # (call index, MB)
    latencies_us: list = field(default_factory=list, repr=False)  # every call after warm-up (for plots)

    @property
    def growth_mb(self) -> float:
        return self.rss_end_mb - self.rss_warm_mb

    @property
    def passed(self) -> bool:
        return self.growth_mb < MAX_GROWTH_MB and self.p99_us <= MAX_P99_OVER_P50 * self.p50_us


def _policy(env: marl_envs.EnvBase) -> tuple[torch.nn.Module, Callable]:
    """A linear policy per action key (``tanh`` into the action box) reading the observation beside it."""
    pairs = []  # (action key, observation key)
    for key in env.action_keys:
        pairs.append((key, (*key[:-1], "observation") if isinstance(key, tuple) else "observation"))
    layers = torch.nn.ModuleList(
        torch.nn.Linear(env.full_observation_spec[obs].shape[-1], env.full_action_spec[key].shape[-1])
        for key, obs in pairs
    )

    def act(td):
        for layer, (key, obs) in zip(layers, pairs):
            td.set(key, torch.tanh(layer(td.get(obs))))
        return td

    return layers, act


def run_soak(
    env: marl_envs.EnvBase,
    env_steps: int,
    *,
    name: str = "",
    differentiable: bool = False,
    window: int = 16,
    warmup: float = 0.1,
    every: int = 64,
    progress: bool = True,
    keep_series: bool = False,
) -> Result:
    """Drive ``env`` for ``env_steps`` env-steps with ``step_and_maybe_reset``; time each call, sample RSS.

    Args:
        env: a built env (any backend). With ``differentiable=True``, a Brax env built with
            ``requires_grad=True``.
        env_steps: env-steps to run (calls x ``env.num_envs``, rounded up to whole calls).
        differentiable: act with a small policy and backpropagate the windows' mean reward into it
            (one ``Adam`` step per window), ``detach_state()`` after each window.
        window: calls per backpropagation window.
        warmup: fraction of the calls before the reference RSS sample (and excluded from the percentiles).
        every: calls between RSS samples.
        progress: show a tqdm progress bar.
        keep_series: keep every RSS sample and every latency (for plots).
    """
    calls = -(-env_steps // env.num_envs)
    warm = max(1, int(calls * warmup))
    latencies = np.full(calls, np.nan)  # written now, so that filling it later does not grow the RSS
    samples: list[tuple[int, float]] = []
    if differentiable:
        policy, act = _policy(env)
        optim = torch.optim.Adam(policy.parameters(), lr=1e-3)
        rewards = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=calls * env.num_envs, desc=name or str(env), unit="env-step", unit_scale=True,
                   mininterval=1.0, file=sys.stderr, disable=None)  # None: a bar only on a terminal
    rss_warm = None
    td = env.reset()
    start = time.perf_counter()
    for i in range(calls):
        if differentiable:
            td = act(td)
        else:
            td = env.rand_action(td)
        t0 = time.perf_counter()
        td, root = env.step_and_maybe_reset(td)
        latencies[i] = time.perf_counter() - t0
        if differentiable:
            rewards.append(sum(td.get(("next", key)).mean() for key in env.reward_keys))
            if len(rewards) == window:
                optim.zero_grad()
                (-torch.stack(rewards).mean()).backward()
                optim.step()
                rewards.clear()
                env.detach_state()
                root = root.detach()
        td = root
        if i + 1 == warm:
            rss_warm = settled_rss_mb()
            samples.append((i + 1, rss_warm))
            timed_from = time.perf_counter()
        elif (i + 1) % every == 0:
            samples.append((i + 1, rss_bytes() / MB))
        if bar is not None and (i + 1) % 16 == 0:
            bar.update(16 * env.num_envs)
    end = time.perf_counter()
    seconds = end - start
    if bar is not None:
        bar.update(calls * env.num_envs - bar.n)
        bar.close()
    rss_end = settled_rss_mb()
    samples.append((calls, rss_end))
    if calls == warm:  # too short for a warm-up: every call counts
        warm, timed_from = 0, start
    after = latencies[warm:] * 1e6
    p50, p90, p99 = np.percentile(after, [50, 90, 99])
    return Result(
        name=name, env=str(getattr(env, "name", "")) or type(env).__name__, num_envs=env.num_envs, calls=calls,
        env_steps=calls * env.num_envs, seconds=seconds, rss_warm_mb=rss_warm, rss_end_mb=rss_end,
        rss_peak_mb=max(mb for call, mb in samples if call >= warm), p50_us=p50, p90_us=p90, p99_us=p99,
        max_us=float(after.max()), gap_us=((end - timed_from) * 1e6 - after.sum()) / len(after),
        rss_samples=samples if keep_series else [],
        latencies_us=after.tolist() if keep_series else [],
    )


def table(results: list[Result]) -> str:
    floors = any(r.floor_us is not None for r in results)
    headers = ("soak", "env", "num_envs", "env-steps", "env-steps/s", "RSS warm MB", "growth MB", "peak-warm MB",
               "p50 us", "p90 us", "p99 us", "max us", "p99/p50",
               *(("raw loop p50 us", "raw loop p99 us", "raw loop p99/p50") if floors else ()), "ok")
    return text_table(headers, [
        (r.name, r.env, r.num_envs, f"{r.env_steps:,}", f"{r.env_steps / r.seconds:,.0f}", f"{r.rss_warm_mb:.0f}",
         f"{r.growth_mb:+.1f}", f"{r.rss_peak_mb - r.rss_warm_mb:+.1f}", f"{r.p50_us:,.0f}", f"{r.p90_us:,.0f}",
         f"{r.p99_us:,.0f}", f"{r.max_us:,.0f}", f"{r.p99_us / r.p50_us:.2f}",
         *(_floor_cells(r.floor_us) if floors else ()), "yes" if r.passed else "NO")
        for r in results
    ])


def _floor_cells(floor_us: tuple[float, float] | None) -> tuple[str, str, str]:
    if floor_us is None:
        return "-", "-", "-"
    p50, p99 = floor_us
    return f"{p50:,.0f}", f"{p99:,.0f}", f"{p99 / p50:.2f}"


def time_in_pattern(call: Callable[[], object], seconds: float, call_us: float, gap_us: float = 0.0,
                    window: int = 1) -> np.ndarray:
    """Latencies (us) of ``call``, each call timed alone, with ``gap_us`` spun on a clock (untimed, touching no
    data) after every ``window`` calls: as many calls as ``seconds`` holds at ``call_us`` a call (at least
    ``2 * window``), the first 10% of them left out as warm-up."""
    calls = max(2 * window, int(seconds * 1e6 / (call_us + gap_us / window)))
    latencies = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter()
        call()
        latencies[i] = time.perf_counter() - t0
        if gap_us and (i + 1) % window == 0:
            end = time.perf_counter() + gap_us / 1e6
            while time.perf_counter() < end:
                pass
    return latencies[calls // 10:] * 1e6


def reference_floor(env: marl_envs.EnvBase, soak: Soak, result: Result, window: int) -> tuple[float, float]:
    """p50 and p99 (us) of ``soak.reference`` (a raw loop of ``marl_envs.bench`` over ``env``'s backend), one step
    a call in ``result``'s pattern (see the module's docstring), timed now."""
    plan = [env.full_action_spec.rand() for _ in range(64)]  # cycled
    loops, _ = bench.references(soak.env.split("/")[0]).loops(env, plan, [range(t, t + 1) for t in range(len(plan))])
    for other in loops.values():
        if isinstance(other, bench.OursLoop):  # PettingZoo's: ours again, in worker processes
            other.env.close()
    loop, steps = loops[soak.reference], itertools.cycle(range(len(plan)))

    def call():
        t = next(steps)
        loop(range(t, t + 1))
        loop.sync()

    per = window if soak.differentiable else 1
    lat = time_in_pattern(call, min(60.0, result.seconds / 5), result.p50_us, gap_us=result.gap_us * per, window=per)
    p50, p99 = np.percentile(lat, [50, 99])
    return float(p50), float(p99)


def plot(results: list[Result], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rss, ax_lat) = plt.subplots(1, 2, figsize=(12, 4))
    for r in results:
        start = next(i for i, (_, mb) in enumerate(r.rss_samples) if mb == r.rss_warm_mb)  # warm-up left out
        calls, mb = zip(*r.rss_samples[start:])
        ax_rss.plot(np.array(calls) * r.num_envs / 1e6, np.array(mb) - r.rss_warm_mb, label=r.name)
        lat = np.sort(np.asarray(r.latencies_us) / r.p50_us)
        ax_lat.plot(lat, 1 - np.arange(len(lat)) / len(lat), label=r.name)
    ax_rss.axhline(MAX_GROWTH_MB, color="grey", ls="--", lw=1)
    ax_rss.set(xlabel="env-steps (millions)", ylabel="RSS - RSS at end of warm-up (MB)", title="memory after warm-up")
    ax_lat.axvline(MAX_P99_OVER_P50, color="grey", ls="--", lw=1)
    ax_lat.axhline(0.01, color="grey", ls=":", lw=1)
    ax_lat.set(xscale="log", yscale="log", xlabel="call latency / median", ylabel="fraction of calls slower",
               title="step latency after warm-up")
    for ax in (ax_rss, ax_lat):
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("soaks", nargs="*", help=f"some of: {' '.join(SOAKS)} (default: all)")
    parser.add_argument("--env-steps", type=int, default=1_000_000, help="env-steps per soak (default 1M)")
    parser.add_argument("--warmup", type=float, default=0.1, help="fraction of the calls that is warm-up")
    parser.add_argument("--every", type=int, default=64, help="calls between RSS samples")
    parser.add_argument("--window", type=int, default=16, help="brax-grad: calls per backpropagation window")
    parser.add_argument("--floor", action="store_true",
                        help="after each soak, time the backend's raw loop in its pattern: the p99/p50 without us")
    parser.add_argument("--json", help="also write the results (with the series) to this file")
    parser.add_argument("--plot", help="also draw RSS and latency to this image")
    args = parser.parse_args(argv)
    unknown = [name for name in args.soaks if name not in SOAKS]
    if unknown:
        parser.error(f"unknown soak(s) {unknown}; choose among {list(SOAKS)}")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{torch.get_num_threads()} torch threads, torch {torch.__version__}\n", flush=True)
    results = []
    installed = set(marl_envs.available_envs())
    for name in args.soaks or SOAKS:
        soak = SOAKS[name]
        if soak.env not in installed:
            print(f"{name}: skipped ({soak.env}: its backend is not installed)")
            continue
        env = marl_envs.make(soak.env, num_envs=soak.num_envs, seed=0, **soak.kwargs)
        result = run_soak(env, args.env_steps, name=name, differentiable=soak.differentiable, window=args.window,
                          warmup=args.warmup, every=args.every, keep_series=bool(args.json or args.plot))
        result.env = soak.env + "".join(f" {k}={v}" for k, v in soak.kwargs.items())
        if args.floor:
            result.floor_us = reference_floor(env, soak, result, args.window)
        env.close()
        results.append(result)
        print(table([result]), "\n", flush=True)
    if len(results) > 1:
        print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
