"""PettingZoo instances in worker processes: each worker runs a :class:`Shard` over its rows of the batch, reading
the actions from and writing the results into buffers in shared memory.

Workers are forked (Linux): they inherit the factory and the buffers. A step writes the actions into the
buffers, sends each worker the same few pickled-once bytes through its pipe and wakes it through an eventfd
(a pipe's wake-up is a "sync" one, which queues the woken worker on the parent's busy core: with two
workers, the second started up to milliseconds late); each worker answers with a small reply through its pipe.
A worker that has answered polls for its next command for ``SPIN_S`` before it sleeps. A worker runs only
PettingZoo and NumPy code, never JAX or torch, so forking a process where JAX's (or torch's) threads run is safe
here: the warnings of JAX and of Python >= 3.12 about forking a multi-threaded process are silenced for our fork
only. A worker whose instance raises replies with the env index and the original traceback and stays usable.

A worker that dies (an exit, a signal such as SIGKILL from the OOM killer, a crash in a C library) or does not
answer within ``timeout`` seconds (the env's ``worker_timeout``; None waits forever; a worker that does not answer
is killed) raises one :class:`WorkerError` naming the env, the worker, the cause and the last lines of its stderr,
which goes to a temporary file (with ``faulthandler``'s Python traceback of a crash), read only then. The wait for
replies watches each worker's pipe and its process's sentinel together, so a death is seen at once, with no polling.
The pool raises that error at every call until ``restart()`` (the env's ``reset()``) forks new workers in place of
the failed ones. ``close()`` (also run when the env is garbage collected or the interpreter exits) stops every
worker, killing those not stopped within ``CLOSE_S`` seconds (or the timeout, if shorter), whatever their state.
"""

from __future__ import annotations

import faulthandler
import math
import mmap
import multiprocessing as mp
import os
import select
import signal
import sys
import tempfile
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from typing import IO, Any

import numpy as np
import torch
from tensordict import TensorDictBase

from .._quiet import Filter, ignored_warnings
from ._shard import BatchFacts, Buffers, Shard

__all__ = ["DEFAULT_TIMEOUT_S", "InstanceError", "PooledEnv", "WorkerError", "WorkerPool", "shared_zeros"]

#: how long a worker that has replied polls for its next command (yielding its core to any other runnable
#: thread) before it sleeps: waking a sleeping worker costs a good part of a short step, and its idle core
#: goes to other processes meanwhile
SPIN_S = 0.002
#: how long a call waits for a worker's reply unless the env says otherwise (``worker_timeout``): far above any
#: step or reset of the families here, so that only a hung worker reaches it
DEFAULT_TIMEOUT_S = 60.0
#: how long ``close()`` lets the workers close their instances before it kills them
CLOSE_S = 5.0
#: how much of a failed worker's stderr its error quotes: its last lines, read from the file's last bytes
STDERR_LINES, STDERR_BYTES = 10, 65536

# the warnings about forking a multi-threaded process (JAX's, Python >= 3.12's): see the module docstring
_FORK_WARNINGS: tuple[Filter, ...] = (
    (r"os\.fork\(\) was called", RuntimeWarning),
    (r"This process .* is multi-threaded, use of fork", DeprecationWarning),
)
_PICKLED = {command: bytes(ForkingPickler.dumps((command, ()))) for command in ("step", "step_reset")}


class InstanceError(RuntimeError):
    """A PettingZoo instance raised in a step or a reset (in this process or in a worker: the message names the env
    and holds the library's message), or a worker died or hung (:class:`WorkerError`)."""


class WorkerError(InstanceError):
    """A worker process died or did not answer in time: the message names the env, the worker (its index, rows and
    pid), the cause and the last lines of its stderr. ``env.reset()`` builds the worker anew."""


def shared_zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zeroed array in anonymous shared memory (``MAP_SHARED``), visible to processes forked after it."""
    dtype = np.dtype(dtype)
    size = max(1, int(np.prod(shape)) * dtype.itemsize)
    return np.frombuffer(mmap.mmap(-1, size), dtype=dtype, count=int(np.prod(shape))).reshape(shape)


def _serve(conn: Connection, go: int, alive: int, parents_end: int, stderr: int, make: Callable[[], Any], lo: int,
           hi: int, facts: BatchFacts, buffers: Buffers, shard_class: type[Shard]) -> None:
    """A worker's loop: build the instances of rows ``[lo, hi)``, then run the commands that come in."""
    os.close(parents_end)  # ``alive`` reads EOF once the parent, the last holder of this end, is gone
    # the file whose tail the parent quotes if this worker fails, for C code (fd 2) and Python (sys.stderr, which
    # need not be fd 2: a notebook's, pytest's); a crash in C code leaves its Python traceback there too
    os.dup2(stderr, 2)
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)
    faulthandler.enable(sys.stderr)
    try:
        shard = shard_class([make() for _ in range(hi - lo)], lo, facts, buffers)
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


def _shutdown(processes: list, conns: list, gos: list, logs: list, fds: tuple[int, ...], grace: float) -> None:
    """Ask every worker to close its instances, kill those not gone within ``grace`` seconds, free the ends."""
    for process, conn, go in zip(processes, conns, gos):
        if process is not None and conn is not None and process.exitcode is None:
            try:
                conn.send(("close", ()))
                os.eventfd_write(go, 1)
            except OSError:  # it died meanwhile
                pass
    deadline = time.monotonic() + grace
    for process in processes:
        if process is None:
            continue
        process.join(max(0.0, deadline - time.monotonic()))
        if process.exitcode is None:  # hung, or stopped (SIGSTOP): SIGKILL ends it either way
            process.kill()
            process.join(1)
    for end in (*conns, *logs):
        if end is not None:
            end.close()
    for fd in (*(go for go in gos if go is not None), *fds):
        os.close(fd)


def _tail(log: IO[bytes]) -> list[str]:
    """The last lines written to a worker's stderr file (long ones cut)."""
    size = os.fstat(log.fileno()).st_size
    data = os.pread(log.fileno(), STDERR_BYTES, max(0, size - STDERR_BYTES))
    # (a crash's report ends with Python's list of every loaded extension module: thousands of characters of noise)
    lines = [line.rstrip() for line in data.decode(errors="replace").splitlines()
             if not line.startswith("Extension modules:")]
    while lines and not lines[-1]:
        lines.pop()
    return [line if len(line) <= 200 else line[:200] + " ..." for line in lines[-STDERR_LINES:]]


def _cause(exitcode: int | None) -> str:
    """What ended a process, from its exit code (negative: the signal that killed it)."""
    if exitcode is None:
        return "died"
    if exitcode >= 0:
        return f"died with exit code {exitcode}"
    try:
        return f"was killed by {signal.Signals(-exitcode).name}"
    except ValueError:
        return f"was killed by signal {-exitcode}"


class WorkerPool:
    """``num_workers`` processes, each with the instances of a contiguous slice of the batch.

    Args:
        make: builds one instance (each worker calls it for each of its rows).
        num_envs: the rows of the batch.
        num_workers: the processes.
        facts: what the shards know of the batch.
        buffers: the buffers in shared memory the workers read and write.
        shard_class: what each worker steps its instances with.
        name: the env's name in errors (``"pettingzoo/mpe/simple_spread_v3"``).
        library: what the instances are, in errors (``"PettingZoo"``; Melting Pot's substrates run here too).
        timeout: the seconds a call waits for a worker's reply before the worker counts as hung; None: forever.

    Raises:
        ValueError: no ``fork`` start method on this platform (the env checks ``num_workers``).
        InstanceError: a worker could not build its instances.
        WorkerError: a worker died, or did not answer within ``timeout`` (then it is killed).
    """

    def __init__(self, make: Callable[[], Any], num_envs: int, num_workers: int, facts: BatchFacts, buffers: Buffers,
                 shard_class: type[Shard] = Shard, *, name: str = "PettingZoo envs",
                 timeout: float | None = DEFAULT_TIMEOUT_S, library: str = "PettingZoo"):
        if "fork" not in mp.get_all_start_methods():
            raise ValueError("num_workers > 0 needs the 'fork' start method (Linux); use num_workers=0 here")
        bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int)
        self.slices = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]
        self.name, self.timeout, self.library = name, timeout, library
        self._context = mp.get_context("fork")
        self._build = (make, facts, buffers, shard_class)
        n = len(self.slices)
        # per worker: its pipe, process, eventfd (its wake-up call) and stderr file; replaced in place by restart()
        self.conns, self.processes, self.gos, self.logs = ([None] * n for _ in range(4))
        self.failure: str | None = None  #: the message of the last worker failure, until ``restart()``
        self._failed: list[int] = []
        self._built = False  # a failure while the env is built is the constructor's error: no reset to suggest
        # never written: closing our write end tells the workers we are gone; the read end is kept for restarts
        self._alive_r, self._alive = os.pipe()
        grace = CLOSE_S if timeout is None else min(CLOSE_S, timeout)
        self._finalizer = weakref.finalize(self, _shutdown, self.processes, self.conns, self.gos, self.logs,
                                           (self._alive_r, self._alive), grace)
        for k in range(n):
            self._start(k)
        self._gather(range(n))
        self._built = True

    @property
    def pids(self) -> list[int]:
        """The workers' process ids, in worker order."""
        return [process.pid for process in self.processes]

    def _start(self, k: int) -> None:
        """Fork worker ``k``: it builds the instances of its rows and answers once they are built."""
        make, facts, buffers, shard_class = self._build
        lo, hi = self.slices[k]
        parent, child = self._context.Pipe()
        go = os.eventfd(0, os.EFD_NONBLOCK)
        log = tempfile.TemporaryFile()  # unlinked: gone with its last descriptor
        args = (child, go, self._alive_r, self._alive, log.fileno(), make, lo, hi, facts, buffers, shard_class)
        process = self._context.Process(target=_serve, args=args, daemon=True, name=f"marl_envs-pettingzoo-{lo}-{hi}")
        self.conns[k], self.gos[k], self.logs[k] = parent, go, log
        with ignored_warnings(*_FORK_WARNINGS):
            process.start()
        child.close()
        self.processes[k] = process

    def restart(self) -> None:
        """Fork new workers in place of those that failed (each builds its rows' instances anew) and wait until they
        are ready; the others are left as they are.

        Raises:
            InstanceError: a new worker could not build its instances (or died: a ``WorkerError``); the pool stays
                failed, and a later ``restart()`` tries again.
        """
        failed = self._failed
        for k in failed:
            process = self.processes[k]
            if process.exitcode is None:
                process.kill()
            process.join(CLOSE_S)
            self.conns[k].close()
            self.logs[k].close()
            os.close(self.gos[k])
            self.conns[k] = self.gos[k] = self.logs[k] = None  # closed: none of them is closed again
            self._start(k)
        self._failed, self.failure = [], None
        try:
            self._gather(failed)
        except InstanceError as err:
            self._failed, self.failure = failed, str(err)
            raise

    def _gather(self, workers: Sequence[int]) -> list:
        """The replies of ``workers`` (in that order), raising the first worker's failure once all have answered or
        the timeout has passed: a worker that died or did not answer first (a ``WorkerError``), else an instance's
        error."""
        replies, errors, failed, pending = {}, {}, {}, list(workers)
        timeout, start = self.timeout, time.monotonic()
        while pending:
            left = None if timeout is None else max(0.0, start + timeout - time.monotonic())
            ready = wait([x for k in pending for x in (self.conns[k], self.processes[k].sentinel)], left)
            if not ready:
                failed.update((k, self._hung(k)) for k in pending)
                break
            done = [k for k in pending if self.conns[k] in ready or self.processes[k].sentinel in ready]
            for k in done:
                pending.remove(k)
                conn = self.conns[k]
                try:
                    if conn not in ready and not conn.poll():  # only its sentinel: it exited without a reply
                        raise EOFError
                    status, value = conn.recv()
                except (EOFError, OSError):
                    failed[k] = self._died(k)
                    continue
                if status == "error":
                    env_index, original = value
                    errors[k] = f"the {self.library} instance of env {env_index} raised in worker {k}:\n{original}"
                replies[k] = value
        if failed:
            first, *others = sorted(failed)
            also = f"\n(workers {others} failed too; the reset rebuilds them all)" if others else ""
            self._failed, self.failure = sorted(failed), failed[first] + also
            raise WorkerError(self.failure)
        if errors:
            raise InstanceError(errors[min(errors)])
        return [replies[k] for k in workers]

    def _worker(self, k: int) -> str:
        lo, hi = self.slices[k]
        rows = f"env {lo}" if hi - lo == 1 else f"envs {lo}-{hi - 1}"
        return f"{self.name}: {self.library} worker {k} ({rows})"

    def _died(self, k: int) -> str:
        process = self.processes[k]
        process.join(1)  # its sentinel is ready, or its pipe closed: it has exited, or is about to
        return f"{self._worker(k)} {_cause(process.exitcode)} (pid {process.pid}){self._remedy()}{self._stderr(k)}"

    def _hung(self, k: int) -> str:
        process = self.processes[k]
        process.kill()  # a worker that wakes up later would write into the buffers under the new one
        process.join(1)
        return (f"{self._worker(k)} did not answer within {self.timeout:g} s and was killed (pid {process.pid})"
                f"{self._remedy()}; if its steps can take that long, build the env with a larger worker_timeout (None "
                f"waits forever){self._stderr(k)}")

    def _remedy(self) -> str:
        return "; env.reset() builds its instances anew and restarts every env from the env's seed" if self._built \
            else ""

    def _stderr(self, k: int) -> str:
        lines = _tail(self.logs[k])
        return "; the last lines of its stderr:\n" + "\n".join(f"    {line}" for line in lines) if lines else ""

    def _call(self, per_worker: Sequence[tuple[str, tuple] | bytes | None]) -> list:
        """Send ``(command, args)`` (or it pickled) to each worker (None: skip it), wake them, wait for their
        replies."""
        if self.failure is not None:
            raise WorkerError(self.failure)
        busy = [k for k, message in enumerate(per_worker) if message is not None]
        for k in busy:  # all messages first: a worker woken early would delay the next send
            message = per_worker[k]
            try:
                self.conns[k].send_bytes(message if isinstance(message, bytes) else ForkingPickler.dumps(message))
            except OSError:  # a dead worker's pipe (BrokenPipeError): its sentinel tells _gather why
                continue
        for k in busy:
            os.eventfd_write(self.gos[k], 1)
        return self._gather(busy)

    # -- a Shard's interface, over the workers ------------------------------------------------------
    def reset(self, rows: Sequence[int], seeds: Sequence[int | None]) -> None:
        """``Shard.reset`` on every worker (each clears its rows, even with none to reset)."""
        self._call(self._by_rows("reset", rows, seeds))

    def restore(self, rows: Sequence[int], states: Sequence[Any]) -> None:
        """``restore`` on every worker, as ``reset`` (OpenSpiel's shard: games set to serialized states)."""
        self._call(self._by_rows("restore", rows, states))

    def states(self) -> list:
        """Every row's ``states()`` in batch order (OpenSpiel's shard: the games, serialized)."""
        return [state for part in self._call([("states", ())] * len(self.slices)) for state in part]

    def _by_rows(self, command: str, rows: Sequence[int], values: Sequence) -> list:
        """Each worker's message: ``command`` with its rows of ``rows`` and their ``values``."""
        return [(command, ([i for i in rows if lo <= i < hi], [v for i, v in zip(rows, values) if lo <= i < hi]))
                for lo, hi in self.slices]

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


class PooledEnv:
    """The env's side of a batch of instances run by a ``Shard`` (``num_workers=0``) or a :class:`WorkerPool`:
    seeds, resets, the fused step and reset, restarts after a worker failure, and errors that name the env. Mixed
    in before ``EnvBase`` by the families run here (PettingZoo's, Melting Pot); the env provides ``_runner``,
    ``_buffers``, ``_seed``/``_seeds`` (None until seeded), ``_load_actions`` (the actions into the wire buffers;
    it returns what only a shard can decode, or None) and ``_to_tensordict``."""

    #: what the instances are, in errors (the pool's ``library``)
    _library: str = "PettingZoo"
    _fused_reset = True  # step_and_maybe_reset steps and resets the instances in one pass (one call per worker)

    @staticmethod
    def _check_workers(num_workers: Any, num_envs: int, worker_timeout: Any) -> None:
        """Refuse a ``num_workers`` or ``worker_timeout`` keyword the pool cannot take."""
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or not 0 <= num_workers <= num_envs:
            raise ValueError(f"num_workers must be an int in [0, num_envs={num_envs}], got {num_workers!r}")
        if worker_timeout is not None and (isinstance(worker_timeout, bool) or not isinstance(worker_timeout, (
                int, float)) or not 0 < worker_timeout < math.inf):
            raise ValueError(f"worker_timeout must be a positive number of seconds, or None to wait for the workers "
                             f"forever; got {worker_timeout!r}")

    def _row_seed(self, seed: int, row: int) -> int:
        """The seed of row ``row``'s next reset in an env seeded with ``seed``."""
        return seed + row

    def _set_seed(self, seed: int) -> None:
        self._seed = seed
        self._seeds = [self._row_seed(seed, i) for i in range(self.num_envs)]

    def _reset(self, mask: torch.Tensor | None) -> TensorDictBase:
        if isinstance(self._runner, WorkerPool) and self._runner.failure is not None:
            self._restart_workers(mask)
        self._start(list(range(self.num_envs)) if mask is None else mask.nonzero().flatten().tolist())
        return self._to_tensordict(self._buffers.reset)

    def _start(self, rows: list[int]) -> None:
        """New episodes in rows ``rows``, each from its row's pending seed (which it uses up)."""
        seeds = [self._seeds[i] for i in rows]
        for i in rows:
            self._seeds[i] = None
        self._call("reset", rows, seeds)

    def _restart_workers(self, mask: torch.Tensor | None) -> None:
        """New workers in place of those that failed, and every row's next seed back to the env's own: the other
        workers' instances may have stepped past the data the caller holds (a failed call runs on the others), so
        the whole batch restarts, as a fresh env built with the env's seed would."""
        if mask is not None and not bool(mask.all()):
            raise ValueError(f"after a worker failure every env is reset, to start again from the env's seed: call "
                             f"env.reset() without a '_reset' entry; the failure was: {self._runner.failure}")
        self._runner.restart()
        self._seeds = [None if self._seed is None else self._row_seed(self._seed, i) for i in range(self.num_envs)]

    def _call(self, command: str, *args: Any) -> Any:
        """``runner.<command>(*args)``; a library error of an instance in this process re-raised once, as the
        workers' are: an ``InstanceError`` naming the env."""
        try:
            return getattr(self._runner, command)(*args)
        except Exception as err:
            if isinstance(err, InstanceError) or isinstance(self._runner, WorkerPool):
                raise
            raise InstanceError(f"the {self._library} instance of env {self._runner.current} raised in {command}: "
                                f"{type(err).__name__}: {err}") from err

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._call("step", self._load_actions(tensordict))
        return self._to_tensordict(self._buffers.step, with_reward=True)

    def _step_reset(self, tensordict: TensorDictBase, ends: torch.Tensor | None
                    ) -> tuple[TensorDictBase, TensorDictBase | None, torch.Tensor]:
        b = self._buffers
        decoded = self._load_actions(tensordict)
        b.ends[:] = False if ends is None else ends.cpu().numpy()
        seeded = any(seed is not None for seed in self._seeds)  # a seed waits for some row's next reset
        self._call("step_reset", decoded, self._seeds if seeded else None)
        ended = b.reset_rows.copy()  # host memory: the instances run on the CPU
        reset_any = bool(ended.any())
        if seeded and reset_any:
            for i in np.flatnonzero(ended).tolist():
                self._seeds[i] = None
        fresh = self._to_tensordict(b.reset) if reset_any else None  # read only where a row was reset
        return self._to_tensordict(b.step, with_reward=True), fresh, torch.from_numpy(ended).to(self.device)

    @property
    def worker_pids(self) -> list[int]:
        """The worker processes' ids, worker ``k`` running a contiguous slice of the batch (``[]`` with
        ``num_workers=0``); a reset after a worker failure replaces the failed workers' ids."""
        return self._runner.pids if isinstance(self._runner, WorkerPool) else []

    def close(self) -> None:
        """Close the instances (and stop the worker processes)."""
        self._runner.close()
