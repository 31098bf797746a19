"""torch <-> JAX: the array hand-off of every JAX family."""

from __future__ import annotations

import jax
import numpy as np
import torch

__all__ = ["Transfer"]


class Transfer:
    """NumPy views in and one copy out on CPU (the cheaper hand-off there than DLPack, either way);
    zero-copy DLPack both ways on GPU."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu = device.type == "cpu"

    def to_jax(self, tensor: torch.Tensor):
        tensor = tensor.detach()
        if self.cpu:
            return tensor.numpy()
        return jax.dlpack.from_dlpack(tensor.contiguous())

    def to_torch(self, array) -> torch.Tensor:
        if self.cpu:
            return torch.from_numpy(np.array(array))
        return torch.from_dlpack(array)
