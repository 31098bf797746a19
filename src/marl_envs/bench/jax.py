"""Pure-JAX reference loops shared by the JAX families' benchmark references (Brax, JaxMARL, gymnax)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import torch


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


def torch_bridge(device: torch.device) -> tuple[Callable[[torch.Tensor], Any], Callable[[Any], torch.Tensor]]:
    """``(to_jax, to_torch)`` as a torch user bridging to a JAX library writes them: NumPy views on the CPU (the
    cheaper way there), JAX's and torch's public DLPack functions on a GPU."""
    if device.type != "cpu":
        return jax.dlpack.from_dlpack, torch.from_dlpack
    # torch's once-a-process warning about a read-only NumPy array (JAX's are) is given, unshown, where our own
    # hand-off is defined: reading ``Transfer`` imports it
    from ..backends.jax import Transfer  # noqa: F401

    return (lambda tensor: tensor.numpy()), (lambda array: torch.from_numpy(np.asarray(array)))


class BridgeLoop(JaxLoop):
    """The same compiled step as a ``JaxLoop``, driven from torch: each step's action handed from a torch tensor to
    JAX, and the outputs a learner reads (``outputs(state)``: arrays) handed to torch (``torch_bridge``), which
    waits for the step. What a torch learner that steps the raw library through its own bridge runs: ours does the
    same and more (every done entry of every level, checked actions, TensorDicts).

    Args:
        fn: the compiled step, ``state = fn(state, input)``.
        state: its first state.
        actions: each step's action, as torch tensors in the dtype the step takes.
        outputs: the arrays of a state that are handed to torch.
        device: the torch device.
        keys: each step's JAX keys, where the step takes ``(keys, action)``; None: it takes the action.
    """

    def __init__(self, fn, state, actions: Sequence[torch.Tensor], outputs: Callable[[Any], Sequence[Any]],
                 device: torch.device, keys: Sequence[Any] | None = None):
        self.fn, self.state, self.actions, self.outputs, self.keys = fn, state, actions, outputs, keys
        self.to_jax, self.to_torch = torch_bridge(device)
        self.read: list[torch.Tensor] = []

    def __call__(self, steps: range) -> None:
        state, fn, actions, keys, outputs = self.state, self.fn, self.actions, self.keys, self.outputs
        to_jax, to_torch = self.to_jax, self.to_torch
        read = self.read
        for t in steps:
            action = to_jax(actions[t])
            state = fn(state, action if keys is None else (keys[t], action))
            read = [to_torch(array) for array in outputs(state)]
        self.state, self.read = state, read


class ScanLoop(JaxLoop):
    """``state = fn(state, inputs[start, stop])`` per chunk of steps: a ``lax.scan`` rollout, no Python per step."""

    def __call__(self, steps: range) -> None:
        self.state = self.fn(self.state, self.inputs[steps.start, steps.stop])


def compile_step(step: Callable, carry: Any, example: Any) -> tuple[Any, float]:
    """``carry = step(carry, input)`` compiled ahead of time with the carry donated, and the seconds it took."""
    start = time.perf_counter()
    return jax.jit(step, donate_argnums=0).trace(carry, example).lower().compile(), time.perf_counter() - start


def compiled_loop(label: str, step: Callable, carry: Any, inputs: Sequence[Any]) -> tuple[dict, dict[str, float]]:
    """``({label: JaxLoop}, {compile time})`` of ``carry = step(carry, inputs[t])``, compiled ahead of time with
    the carry donated."""
    compiled, seconds = compile_step(step, carry, inputs[0])
    return {label: JaxLoop(compiled, carry, inputs)}, {"pure JAX loop: compile step": seconds}


def core_timings(env) -> dict[str, float]:
    """Our env's one-off costs: compiling (or loading) each of its compiled functions (reset, step, ...)."""
    return {f"ours: compile {name}": seconds for name, seconds in sorted(env.compile_seconds.items())}
