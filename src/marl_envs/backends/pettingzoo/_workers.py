"""PettingZoo instances in worker processes: each worker runs a :class:`Shard` over its rows of the batch, reading
the actions from and writing the results into buffers in shared memory.

Workers are forked (Linux): they inherit the factory and the buffers. A step writes the actions into the
buffers, sends each worker the same few pickled-once bytes through its pipe and wakes it through an eventfd
(a pipe's wake-up is a "sync" one, which queues the woken worker on the parent's busy core: with two
workers, the second started up to milliseconds late); each worker answers with a small reply through its pipe.
A worker that has answered polls for its next command for ``SPIN_S`` before it sleeps. A worker runs only
PettingZoo and NumPy code, never JAX or torch, so forking a process where JAX's (or torch's) threads run is safe
here: the warnings of JAX and of Python >= 3.12 about forking a multi-threaded process are silenced for our fork
only. A worker whose instance raises replies with the env index and the original traceback and stays usable; a
worker that dies is reported with its exit code. ``close()`` (also run when the env is garbage collected or the
interpreter exits) stops every worker.
"""

from __future__ import annotations

import mmap
import multiprocessing as mp
import os
import select
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np

from .._quiet import Filter, ignored_warnings
from ._shard import BatchPlan, Buffers, Shard

__all__ = ["InstanceError", "WorkerPool", "shared_zeros"]

#: how long a worker that has replied polls for its next command (yielding its core to any other runnable
#: thread) before it sleeps: waking a sleeping worker costs a good part of a short step, and its idle core
#: goes to other processes meanwhile
SPIN_S = 0.002

# the warnings about forking a multi-threaded process (JAX's, Python >= 3.12's): see the module docstring
_FORK_WARNINGS: tuple[Filter, ...] = (
    (r"os\.fork\(\) was called", RuntimeWarning),
    (r"This process .* is multi-threaded, use of fork", DeprecationWarning),
)
_PICKLED = {command: bytes(ForkingPickler.dumps((command, ()))) for command in ("step", "step_reset")}


class InstanceError(RuntimeError):
    """A PettingZoo instance raised in a step or a reset (in this process or in a worker: the message names the env
    and holds the library's message), or a worker died."""


def shared_zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zeroed array in anonymous shared memory (``MAP_SHARED``), visible to processes forked after it."""
    dtype = np.dtype(dtype)
    size = max(1, int(np.prod(shape)) * dtype.itemsize)
    return np.frombuffer(mmap.mmap(-1, size), dtype=dtype, count=int(np.prod(shape))).reshape(shape)


def _serve(conn: Connection, go: int, alive: int, parents_end: int, make: Callable[[], Any], lo: int, hi: int,
           plan: BatchPlan, buffers: Buffers, shard_class: type[Shard]) -> None:
    """A worker's loop: build the instances of rows ``[lo, hi)``, then run the commands that come in."""
    os.close(parents_end)  # ``alive`` reads EOF once the parent, the last holder of this end, is gone
    try:
        shard = shard_class([make() for _ in range(hi - lo)], lo, plan, buffers)
    except Exception:
        conn.send(("error", (lo, traceback.format_exc())))
        return
    conn.send(("ok", None))
    while _woken(go, alive):
        command, args = conn.recv()
        if command == "close":
            shard.close()
            conn.send(("ok", None))
            break
        try:
            conn.send(("ok", getattr(shard, command)(*args)))
        except Exception:
            conn.send(("error", (shard.current, traceback.format_exc())))


def _woken(go: int, alive: int) -> bool:
    """Wait for the parent's signal on ``go``: poll for ``SPIN_S``, then sleep. False: the parent is gone."""
    deadline = time.perf_counter() + SPIN_S
    while True:
        try:
            os.eventfd_read(go)
            return True
        except BlockingIOError:
            pass
        if time.perf_counter() < deadline:
            os.sched_yield()
        elif alive in select.select([go, alive], [], [])[0]:  # EOF: the parent's end closed
            return False


def _shutdown(processes: list, conns: list, gos: list, alive: int) -> None:
    for conn, go in zip(conns, gos):
        try:
            conn.send(("close", ()))
            os.eventfd_write(go, 1)
        except (BrokenPipeError, OSError):
            pass
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)
    for conn in conns:
        conn.close()
    for fd in (*gos, alive):
        os.close(fd)


class WorkerPool:
    """``num_workers`` processes, each with the instances of a contiguous slice of the batch.

    Raises:
        ValueError: ``num_workers`` out of range, or no ``fork`` start method on this platform.
        InstanceError: a worker could not build its instances.
    """

    def __init__(self, make: Callable[[], Any], num_envs: int, num_workers: int, plan: BatchPlan, buffers: Buffers,
                 shard_class: type[Shard] = Shard):
        if "fork" not in mp.get_all_start_methods():
            raise ValueError("num_workers > 0 needs the 'fork' start method (Linux); use num_workers=0 here")
        bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int)
        self.slices = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]
        context = mp.get_context("fork")
        self.conns, self.processes, self.gos = [], [], []  # gos: an eventfd per worker, its wake-up call
        alive, self._alive = os.pipe()  # never written: closing our end tells the workers we are gone
        for lo, hi in self.slices:
            parent, child = context.Pipe()
            go = os.eventfd(0, os.EFD_NONBLOCK)
            args = (child, go, alive, self._alive, make, lo, hi, plan, buffers, shard_class)
            process = context.Process(target=_serve, args=args, daemon=True, name=f"marl_envs-pettingzoo-{lo}-{hi}")
            self.gos.append(go)
            with ignored_warnings(*_FORK_WARNINGS):
                process.start()
            child.close()
            self.conns.append(parent)
            self.processes.append(process)
        os.close(alive)
        self._finalizer = weakref.finalize(self, _shutdown, self.processes, self.conns, self.gos, self._alive)
        self._gather(range(len(self.slices)))

    def _gather(self, workers: Sequence[int]) -> list:
        """The replies of ``workers`` (in that order), raising the first worker's failure once all have answered."""
        replies, failures, pending = {}, {}, list(workers)
        while pending:
            ready = wait([x for k in pending for x in (self.conns[k], self.processes[k].sentinel)])
            done = [k for k in pending if self.conns[k] in ready or self.processes[k].sentinel in ready]
            for k in done:
                pending.remove(k)
                try:
                    status, value = self.conns[k].recv()
                except (EOFError, OSError):
                    process = self.processes[k]
                    process.join(timeout=1)
                    failures[k] = InstanceError(
                        f"PettingZoo worker {k} (envs {self.slices[k][0]}-{self.slices[k][1] - 1}) died with exit "
                        f"code {process.exitcode}; the env cannot step on: build a new one"
                    )
                    continue
                if status == "error":
                    env_index, original = value
                    failures[k] = InstanceError(f"the PettingZoo instance of env {env_index} raised in worker "
                                              f"{k}:\n{original}")
                replies[k] = value
        if failures:
            raise failures[min(failures)]
        return [replies[k] for k in workers]

    def _call(self, per_worker: Sequence[tuple[str, tuple] | bytes | None]) -> list:
        """Send ``(command, args)`` (or it pickled) to each worker (None: skip it), wake them, wait for their
        replies."""
        busy = [k for k, message in enumerate(per_worker) if message is not None]
        for k in busy:  # all messages first: a worker woken early would delay the next send
            message = per_worker[k]
            self.conns[k].send_bytes(message if isinstance(message, bytes) else ForkingPickler.dumps(message))
        for k in busy:
            os.eventfd_write(self.gos[k], 1)
        return self._gather(busy)

    # -- a Shard's interface, over the workers ------------------------------------------------------
    def reset(self, rows: Sequence[int], seeds: Sequence[int | None]) -> None:
        """``Shard.reset`` on every worker (each clears its rows, even with none to reset)."""
        self._call([("reset", ([i for i in rows if lo <= i < hi], [s for i, s in zip(rows, seeds) if lo <= i < hi]))
                    for lo, hi in self.slices])

    def step(self, decoded: Sequence[Sequence | None] | None = None) -> None:
        """``Shard.step`` on every worker (the actions are in the shared buffers; ``decoded``: see ``Shard``)."""
        self._call(self._messages("step", decoded))

    def step_reset(self, decoded: Sequence[Sequence | None] | None = None,
                   seeds: Sequence[int | None] | None = None) -> None:
        """``Shard.step_reset`` on every worker, each with its rows' seeds."""
        self._call(self._messages("step_reset", decoded, seeds))

    def _messages(self, command: str, decoded: Sequence | None, seeds: Sequence | None = None) -> list:
        if decoded is None and seeds is None:  # the common case: the same bytes every step, pickled once
            return [_PICKLED[command]] * len(self.slices)
        return [(command, (None if decoded is None else [None if d is None else d[lo:hi] for d in decoded],
                           *(() if seeds is None else (seeds[lo:hi],)))) for lo, hi in self.slices]

    def render(self, row: int) -> Any:
        return self._call([("render", (row,)) if lo <= row < hi else None for lo, hi in self.slices])[0]

    def close(self) -> None:
        """Stop every worker (each closes its instances first); idempotent."""
        self._finalizer()
