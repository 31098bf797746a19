"""``marl-envs doctor``: what is installed, which devices torch and JAX see, and whether each backend runs there.

For each installed backend and each device torch can use, the env its record names (``Backend.check_env``) is built,
reset and stepped; the JAX -> torch hand-off of the JAX families is checked on each device (zero-copy: by DLPack on
a GPU, a NumPy view on the CPU; ``backends.jax.Transfer``); JAX's GPU memory settings are shown with what they mean
beside torch. A check that fails is a ``FAIL`` row carrying the error, and the command then exits with status 1:
something installed is broken. On a machine with a GPU this one command runs every CUDA path of the library, and the
host-wait check (``host_wait``) of each JAX family and VMAS: whether a step makes the host wait for the GPU, with
the step's time beside the raw library loop's.

>>> from marl_envs.doctor import run
>>> report = run(backends=["vmas"])
>>> report.ok
True
"""

from __future__ import annotations

import os
import platform
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import registry
from ._version import __version__, installed_version
from ._core.messages import unknown_name

__all__ = ["ENVS", "HOST_WAIT_BATCH", "HOST_WAIT_ENVS", "PACKAGES", "Report", "Row", "format_report", "host_wait",
           "run"]

#: The number of envs of the host-wait check (``host_wait``): each backend's record says whether it has one.
HOST_WAIT_BATCH = 4096
#: The distributions whose versions are shown besides each backend's (its record's ``distributions``): the core's
#: first, then JAX's compiled half, TorchRL's and BenchMARL's.
CORE_PACKAGES = ("torch", "tensordict", "numpy")
INTEROP_PACKAGES = ("jaxlib", "torchrl", "benchmarl")
PASS, FAIL, NOTE = "ok", "FAIL", "-"
STEPS = 3


def __getattr__(name: str) -> Any:
    """``ENVS``, each backend's env the doctor builds and steps (``{backend: (name, kwargs)}``), ``HOST_WAIT_ENVS``,
    the backends whose step the host-wait check times on a GPU, and ``PACKAGES``, the distributions whose versions
    are shown: read from the backends' records (``Backend.check_env``, ``host_wait``, ``distributions``) when asked
    for, so a backend registered later is in them."""
    records = registry.backends()
    if name == "ENVS":
        return {backend: r.check_env for backend, r in records.items() if r.check_env is not None}
    if name == "HOST_WAIT_ENVS":
        return tuple(backend for backend, r in records.items() if r.host_wait)
    if name == "PACKAGES":
        return _packages()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _packages() -> tuple[str, ...]:
    """``PACKAGES``: the core's distributions, each backend's (its record's), then ``INTEROP_PACKAGES``."""
    records = registry.backends().values()
    return tuple(dict.fromkeys([*CORE_PACKAGES, *(d for r in records for d in r.distributions),
                                *INTEROP_PACKAGES]))


@dataclass
class Row:
    """One check: what was checked, where, its status (``ok``, ``FAIL`` or ``-`` for a fact) and the detail."""

    check: str
    where: str
    status: str
    detail: str


@dataclass
class Report:
    """What ``run`` found: versions, devices, and a row per check."""

    versions: dict[str, str] = field(default_factory=dict)
    devices: dict[str, list[str]] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed."""
        return all(row.status != FAIL for row in self.rows)


def _error(err: BaseException) -> str:
    """The error's type and first line, and where in the library's or the backend's code it was raised."""
    frame = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    where = f" ({os.path.basename(frame.filename)}:{frame.lineno})" if frame else ""
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {first}{where}"


def _check(rows: list[Row], check: str, where: str, body: Callable[[], str]) -> None:
    """Run ``body``; a row with its detail, or the error it raised (any error: a broken install can raise
    anything, at import or later)."""
    start = time.perf_counter()
    try:
        detail = body()
    except Exception as err:  # noqa: BLE001 - every failure is a row, not a crash of the doctor
        rows.append(Row(check, where, FAIL, _error(err)))
    else:
        rows.append(Row(check, where, PASS, f"{detail} ({time.perf_counter() - start:.1f} s)"))


def _step_env(name: str, kwargs: dict[str, Any], device: str) -> str:
    """Build ``name`` on ``device``, reset and step it ``STEPS`` times with random actions; what it gave."""
    import torch

    env = registry.make(name, num_envs=2, device=device, **kwargs)
    try:
        td = env.reset()
        for _ in range(STEPS):
            data, td = env.step_and_maybe_reset(env.rand_action(td))
        rewards = [data["next"].get(key) for key in env.reward_keys]
        wrong = [str(r.device) for r in rewards if r.device != torch.device(device)]
        if wrong:
            raise RuntimeError(f"rewards on {wrong[0]}, the env was built on {device}")
        if not all(torch.isfinite(r).all() for r in rewards):
            raise RuntimeError("a reward is not finite")
        return f"{name}: reset + {STEPS} steps, {len(env.agent_names) or 1} agent(s)"
    finally:
        env.close()


def _hand_off(device: str) -> str:
    """JAX -> torch through the JAX families' ``Transfer``: same values, and whether the memory is shared."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from .backends.jax import Transfer
    from .distributed import jax_device

    array = jax.device_put(jnp.arange(12, dtype=jnp.float32).reshape(3, 4), jax_device(device))
    tensor = Transfer(torch.device(device)).to_torch(array)
    if not np.array_equal(tensor.cpu().numpy(), np.asarray(array)) or tensor.device != torch.device(device):
        raise RuntimeError(f"the tensor differs from the JAX array (on {tensor.device})")
    if tensor.data_ptr() != array.unsafe_buffer_pointer():
        raise RuntimeError(f"{'NumPy' if device == 'cpu' else 'DLPack'} gave a copy: the step's output is copied "
                           f"every step")
    return "zero-copy (a NumPy view of JAX's buffer)" if device == "cpu" else \
        "zero-copy (DLPack: the tensor reads JAX's buffer)"


def host_wait(name: str, kwargs: dict[str, Any], device: str, *, num_envs: int = HOST_WAIT_BATCH,
              steps: int = 20) -> tuple[bool, str]:
    """Whether ``step_and_maybe_reset`` of ``name`` makes the host wait for the GPU ``device``, and the detail.

    A GPU kernel of about 100 ms is queued first, then ``steps`` steps: a step that never waits returns long
    before the kernel ends (this sees every wait, torch's, JAX's and DLPack's alike). The detail gives the step's
    time beside the raw library loop's (``marl_envs.bench``, both in this process).

    Raises:
        ValueError: ``device`` is not a CUDA device.
    """
    import torch

    from . import bench

    if torch.device(device).type != "cuda":
        raise ValueError(f"the host-wait check needs a CUDA device (a kernel that keeps the GPU busy), got {device!r}")
    env = registry.make(name, num_envs=num_envs, device=device, **kwargs)
    try:
        plan = [env.rand_action(env.reset()).select(*env.action_keys) for _ in range(4)]
        td = env.reset()

        def run_steps(n: int, td):
            for t in range(n):
                td.update(plan[t % len(plan)])
                td = env.step_and_maybe_reset(td)[1]
            return td

        td = run_steps(30, td)  # compiled and warm
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        torch.cuda._sleep(10_000_000)  # the GPU's cycles per second, to size a ~100 ms kernel
        torch.cuda.synchronize(device)
        cycles = int(10_000_000 * 0.1 / max(time.perf_counter() - start, 1e-6))
        torch.cuda._sleep(cycles)
        start = time.perf_counter()
        td = run_steps(steps, td)
        host = time.perf_counter() - start
        torch.cuda.synchronize(device)
        total = time.perf_counter() - start
    finally:
        env.close()
    waited = host > 0.5 * total
    rows = bench.run(name, num_envs=num_envs, steps=100, rounds=3, device=device, **kwargs)
    ours, raw = rows[0], next((r for r in rows[1:] if r[2]), None)
    timing = f"step {ours[1] / ours[2] * num_envs * 1e3:.3f} ms"
    if raw is not None:
        timing += f", {raw[0]}: {raw[1] / raw[2] * num_envs * 1e3:.3f} ms ({ours[1] / raw[1]:.2f}x)"
    verdict = "the host waited for the GPU" if waited else "no host wait"
    return waited, (f"{name} x{num_envs}: {verdict} ({steps} steps returned after {host * 1e3:.1f} ms of a "
                    f"{total * 1e3:.0f} ms kernel); {timing}")


def _host_wait_row(rows: list[Row], backend: str, device: str) -> None:
    record = registry.backend_record(backend)
    start = time.perf_counter()
    try:
        waited, detail = host_wait(*record.check_env, device)
    except Exception as err:  # noqa: BLE001 - a row, as every check
        rows.append(Row("host-wait", device, FAIL, _error(err)))
        return
    detail += f" ({time.perf_counter() - start:.1f} s)"
    if waited and isinstance(record.host_wait, str):  # a wait by design: a note, with its reason
        rows.append(Row("host-wait", device, NOTE, f"{detail}: {record.host_wait}"))
    else:
        rows.append(Row("host-wait", device, FAIL if waited else PASS, detail))


def _jax_memory(rows: list[Row], torch_gpu: bool) -> str:
    """A row per JAX GPU memory setting, what it means beside torch, and whether marl-envs set it; what is in
    force."""
    from .backends.jax import JAX_GPU_MEMORY_VARS, PREALLOCATE_VAR, share_gpu_memory

    set_here = share_gpu_memory()  # as a JAX-family env would, before JAX starts
    for var, meaning in JAX_GPU_MEMORY_VARS.items():
        value = os.environ.get(var)
        by = " (set by marl-envs: torch sees a GPU)" if set_here and var == "XLA_PYTHON_CLIENT_PREALLOCATE" else ""
        rows.append(Row("jax-memory", var, NOTE, f"{value if value is not None else 'unset'}{by}: {meaning}"))
    if not torch_gpu:
        return "torch sees no CUDA GPU: JAX's defaults stand (they matter only on a GPU)"
    if os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() in ("false", "0"):
        return "JAX allocates as it needs beside torch"
    return (f"JAX takes 75% of the GPU when it starts, torch gets the rest ({PREALLOCATE_VAR}=1 or a variable "
            f"above set by the user)")


def run(backends: Sequence[str] | None = None, devices: Sequence[str] | None = None) -> Report:
    """Check the installed backends (or ``backends``) on every device torch can use (or ``devices``).

    Raises:
        ValueError: an unknown backend or device (the message lists them).
    """
    import torch

    from ._core.validate import available_devices, check_device

    report = Report(versions={"python": platform.python_version(), "marl-envs": __version__,
                              **{package: installed_version(package) or "not installed" for package in _packages()}})
    torch_devices = available_devices()
    report.devices["torch"] = torch_devices
    # "cuda" is checked as the GPU it means (cuda:<current>), the device its tensors report
    chosen = [str(check_device(d)) for d in devices] if devices is not None else torch_devices
    wanted = list(backends) if backends is not None else registry.available_backends()
    known = [b for b in registry.available_backends() if registry.backend_record(b).check_env is not None]
    for backend in wanted:
        if backend not in known:
            raise unknown_name("backend", backend, known)
    installed = [b for b in wanted if registry.backend_installed(b)]
    report.rows += [Row(b, "-", NOTE, f"not installed (pip install 'marl-envs[{registry.backend_record(b).extra}]')")
                    for b in wanted if b not in installed]
    jax_families = [b for b in installed if "jax" in registry.backend_record(b).packages]
    if jax_families:
        _check(report.rows, "jax-memory", "in-force", lambda: _jax_memory(report.rows, torch.cuda.is_available()))
        _check(report.rows, "jax-devices", "all", lambda: _jax_devices(report))
    for backend in installed:
        name, kwargs = registry.backend_record(backend).check_env
        for device in chosen:
            _check(report.rows, backend, device, lambda: _step_env(name, kwargs, device))
    if jax_families:
        for device in chosen:
            _check(report.rows, "jax->torch", device, lambda: _hand_off(device))
    for device in (d for d in chosen if d.startswith("cuda")):
        for backend in (b for b in installed if registry.backend_record(b).host_wait):
            _host_wait_row(report.rows, backend, device)
    return report


def _jax_devices(report: Report) -> str:
    import jax

    from .backends.jax import configure_jax

    configure_jax()  # JAX starts as under an env: the same settings
    seen = [f"{d.platform}:{d.id}" for d in jax.devices()]
    if jax.default_backend() != "cpu":
        seen += [f"cpu:{d.id}" for d in jax.devices("cpu")]
    report.devices["jax"] = seen
    return ", ".join(seen)


def format_report(report: Report) -> str:
    """The report as text: versions, devices, then a table of the checks and a verdict."""
    from .cli.format import table

    width = max(map(len, report.versions))
    lines = ["versions:"] + [f"  {name.ljust(width)}  {version}" for name, version in report.versions.items()]
    lines += ["devices:"] + [f"  {who.ljust(width)}  {', '.join(found)}" for who, found in report.devices.items()]
    lines += ["", table(["check", "where", "status", "detail"],
                        [(r.check, r.where, r.status, r.detail) for r in report.rows]), ""]
    failed = [r for r in report.rows if r.status == FAIL]
    lines.append("all checks passed" if not failed else
                 f"{len(failed)} check(s) failed: {', '.join(sorted({f'{r.check} on {r.where}' for r in failed}))}")
    return "\n".join(lines)
