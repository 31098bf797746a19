"""Arrays laid side by side in one buffer per dtype: a JAX-family env's state (``StatePacking``), the outputs of its
compiled programs (``Layout``) and what it carries from one call to the next (``Carry``).

Every array a compiled call takes or returns is one more argument for its dispatch, and a state or an output has
tens of leaves: each is packed as ``(B, width)`` columns of the buffer of its dtype, float32 first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ..._core.tensordicts import item_reader

__all__ = ["Carry", "Layout", "StatePacking", "numpy_dtype", "side_by_side"]

Key = tuple[str, ...]


def side_by_side(entries: Sequence[tuple[int, int]], buffers: int) -> tuple[list[tuple[int, slice]], list[int]]:
    """Where entries laid side by side in ``buffers`` buffers sit: each ``(buffer, size)`` entry's ``(buffer, its
    columns)``, in order, and each buffer's width."""
    widths = [0] * buffers
    places = []
    for buffer, size in entries:
        places.append((buffer, slice(widths[buffer], widths[buffer] + size)))
        widths[buffer] += size
    return places, widths


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


class StatePacking:
    """Packs a batched state pytree into one ``(B, n)`` buffer per dtype, float32 first, and back.

    Args:
        reference: the unbatched state's structure (``ShapeDtypeStruct`` leaves).
    """

    def __init__(self, reference: Any):
        leaves, self.treedef = jax.tree.flatten(reference)
        dtypes = sorted({np.dtype(x.dtype) for x in leaves} | {np.dtype(np.float32)},
                        key=lambda d: (d != np.float32, str(d)))
        self.dtypes = tuple(dtypes)  # float32 first (possibly width 0): the differentiable buffer
        places, self.widths = side_by_side([(dtypes.index(np.dtype(x.dtype)), int(np.prod(x.shape))) for x in leaves],
                                           len(dtypes))
        # per leaf: (buffer, start, stop, shape)
        self.slots = [(group, cols.start, cols.stop, tuple(x.shape)) for (group, cols), x in zip(places, leaves)]

    def pack(self, state: Any) -> tuple[jax.Array, ...]:
        leaves = jax.tree.leaves(state)
        B = leaves[0].shape[0] if leaves else 0
        parts: list[list[jax.Array]] = [[] for _ in self.dtypes]
        for (group, _, _, _), leaf in zip(self.slots, leaves):
            parts[group].append(leaf.reshape(B, -1))
        return tuple(
            jnp.concatenate(p, axis=1) if p else jnp.zeros((B, 0), dtype) for p, dtype in zip(parts, self.dtypes)
        )

    def unpack(self, buffers: Sequence[Any], batch: tuple[int, ...] | None = None) -> Any:
        """The state from its buffers (JAX or NumPy; ``batch`` overrides the leading shape, e.g. ``()``)."""
        lead = (buffers[0].shape[0],) if batch is None else batch
        leaves = [buffers[g][..., a:b].reshape((*lead, *shape)) for g, a, b, shape in self.slots]
        return jax.tree.unflatten(self.treedef, leaves)


class Layout:
    """Where each entry of one output sits among the output's buffers: one ``(B, width)`` buffer per dtype,
    float32 first, entries side by side in their order.

    Args:
        entries: ``(key, batched shape, torch dtype)`` of each entry, in order (a key may repeat: two outputs
            laid side by side).
        flags: that many more bool columns after the bool entries (no entry's), each a scalar of the whole batch that
            the CPU path reads from the view it makes anyway: the last, the deferred check's "a bad action was
            recorded"; the one before it (a step that restarts ended envs on the host), "some env's episode ended".
    """

    def __init__(self, entries: Sequence[tuple[Key, tuple[int, ...], torch.dtype]], *, flags: int = 0):
        self.entries = list(entries)
        self.dtypes = list(dict.fromkeys([d for _, _, d in entries] + ([torch.bool] if flags else [])))
        self.flag = self.dtypes.index(torch.bool) if flags else None  # the flags' buffer (its last columns)
        places, self.widths = side_by_side(
            [(self.dtypes.index(dtype), int(np.prod(shape[1:]))) for _, shape, dtype in entries], len(self.dtypes))
        self.slots = [(index, cols, tuple(shape)) for (index, cols), (_, shape, _) in zip(places, entries)]
        # how ``cut`` reads them: each buffer split at its entries' widths in one call, the split parts of all
        # buffers read in entry order in one C call, then reshaped where the entry has more than one dim past the batch
        self._sizes = [[cols.stop - cols.start for i, cols, _ in self.slots if i == index]
                       for index in range(len(self.dtypes))]
        if flags:
            self._sizes[self.flag].append(flags)
            self.widths[self.flag] += flags
        firsts = np.cumsum([0] + [len(sizes) for sizes in self._sizes]).tolist()  # each buffer's first part
        counts = [0] * len(self.dtypes)
        order = []
        for index, _, _ in self.slots:
            order.append(firsts[index] + counts[index])
            counts[index] += 1
        self._pick = item_reader(order)
        self._shaped = [(i, shape) for i, (_, _, shape) in enumerate(self.slots) if len(shape) != 2]

    def pack(self, values: Sequence[jax.Array], *flags: jax.Array) -> tuple[jax.Array, ...]:
        """The ``(B, width)`` buffers (one per dtype) of ``values`` (one ``(B, ...)`` array per entry, in order)
        and the layout's scalar ``flags``."""
        parts: list[list[jax.Array]] = [[] for _ in self.dtypes]
        for (index, _, _), value in zip(self.slots, values):
            parts[index].append(value.reshape(value.shape[0], -1).astype(numpy_dtype(self.dtypes[index])))
        if self.flag is not None:
            B = values[0].shape[0]
            parts[self.flag].append(jnp.broadcast_to(jnp.stack(flags), (B, len(flags))))
        return tuple(jnp.concatenate(p, axis=1) for p in parts)

    def cut(self, buffers: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The entries of the batched ``buffers``, as views."""
        parts: list[torch.Tensor] = []
        for buffer, sizes in zip(buffers, self._sizes):
            parts += buffer.split_with_sizes(sizes, 1)
        entries = list(self._pick(parts))
        for i, shape in self._shaped:
            entries[i] = entries[i].view(shape)
        return entries


class Carry:
    """What a JAX-family env carries from one compiled call to the next: the model's state buffers as they are, and
    the env keys and step counts side by side in one uint32 ``(B, 3)`` array (two words of key, then the step count's
    bits). Every array a compiled call takes or returns adds to its dispatch on a CPU, a cheap env's margin; the
    state buffers stay apart, so that XLA compiles the state's arithmetic alike in every program (the
    fused step and reset, bit for bit the step then the reset).
    """

    @staticmethod
    def join(buffers: Sequence[jax.Array], keys: jax.Array, steps: jax.Array
             ) -> tuple[tuple[jax.Array, ...], jax.Array]:
        """The carry of the state ``buffers``, ``keys`` ``(B, 2)`` uint32 and ``steps`` ``(B,)`` int32."""
        return tuple(buffers), jnp.concatenate([keys, jax.lax.bitcast_convert_type(steps, jnp.uint32)[:, None]], 1)

    @staticmethod
    def split(carry: tuple[tuple[jax.Array, ...], jax.Array]) -> tuple[tuple[jax.Array, ...], jax.Array, jax.Array]:
        """``(state buffers, keys, steps)`` of a carry (``join``'s inverse)."""
        buffers, counters = carry
        return tuple(buffers), counters[:, :2], jax.lax.bitcast_convert_type(counters[:, 2], jnp.int32)
