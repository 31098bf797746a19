"""torch <-> JAX: the array hand-off of every JAX family."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import torch

__all__ = ["Transfer"]

# torch warns once per process about a read-only NumPy array; that warning would be about the hand-off of JAX's
# outputs (see ``Transfer``), not about the user's code, so it is given here, where it is not shown.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.from_numpy(np.lib.stride_tricks.as_strided(np.zeros(1), writeable=False))


class Transfer:
    """NumPy views both ways on the CPU (cheaper there than DLPack); zero-copy DLPack both ways on a GPU.

    JAX's buffers are immutable, so NumPy marks its view of one read-only; an output buffer of a compiled call is
    never passed back into one (only the carried state is donated), so the tensor made of it is its only reader and
    writer.

    Args:
        device: the torch device.
        dlpack: DLPack on the CPU too (the device code path, ``MARL_ENVS_DEVICE_PATH=1``); default: on a GPU only.
    """

    def __init__(self, device: torch.device, *, dlpack: bool | None = None):
        self.device = device
        self.cpu = device.type == "cpu" if dlpack is None else not dlpack

    def to_jax(self, tensor: torch.Tensor):
        tensor = tensor.detach()
        if self.cpu:
            return tensor.numpy()
        return jax.dlpack.from_dlpack(tensor.contiguous())

    def to_torch(self, array) -> torch.Tensor:
        if self.cpu:
            return torch.from_numpy(np.asarray(array))
        return torch.from_dlpack(array)
