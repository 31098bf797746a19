"""Noise floor: the latency tail of fixed work on this machine, the yardstick of the soak's p99 / p50.

    python benchmarks/noise_floor.py                 # the soaks' patterns, 60 s each (~5 min)
    python benchmarks/noise_floor.py --seconds 300   # as long as the longest soak

Each row times one fixed piece of Python and NumPy work (the same sums over the same 32 KB every call) in the
pattern of some of ``benchmarks/soak.py``'s loops: calls of a soak's median length back to back, or, as in the
differentiable soak, windows of 16 calls with a few milliseconds of other, untimed work between windows (spinning
on a clock: work that touches none of the timed call's data). No marl_envs, JAX or torch code runs. The p99 / p50
a row shows is the machine's: a soak with the same pattern whose p99 / p50 is no larger adds no tail of its own.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from marl_envs._format import table

DATA = np.ones((8, 1024), np.float32)  # 32 KB


def work(n: int) -> float:
    """``n`` NumPy sums over rows of ``DATA``, with the Python around them (~2 us each)."""
    total = 0.0
    for i in range(n):
        total += float(DATA[i & 7].sum())
    return total


def calibrate(call_ms: float) -> int:
    """How many iterations of ``work`` take ``call_ms`` here (the median of short runs, after 0.3 s of warm-up)."""
    probe = 2000
    busy(0.3, partial(work, probe))
    times = []
    for _ in range(9):
        t0 = time.perf_counter()
        work(probe)
        times.append(time.perf_counter() - t0)
    return max(1, round(call_ms / 1e3 / (np.median(times) / probe)))


def busy(seconds: float, call: Callable[[], object] | None = None) -> None:
    """Call ``call`` over and over for ``seconds`` (None: spin on the clock, touching no other data)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if call is not None:
            call()


@dataclass
class Pattern:
    """Calls of ``call_ms`` back to back; with ``gap_ms``, windows of ``window`` calls and a gap after each."""

    name: str
    call_ms: float
    gap_ms: float = 0.0
    window: int = 16


#: the soaks' patterns (their medians measured on the 2-core machine; docs/soak.md)
PATTERNS = [
    Pattern("10 ms calls (vmas, brax)", 10.0),
    Pattern("5 ms calls (pettingzoo)", 5.0),
    Pattern("1 ms calls (jaxmarl)", 1.0),
    Pattern("0.3 ms calls (gymnax)", 0.3),
    Pattern("0.2 ms calls, 4 ms gap every 16 (brax-grad)", 0.2, gap_ms=4.0),
]


def measure(pattern: Pattern, seconds: float, call: Callable[[], object] | None = None) -> np.ndarray:
    """Latencies (us) of ``pattern``'s calls over ``seconds`` (the first 10% of them left out as warm-up).

    ``call``: what each call runs (default: ``work`` calibrated to ``pattern.call_ms``, which then only paces the
    calls of another subject).
    """
    if call is None:
        n = calibrate(pattern.call_ms)
        call = partial(work, n)
    per_second = 1e3 / (pattern.call_ms + pattern.gap_ms / pattern.window)
    calls = max(2 * pattern.window, int(seconds * per_second))
    latencies = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter()
        call()
        latencies[i] = time.perf_counter() - t0
        if pattern.gap_ms and (i + 1) % pattern.window == 0:
            busy(pattern.gap_ms / 1e3)
    return latencies[calls // 10:] * 1e6


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds per pattern (default 60)")
    args = parser.parse_args(argv)
    rows = []
    for pattern in PATTERNS:
        lat = measure(pattern, args.seconds)
        p50, p90, p99 = np.percentile(lat, [50, 90, 99])
        rows.append((pattern.name, f"{len(lat):,}", f"{p50:,.0f}", f"{p90:,.0f}", f"{p99:,.0f}", f"{lat.max():,.0f}",
                     f"{p99 / p50:.2f}", "yes" if p99 <= 2 * p50 else "NO"))
        print(f"{pattern.name}: p99/p50 {p99 / p50:.2f}", flush=True)
    print()
    print(table(("fixed work", "calls", "p50 us", "p90 us", "p99 us", "max us", "p99/p50", "p99 <= 2x p50"), rows))


if __name__ == "__main__":
    main()
