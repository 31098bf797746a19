"""Pure-JAX reference loops shared by the JAX families' benchmark references (Brax, JaxMARL, gymnax)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import jax


class JaxLoop:
    """A Python loop over ``state = fn(state, inputs[t])``: one dispatch per step (inputs pre-split)."""

    def __init__(self, fn, state, inputs: Sequence[Any]):
        self.fn, self.state, self.inputs = fn, state, inputs

    def __call__(self, steps: range) -> None:
        state, fn, inputs = self.state, self.fn, self.inputs
        for t in steps:
            state = fn(state, inputs[t])
        self.state = state

    def sync(self) -> None:
        jax.block_until_ready(self.state)


class ScanLoop:
    """``state = fn(state, chunk)`` per chunk of steps: a ``lax.scan`` rollout, no Python per step."""

    def __init__(self, fn, state, chunks: dict[tuple[int, int], Any]):
        self.fn, self.state, self.chunks = fn, state, chunks

    def __call__(self, steps: range) -> None:
        self.state = self.fn(self.state, self.chunks[steps.start, steps.stop])

    def sync(self) -> None:
        jax.block_until_ready(self.state)


def compiled_loop(label: str, step: Callable, carry: Any, inputs: Sequence[Any]) -> tuple[dict, dict[str, float]]:
    """``({label: JaxLoop}, {compile time})`` of ``carry = step(carry, inputs[t])``, compiled ahead of time with
    the carry donated."""
    start = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=0).trace(carry, inputs[0]).lower().compile()
    return {label: JaxLoop(compiled, carry, inputs)}, {"pure JAX loop: compile step": time.perf_counter() - start}


def core_timings(env) -> dict[str, float]:
    """Our env's one-off costs: compiling (or loading) each of its compiled functions (reset, step, ...)."""
    return {f"ours: compile {name}": seconds for name, seconds in sorted(env.compile_seconds.items())}
