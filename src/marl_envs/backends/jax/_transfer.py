"""torch <-> JAX: the array hand-off of every JAX family."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import torch

__all__ = ["Transfer"]

# torch warns once per process about a read-only NumPy array; that warning would be about the hand-off of JAX's
# outputs (see ``Transfer``), not about the user's code, so it is given here, where it is not shown.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.from_numpy(np.lib.stride_tricks.as_strided(np.zeros(1), writeable=False))

_CANONICAL = (torch.float32, torch.bool, torch.int32, torch.uint32, torch.int8, torch.uint8)  # JAX keeps these as is


class Transfer:
    """NumPy views both ways on the CPU (cheaper there than DLPack); zero-copy DLPack both ways on a GPU.

    JAX's buffers are immutable, so NumPy marks its view of one read-only; an output buffer of a compiled call is
    never passed back into one (only the carried state is donated), so the tensor made of it is its only reader and
    writer.

    The DLPack hand-offs are JAX's and torch's own (``jax.dlpack.from_dlpack``, ``torch.from_dlpack``), with what
    those look up at every call looked up once: the JAX device, the stream JAX has a producer wait on, the DLPack
    device type. Most of the cost of ``jax.dlpack.from_dlpack`` of a small action is that Python; the capsule calls
    underneath cost little. Streams are passed as JAX's and torch's functions pass them: the producer makes the
    consumer's stream wait, so nothing waits on the host. Where JAX moved those calls, the public functions are used.

    Args:
        device: the torch device.
        dlpack: DLPack on the CPU too (the device code path, ``device_path=True``); default: on a GPU only.
        jax_device: the JAX device of ``device`` (default: found from it).
    """

    def __init__(self, device: torch.device, *, dlpack: bool | None = None, jax_device: Any = None):
        self.device = device
        self.cpu = device.type == "cpu" if dlpack is None else not dlpack
        self._to_jax: Callable[[torch.Tensor], Any] = jax.dlpack.from_dlpack
        self._capsules: Callable[[Sequence[Any]], list[Any]] | None = None
        if not self.cpu:
            self._fast(jax_device)

    def _fast(self, jax_device: Any) -> None:
        """Set the hand-offs that skip the public functions' per-call lookups, where this JAX has the calls."""
        try:
            from jax._src.lib import _jax, jaxlib_extension_version
            from ...distributed import jax_device as find

            to_buffer, to_capsule = _jax.dlpack_managed_tensor_to_buffer, _jax.buffer_to_dlpack_managed_tensor
            target = jax_device if jax_device is not None else find(self.device)
            dl_type = int(torch.empty(0, device=self.device).__dlpack_device__()[0])
            try:
                stream = target.get_stream_for_external_ready_events()
            except jax.errors.JaxRuntimeError as err:  # the CPU has none
                if "UNIMPLEMENTED" not in str(err):
                    raise
                stream = None
        except (ImportError, AttributeError):
            return
        extra = (dl_type,) if jaxlib_extension_version >= 467 else ()

        def to_jax(tensor: torch.Tensor):
            array = to_buffer(tensor.__dlpack__(stream=stream), target, stream, None, *extra)
            if tensor.dtype in _CANONICAL:
                return array
            return jax.numpy.asarray(array, dtype=jax.dtypes.canonicalize_dtype(array.dtype))  # JAX's dtype rule

        self._to_jax = to_jax
        cuda = torch.device("cuda", target.local_hardware_id) if self.device.type == "cuda" else None

        def capsules(arrays):
            if cuda is None:
                return [to_capsule(array, stream=None) for array in arrays]
            current = torch.cuda.current_stream(cuda).cuda_stream  # the stream torch reads them on, looked up once
            stream = 1 if current == 0 else current  # 1: CUDA's legacy default stream
            return [to_capsule(array, stream=stream) for array in arrays]

        self._capsules = capsules

    def to_jax(self, tensor: torch.Tensor):
        tensor = tensor.detach()
        if self.cpu:
            return tensor.numpy()
        return self._to_jax(tensor.contiguous())

    def to_torch(self, array) -> torch.Tensor:
        return self.to_torch_all((array,))[0]

    def to_torch_all(self, arrays: Sequence[Any]) -> list[torch.Tensor]:
        """``to_torch`` of each of ``arrays`` (one step's outputs), torch's current stream looked up once for all."""
        if self.cpu:
            return [torch.from_numpy(np.asarray(array)) for array in arrays]
        if self._capsules is not None:
            return [torch.from_dlpack(capsule) for capsule in self._capsules(arrays)]
        return [torch.from_dlpack(array) for array in arrays]
