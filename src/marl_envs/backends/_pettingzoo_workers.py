"""PettingZoo instances in worker processes: each worker runs a :class:`Shard` over its rows of the batch and
writes into buffers in shared memory, so a step sends only the actions and a one-word reply through a pipe.

Workers are forked (Linux): they inherit the factory and the buffers, so nothing needs pickling but the
actions. A worker runs only PettingZoo and NumPy code, never JAX or torch, so forking a process where JAX's (or
torch's) threads run is safe here: the warnings of JAX and of Python >= 3.12 about forking a multi-threaded
process are silenced for our fork only. A worker whose instance raises replies with the env index and the
original traceback and stays usable; a worker that dies is reported with its exit code. ``close()`` (also run
when the env is garbage collected or the interpreter exits) stops every worker.
"""

from __future__ import annotations

import mmap
import multiprocessing as mp
import traceback
import warnings
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np

from ._pettingzoo_shard import Buffers, Layout, Shard

__all__ = ["WorkerError", "WorkerPool", "shared_zeros"]


class WorkerError(RuntimeError):
    """A worker's PettingZoo instance raised, or a worker died."""


def shared_zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zeroed array in anonymous shared memory (``MAP_SHARED``), visible to processes forked after it."""
    dtype = np.dtype(dtype)
    size = max(1, int(np.prod(shape)) * dtype.itemsize)
    return np.frombuffer(mmap.mmap(-1, size), dtype=dtype, count=int(np.prod(shape))).reshape(shape)


def _serve(conn: Connection, make: Callable[[], Any], lo: int, hi: int, layout: Layout, buffers: Buffers) -> None:
    """A worker's loop: build the instances of rows ``[lo, hi)``, then run the commands that come in."""
    try:
        shard = Shard([make() for _ in range(hi - lo)], lo, layout, buffers)
    except Exception:
        conn.send(("error", (lo, traceback.format_exc())))
        return
    conn.send(("ok", None))
    while True:
        try:
            command, args = conn.recv()
        except EOFError:  # the parent is gone
            break
        if command == "close":
            shard.close()
            conn.send(("ok", None))
            break
        try:
            conn.send(("ok", getattr(shard, command)(*args)))
        except Exception:
            conn.send(("error", (shard.current, traceback.format_exc())))


def _shutdown(processes: list, conns: list) -> None:
    for conn in conns:
        try:
            conn.send(("close", ()))
        except (BrokenPipeError, OSError):
            pass
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)
    for conn in conns:
        conn.close()


class WorkerPool:
    """``num_workers`` processes, each with the instances of a contiguous slice of the batch.

    Raises:
        ValueError: ``num_workers`` out of range, or no ``fork`` start method on this platform.
        WorkerError: a worker could not build its instances.
    """

    def __init__(self, make: Callable[[], Any], num_envs: int, num_workers: int, layout: Layout, buffers: Buffers):
        if "fork" not in mp.get_all_start_methods():
            raise ValueError("num_workers > 0 needs the 'fork' start method (Linux); use num_workers=0 here")
        bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int)
        self.slices = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]
        context = mp.get_context("fork")
        self.conns, self.processes = [], []
        for lo, hi in self.slices:
            parent, child = context.Pipe()
            process = context.Process(target=_serve, args=(child, make, lo, hi, layout, buffers), daemon=True,
                                      name=f"marl_envs-pettingzoo-{lo}-{hi}")
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
                warnings.filterwarnings("ignore", message=r"This process .* is multi-threaded, use of fork",
                                        category=DeprecationWarning)
                process.start()
            child.close()
            self.conns.append(parent)
            self.processes.append(process)
        self._finalizer = weakref.finalize(self, _shutdown, self.processes, self.conns)
        self._gather(range(len(self.slices)))

    def _gather(self, workers: Sequence[int]) -> list:
        """The replies of ``workers``, raising the first failure once all have answered."""
        replies, failure = [], None
        for k in workers:
            conn, process = self.conns[k], self.processes[k]
            wait([conn, process.sentinel])
            try:
                status, value = conn.recv()
            except (EOFError, OSError):
                process.join(timeout=1)
                failure = failure or WorkerError(
                    f"PettingZoo worker {k} (envs {self.slices[k][0]}-{self.slices[k][1] - 1}) died with exit code "
                    f"{process.exitcode}; the env cannot step on: build a new one"
                )
                continue
            if status == "error":
                env_index, original = value
                failure = failure or WorkerError(f"the PettingZoo instance of env {env_index} raised in worker "
                                                 f"{k}:\n{original}")
            replies.append(value)
        if failure is not None:
            raise failure
        return replies

    def _call(self, per_worker: Sequence[tuple[str, tuple] | None]) -> list:
        """Send ``(command, args)`` to each worker (None: skip it) and wait for their replies."""
        busy = []
        for k, message in enumerate(per_worker):
            if message is not None:
                self.conns[k].send(message)
                busy.append(k)
        return self._gather(busy)

    # -- a Shard's interface, over the workers ------------------------------------------------------
    def reset(self, rows: Sequence[int], seeds: Sequence[int | None]) -> None:
        """``Shard.reset`` on every worker (each clears its rows, even with none to reset)."""
        self._call([("reset", ([i for i in rows if lo <= i < hi], [s for i, s in zip(rows, seeds) if lo <= i < hi]))
                    for lo, hi in self.slices])

    def step(self, actions: Sequence[Sequence]) -> None:
        """``Shard.step`` on every worker, each with its rows' actions."""
        self._call([("step", ([group[lo:hi] for group in actions],)) for lo, hi in self.slices])

    def render(self, row: int) -> Any:
        return self._call([("render", (row,)) if lo <= row < hi else None for lo, hi in self.slices])[0]

    def close(self) -> None:
        """Stop every worker (each closes its instances first); idempotent."""
        self._finalizer()
