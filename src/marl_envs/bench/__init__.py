"""The one benchmark harness: our env against each backend's raw reference loops, in one process.

``marl-envs bench NAME`` prints its table (``benchmarks/results.py`` runs it for every row of the performance
page). The harness builds the env by name, draws every step's random actions beforehand (not timed), and times our
``step_and_maybe_reset`` loop against the loops the backend contributes. A backend contributes them through one
declared protocol: a :class:`References`, which its record names (``marl_envs.registry.Backend.bench``: by
default ``marl_envs.backends.<backend>.bench.BENCH``). ``marl_envs.bench.jax`` holds what the JAX families' loops
share.

**One interleaving scheme.** The steps are cut into ``rounds`` chunks; in each round every loop runs the chunk
in turn (the order rotating from round to round), so a change in the machine's load hits all loops alike. A
loop's time is the median of its rounds times ``rounds``, so a load spike in one round decides no ratio. Every
loop first runs a few warm-up steps (compilation, caches).

**Records.** ``record(...)`` turns a run's rows into one JSON record (the env and its keywords, the sizes, the
device and the hardware, the date, the library versions, ours and each raw loop, the ratios);
``marl-envs bench NAME --record FILE`` appends it to ``FILE`` (one record a line). The documentation's
performance page is rendered from ``benchmarks/results.jsonl``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from tensordict import TensorDictBase

from .._core.env import EnvBase
from ..cli.format import table
from .._version import installed_version
from ..registry import backend_record, backends, make

__all__ = ["Loop", "OursLoop", "References", "append_record", "format_bench", "hardware", "record", "references", "run"]

WARMUP = 3


class Loop(Protocol):
    """One implementation under test: ``loop(steps)`` runs those steps of the plan, ``loop.sync()`` waits until
    the work it queued (on a GPU, in JAX) is done."""

    def __call__(self, steps: range) -> None: ...

    def sync(self) -> None: ...


@dataclass(frozen=True)
class References:
    """A backend's contribution to the harness.

    Attributes:
        default_num_envs: the batch size ``marl-envs bench`` uses when none is given.
        loops: ``loops(env, plan, chunks)`` -> ``({label: Loop}, {label: seconds})``: the raw reference loops
            stepping the same actions as ``plan`` (``plan[t]``: the TensorDict of actions of step ``t``), and
            one-off costs of building them (compilation); ``chunks`` are the step ranges the loops will be called
            with (warm-up first), for loops that prepare per chunk.
        timings: ``timings(env)`` -> ``{label: seconds}``, one-off costs of our env, read after the run.
        legal_actions: the reference loops draw legal actions every step where action masks rule (PettingZoo's
            turn-based games reject illegal ones), so ours does too (``rand_action`` per step, timed); False: they
            step the plan's actions as they are (JaxMARL's SMAX takes any action), and so does ours, with
            ``validate_actions=False`` where the env has masks (its check would refuse a masked-out choice).
    """

    default_num_envs: int
    loops: Callable[[EnvBase, Sequence[TensorDictBase], Sequence[range]], tuple[dict[str, Loop], dict[str, float]]]
    timings: Callable[[EnvBase], dict[str, float]] = field(default=lambda env: {})
    legal_actions: bool = True


def references(backend: str) -> References:
    """The ``References`` a backend's record names (``Backend.bench``; imports the backend)."""
    return backend_record(backend).references()


class OursLoop:
    """Our env: ``step_and_maybe_reset`` over the plan, each action written with ``set`` as a policy module writes
    its output (with ``legal_actions``, legal random actions drawn per step where masks rule)."""

    def __init__(self, env: EnvBase, plan: Sequence[TensorDictBase], legal_actions: bool = True):
        self.env = env
        self.plan = [[(key, step.get(key)) for key in env.action_keys] for step in plan]
        masks = any(key[-1] == "action_mask" for key in env.observation_keys if isinstance(key, tuple))
        self.masked = legal_actions and masks
        if masks and not legal_actions:  # the plan's choices ignore the masks, as the raw loops' do
            env.validate_actions = False
        self.td = env.reset()

    def __call__(self, steps: range) -> None:
        env, td = self.env, self.td
        for t in steps:
            if self.masked:
                env.rand_action(td)
            else:
                for key, action in self.plan[t]:
                    td.set(key, action)
            td = env.step_and_maybe_reset(td)[1]
        self.td = td

    def sync(self) -> None:
        if self.env.device.type == "cuda":
            torch.cuda.synchronize(self.env.device)


def run(
    name: str, *, num_envs: int | None = None, steps: int = 100, rounds: int = 5, device: str = "cpu",
    **env_kwargs: Any,
) -> list[tuple[str, float, int]]:
    """Time ``steps`` steps of ``num_envs`` envs of ``name``: ours, then the backend's reference loops.

    Args:
        name: a built-in backend's env name (``"vmas/balance"``).
        num_envs: batch size; None for the backend's default.
        steps: timed steps per loop (cut into ``rounds`` chunks; one round if ``rounds`` does not divide them).
        rounds: see the module docstring.
        device: torch device of our env (and of the references, where they have one).
        **env_kwargs: keywords for ``marl_envs.make`` (scenario options, ``backend="spring"``, ...).

    Returns:
        Rows ``(label, seconds, env_steps)``: ours first, then the references; then rows with ``env_steps=0``,
        one-off timings (build, compilation).
    """
    refs = references(name.partition("/")[0])
    num_envs = num_envs or refs.default_num_envs
    rounds = rounds if steps >= rounds and steps % rounds == 0 else 1
    chunk = steps // rounds
    chunks = [range(WARMUP)] + [range(WARMUP + r * chunk, WARMUP + (r + 1) * chunk) for r in range(rounds)]
    start = time.perf_counter()
    env = make(name, num_envs=num_envs, device=device, seed=0, **env_kwargs)
    build = time.perf_counter() - start
    generator = torch.Generator(device=env.device).manual_seed(0)
    plan = [env.full_action_spec.rand(generator=generator) for _ in range(WARMUP + steps)]
    loops: dict[str, Loop] = {f"marl_envs {type(env).__name__}, auto-reset": OursLoop(env, plan, refs.legal_actions)}
    reference_loops, reference_timings = refs.loops(env, plan, chunks)
    loops.update(reference_loops)
    for loop in loops.values():
        loop(chunks[0])
        loop.sync()
    times: dict[str, list[float]] = {label: [] for label in loops}
    labels = list(loops)
    for r, steps_r in enumerate(chunks[1:]):
        for k in range(len(labels)):
            label = labels[(k + r) % len(labels)]
            start = time.perf_counter()
            loops[label](steps_r)
            loops[label].sync()
            times[label].append(time.perf_counter() - start)
    rows = [(label, statistics.median(t) * rounds, num_envs * rounds * chunk) for label, t in times.items()]
    rows.append((f"  build {type(env).__name__}", build, 0))
    timings = {**refs.timings(env), **reference_timings}
    rows.extend((f"  {label}", seconds, 0) for label, seconds in timings.items())
    env.close()
    return rows


def format_bench(name: str, num_envs: int, steps: int, rows: Sequence[tuple[str, float, int]]) -> str:
    """The table of ``run``'s rows; the first is ours. Rows with no env steps are timings only.

    ``ours/this time`` <= 1.10 reads "ours costs at most 1.10x this"; ``ours/this speed`` >= 3 reads
    "ours reaches at least 3x the env-steps/s of this".
    """
    ours_rate = rows[0][2] / rows[0][1]
    out = []
    for label, seconds, env_steps in rows:
        if env_steps:
            rate = env_steps / seconds
            out.append((label, f"{seconds:.3f}", f"{rate:,.0f}", f"{rate / ours_rate:.2f}", f"{ours_rate / rate:.2f}"))
        else:
            out.append((label, f"{seconds:.3f}", "-", "-", "-"))
    header = f"{name}: {num_envs} envs x {steps} steps\n"
    return header + table(("implementation", "seconds", "env-steps/s", "ours/this time", "ours/this speed"), out)


def hardware(device: str) -> str:
    """The device in words: the GPU's name, or the CPU's model and core count."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores"


def record(name: str, num_envs: int, steps: int, rounds: int, device: str, env_kwargs: dict[str, Any],
           rows: Sequence[tuple[str, float, int]], command: str) -> dict[str, Any]:
    """One run of ``run`` as a JSON-ready record: what ran, where, when, with which versions, and each loop's
    time per step beside ours (``ratio``: ours / that loop's time)."""
    loops = [(label, seconds, env_steps) for label, seconds, env_steps in rows if env_steps]
    ours = loops[0]
    backend = name.partition("/")[0]
    libraries = backend_record(backend).distributions if backend in backends() else ()
    versions = {d: installed_version(d) for d in ["marl-envs", "torch", *libraries]}
    return {
        "env": name, "env_kwargs": env_kwargs, "num_envs": num_envs, "steps": steps, "rounds": rounds,
        "device": device.partition(":")[0], "hardware": hardware(device),
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "versions": {d: v for d, v in versions.items() if v is not None},
        "ours": {"label": ours[0], "us_per_step": 1e6 * ours[1] / ours[2] * num_envs},
        "references": [{"label": label, "us_per_step": 1e6 * seconds / env_steps * num_envs,
                        "ratio": ours[1] / ours[2] / (seconds / env_steps)} for label, seconds, env_steps in loops[1:]],
        "command": command,
    }


def append_record(path: str | os.PathLike, entry: dict[str, Any]) -> None:
    """Append ``entry`` to the records file ``path`` (one JSON record a line)."""
    with open(path, "a") as out:
        out.write(json.dumps(entry, sort_keys=True) + "\n")
