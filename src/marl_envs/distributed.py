"""What one rank of a data-parallel run needs: who it is, its env seed, its device.

Data parallelism here means N processes ("ranks"), each with its own batch of envs and a copy of the policy,
averaging gradients after every backward pass. ``torchrun`` starts the processes and tells each who it is
through environment variables; this module reads them and derives the rest, so training code reads the same
with one process or many::

    info = rank_info()                         # RankInfo(rank=0, world_size=1, ...) outside torchrun
    device = rank_device(info)                 # cuda:LOCAL_RANK when CUDA is available, else cpu
    env = marl_envs.make(name, num_envs=per_rank, device=device)
    env.set_seed(rank_seed(seed, info.rank, info.world_size))
    init_process_group(device, info)           # gloo on CPU, nccl with one GPU per rank

Run without ``torchrun`` everything reduces to one process: rank 0 of 1, ``rank_seed(seed, 0, 1) == seed``
and no process group. Importing this module imports neither JAX nor a backend; :func:`jax_device` imports JAX
when called.

>>> info = rank_info({})                       # no torchrun variables: one process
>>> info.rank, info.world_size, info.is_main, info.launched
(0, 1, True, False)
>>> rank_seed(7, 0, 1)
7
>>> [rank_seed(7, r, 4) for r in range(4)]
[7, 536870919, 1073741831, 1610612743]
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["RankInfo", "init_process_group", "jax_device", "process_group_backend", "rank_device", "rank_info",
           "rank_seed"]

#: The variables ``torchrun`` sets for every process it starts (torch.distributed.elastic).
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
#: Seeds are spread over this range (2**31: every backend's generator keeps seeds of this size whole).
SEED_SPAN = 2**31


@dataclass(frozen=True)
class RankInfo:
    """Where one process stands in a run.

    Attributes:
        rank: this process among all of the run, ``0 .. world_size - 1``.
        world_size: processes in the run (all machines).
        local_rank: this process among those of its machine; picks its GPU.
        local_world_size: processes on this machine.
        launched: True when the values came from ``torchrun``'s environment, False for a plain process.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    launched: bool = False

    @property
    def is_main(self) -> bool:
        """True on rank 0, the one process that writes files and prints."""
        return self.rank == 0


def rank_info(environ: Mapping[str, str] | None = None) -> RankInfo:
    """This process's rank, read from the variables ``torchrun`` sets (``RANK``, ``WORLD_SIZE``, ...).

    Args:
        environ: where to read them; ``os.environ`` by default.

    Returns:
        The ranks and sizes; ``RankInfo()`` (rank 0 of 1, ``launched=False``) when none of the variables is set.

    Raises:
        ValueError: some of the variables are set but not all, one is not an integer, or they contradict each
            other (a rank outside ``0 .. size - 1``, more processes on a machine than in the run).

    >>> rank_info({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    RankInfo(rank=3, world_size=4, local_rank=1, local_world_size=2, launched=True)
    """
    environ = os.environ if environ is None else environ
    present = [name for name in TORCHRUN_VARS if name in environ]
    if not present:
        return RankInfo()
    missing = [name for name in TORCHRUN_VARS if name not in environ]
    if missing:
        raise ValueError(f"{', '.join(present)} set but not {', '.join(missing)}; launch with torchrun, which sets "
                         f"all of {', '.join(TORCHRUN_VARS)}, or unset them to run as one process")
    values = []
    for name in TORCHRUN_VARS:
        try:
            values.append(int(environ[name]))
        except ValueError:
            raise ValueError(f"{name}={environ[name]!r} is not an integer; torchrun sets it to one") from None
    rank, world, local_rank, local_world = values
    if not (0 <= rank < world and 0 <= local_rank < local_world <= world):
        raise ValueError(f"inconsistent torchrun variables RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local_rank}, "
                         f"LOCAL_WORLD_SIZE={local_world}; expected 0 <= RANK < WORLD_SIZE and "
                         f"0 <= LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE")
    return RankInfo(rank, world, local_rank, local_world, launched=True)


def rank_seed(seed: int, rank: int, world_size: int) -> int:
    """The env seed of ``rank`` in a run seeded ``seed``: ``seed + rank * (2**31 // world_size)``.

    Rank 0 keeps ``seed`` (so a one-process run is seeded exactly as without this function), and the ranks'
    seeds are spaced ``2**31 // world_size`` apart. A backend that seeds env ``i`` of a batch with ``seed + i``
    (PettingZoo) therefore gives no two envs of the run the same seed as long as ``num_envs`` per rank is at most
    that spacing (over a million envs per rank for 1,024 ranks); backends with one generator per batch (VMAS,
    Brax) get one distinct seed per rank. Seeds stay below ``2**32`` for ``seed < 2**31``, which every backend
    keeps whole.

    Args:
        seed: the run's seed, ``>= 0``.
        rank: ``0 .. world_size - 1``.
        world_size: processes in the run.

    Raises:
        TypeError: an argument is not an int.
        ValueError: a negative seed, ``world_size < 1`` or a rank out of range.

    >>> rank_seed(0, 1, 2)
    1073741824
    """
    for name, value in (("seed", seed), ("rank", rank), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank={rank}, world_size={world_size}; expected world_size >= 1 and 0 <= rank < world_size")
    return seed + rank * (SEED_SPAN // world_size)


def rank_device(info: RankInfo | None = None, *, cuda: bool | None = None) -> torch.device:
    """The device of this rank: ``cuda:LOCAL_RANK`` when CUDA is used, else ``cpu``.

    With fewer GPUs than processes on a machine, ranks share them round-robin (``cuda:LOCAL_RANK % GPUs``);
    :func:`process_group_backend` then picks gloo, since NCCL wants one GPU per rank.

    Args:
        info: this rank (``rank_info()`` by default).
        cuda: use CUDA; by default whenever ``torch.cuda.is_available()``. ``True`` without CUDA is an error.

    Raises:
        RuntimeError: ``cuda=True`` but torch sees no CUDA device.
    """
    info = rank_info() if info is None else info
    available = torch.cuda.is_available()
    if not (available if cuda is None else cuda):
        return torch.device("cpu")
    if not available:
        raise RuntimeError("cuda=True but torch sees no CUDA device; install a CUDA build of torch or pass cuda=False")
    return torch.device("cuda", info.local_rank % torch.cuda.device_count())


def process_group_backend(device: torch.device | str, info: RankInfo | None = None) -> str:
    """``"nccl"`` when every rank of this machine has a GPU of its own, else ``"gloo"`` (CPU, or shared GPUs)."""
    info = rank_info() if info is None else info
    own_gpus = torch.device(device).type == "cuda" and info.local_world_size <= torch.cuda.device_count()
    return "nccl" if own_gpus else "gloo"


def init_process_group(device: torch.device | str, info: RankInfo | None = None) -> str | None:
    """Join the run's process group (``torch.distributed``) when launched by ``torchrun``, once.

    Rendezvous goes through the ``MASTER_ADDR`` / ``MASTER_PORT`` torchrun sets; the backend is
    :func:`process_group_backend`. On CUDA the rank's GPU becomes the current device first.

    Returns:
        The backend (``"gloo"`` or ``"nccl"``), or ``None`` for a process not launched by torchrun (nothing to
        join; the caller runs alone).
    """
    info = rank_info() if info is None else info
    if not info.launched:
        return None
    device = torch.device(device)
    backend = process_group_backend(device, info)
    if not torch.distributed.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        torch.distributed.init_process_group(backend, rank=info.rank, world_size=info.world_size)
    return torch.distributed.get_backend()


def jax_device(device: torch.device | str) -> Any:
    """The JAX device that holds what torch calls ``device``: ``cpu``, or ``cuda:k`` -> the JAX GPU with CUDA id k.

    Both libraries number GPUs by CUDA ordinal (after ``CUDA_VISIBLE_DEVICES``), so torch's ``cuda:k`` is the
    local JAX GPU whose ``local_hardware_id`` is ``k``; this finds it and says so when JAX does not see it.
    Imports JAX. The Brax backend places its state with this.

    Raises:
        ValueError: a device type other than cpu and cuda, or a CUDA device JAX does not see (a CPU-only jaxlib,
            or ``CUDA_VISIBLE_DEVICES`` / ``jax_cuda_visible_devices`` hiding it); the message lists what JAX sees.
    """
    import jax

    device = torch.device(device)
    if device.type == "cpu":
        return jax.local_devices(backend="cpu")[0]
    if device.type != "cuda":
        raise ValueError(f"device={str(device)!r} is not supported by the JAX backends; use 'cpu' or 'cuda[:k]'")
    try:
        gpus = jax.local_devices(backend="cuda")
    except RuntimeError:  # a CPU-only jaxlib has no cuda backend
        gpus = []
    index = 0 if device.index is None else device.index
    for gpu in gpus:
        if gpu.local_hardware_id == index:
            return gpu
    seen = ", ".join(f"cuda:{gpu.local_hardware_id}" for gpu in gpus) or "none"
    raise ValueError(f"device={str(device)!r} but JAX sees {len(gpus)} CUDA device(s); install JAX with CUDA support "
                     f"(pip install 'jax[cuda12]'), make that GPU visible to JAX (it sees: {seen}; "
                     f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}) or use device='cpu'")
