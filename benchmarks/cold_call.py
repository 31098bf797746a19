"""Cold calls: how much slower a call is right after some milliseconds of other work, on this machine.

    python benchmarks/cold_call.py                      # gaps of 0, 0.5, 2 and 8 ms
    python benchmarks/cold_call.py --gaps 0 1 4 --windows 300

Each subject is called in windows of 16 calls; between windows the process spins for ``gap`` ms on a clock
(work that touches none of the subject's data or code). The table gives the median of the windows' first calls
over the median of their later calls (calls 3 to 16). A ratio above 1 at a gap, and growing with it, is what a
training loop pays on its first env call after its own work (a backward pass, an optimizer step): the subject
has to bring its code and data back into the caches. ``benchmarks/soak.py``'s differentiable soak runs 16 env
calls, then a ~4 ms backward pass; this script separates that machine effect from the env's own overhead.

Subjects: a NumPy sum over 32 KB (no JAX, no torch, no marl_envs: what the machine does to any small working set),
a pure-JAX ``jit`` call on small arrays (no marl_envs code but JAX's CPU setting), a few torch ops, and
``step_and_maybe_reset`` of ``brax/fast`` at 128 envs (if Brax is installed).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

from marl_envs._format import table
from noise_floor import busy

WINDOW = 16


def _numpy_subject() -> Callable[[], None]:
    data = np.ones(8192, np.float32)  # 32 KB: fits the L1 and L2 caches of any x86-64 core

    def call():
        data.sum()

    return call


def _jax_subject() -> Callable[[], None] | None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None

    from marl_envs.backends._brax_compat import inline_cpu_dispatch

    inline_cpu_dispatch()  # as the JAX families run it

    @jax.jit
    def f(x, a):
        y = x * 1.01 + jnp.sin(a).sum(axis=1, keepdims=True)
        return y, jnp.cos(y)

    state = {"x": jnp.ones((128, 40), jnp.float32)}
    action = np.ones((128, 8), np.float32)

    def call():
        state["x"], _ = f(state["x"], action)

    return call


def _torch_subject() -> Callable[[], None]:
    state = {"x": torch.ones(128, 40)}

    def call():
        x = state["x"]
        for _ in range(8):
            x = x * 1.0001 + 0.1
        state["x"] = x

    return call


def _env_subject() -> Callable[[], None] | None:
    import marl_envs

    if "brax/fast" not in marl_envs.available_envs():
        return None
    env = marl_envs.make("brax/fast", num_envs=128, seed=0)
    actions = [env.rand_action(env.reset()).get("action") for _ in range(WINDOW)]
    state = {"td": env.reset(), "i": 0}

    def call():
        td = state["td"]
        td.set("action", actions[state["i"] % WINDOW])
        state["i"] += 1
        _, state["td"] = env.step_and_maybe_reset(td)

    return call


def measure(call: Callable[[], None], gap_ms: float, windows: int) -> tuple[float, float]:
    """(median first call, median later call) in us, over ``windows`` windows after 10 left out."""
    first, later = [], []
    for w in range(windows + 10):
        for i in range(WINDOW):
            t0 = time.perf_counter()
            call()
            dt = time.perf_counter() - t0
            if w >= 10 and i != 1:  # the second call is left out: partly cold still
                (first if i == 0 else later).append(dt)
        busy(gap_ms / 1e3)
    return float(np.median(first)) * 1e6, float(np.median(later)) * 1e6


def _us(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"  # 3 digits: the NumPy sum takes a few us


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gaps", type=float, nargs="+", default=[0, 0.5, 2, 8], help="ms of other work")
    parser.add_argument("--windows", type=int, default=200, help="windows of 16 calls per gap and subject")
    parser.add_argument("--warm", type=float, default=1.0, help="seconds of calls to each subject before timing")
    args = parser.parse_args(argv)
    subjects = {"NumPy sum of 32 KB": _numpy_subject(), "pure JAX jit call": _jax_subject(),
                "torch ops": _torch_subject(), "brax/fast step_and_maybe_reset": _env_subject()}
    subjects = {name: call for name, call in subjects.items() if call is not None}  # JAX, Brax: if installed
    for call in subjects.values():  # warm: compiled, allocated, the machine at its pace (the first row too)
        busy(args.warm, call)
    headers = ["gap ms", *[f"{name}: first / later" for name in subjects]]
    rows = []
    for gap in args.gaps:
        cells = [f"{gap:g}"]
        for call in subjects.values():
            first, later = measure(call, gap, args.windows)
            cells.append(f"{_us(first)} / {_us(later)} us = {first / later:.2f}x")
        rows.append(cells)
    print(table(headers, rows))


if __name__ == "__main__":
    main()
