"""TensorDict shims: the outputs are built to fit, so TensorDict's per-leaf checks are skipped.

Every function here does what a public TensorDict call does, without the checks that data built to fit would pass
anyway; each falls back to the public call where the private one it uses is gone.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["Tree", "item_reader", "read_entry", "set_entry", "set_unchecked", "unchecked_nested",
           "unchecked_tensordict"]

Key = tuple[str, ...]


# TensorDict's constructor checks every leaf's batch dims and device; its unchecked twin does not. Private in
# tensordict 0.14 and 0.15: the checked one is used if it goes away.
_new_unsafe = getattr(TensorDict, "_new_unsafe", None)
# ``TensorDict.set`` validates the value; its string-key setter can skip that. Private in tensordict 0.14 and 0.15
# (same keywords), as is the dim-names test: ``set`` is used if either goes.
_set_str = getattr(TensorDict, "_set_str", None)
_has_names = getattr(TensorDict, "_has_names", None)
# ``TensorDict.get`` unravels the key before it reads; its string- and tuple-key readers do not. Private in tensordict
# 0.11 to 0.15 (same arguments): ``get`` is used if either goes.
_get_str = getattr(TensorDict, "_get_str", None)
_get_tuple = getattr(TensorDict, "_get_tuple", None)
# ``TensorDict.set`` unravels and validates; its tuple-key setter need not. Private in tensordict 0.11 to 0.15 (same
# keywords): ``set`` is used if it goes.
_set_tuple = getattr(TensorDict, "_set_tuple", None)


def unchecked_tensordict(source: Mapping[str, torch.Tensor | TensorDict], batch_size: torch.Size,
                         device: torch.device) -> TensorDict:
    """``TensorDict(source, batch_size, device)`` without its checks: for data the caller built to fit
    (every leaf on ``device``, leading dims ``batch_size``; string keys, nested TensorDicts built the same way, no
    ``dict`` values: ``nested=False`` takes them as they are)."""
    if _new_unsafe is None:
        return TensorDict(source, batch_size=batch_size, device=device)
    return _new_unsafe(source, batch_size=batch_size, device=device, nested=False)


def read_entry(tensordict: TensorDictBase, key: str | tuple[str, ...]) -> Any:
    """``tensordict.get(key, None)`` of a key in its plain form (a string, or a flat tuple of strings): on a plain
    TensorDict, its key reader without the unravelling."""
    if type(tensordict) is TensorDict and _get_tuple is not None and _get_str is not None:
        return _get_str(tensordict, key, None) if type(key) is str else _get_tuple(tensordict, key, None)
    return tensordict.get(key, None)


def set_entry(tensordict: TensorDictBase, key: str | tuple[str, ...], value: torch.Tensor) -> None:
    """``tensordict.set(key, value)`` of a tensor the caller built to fit (batch dims and device), its key in a plain
    form (as ``read_entry``'s): on a plain TensorDict, its key setter without the unravelling and the checks."""
    if type(tensordict) is TensorDict and _set_tuple is not None and _set_str is not None:
        setter = _set_str if type(key) is str else _set_tuple
        setter(tensordict, key, value, inplace=False, validated=True)
    else:
        tensordict.set(key, value)


def unchecked_nested(source: Mapping[str, object], batch_size: torch.Size | tuple[int, ...],
                     device: torch.device) -> TensorDict:
    """:func:`unchecked_tensordict` of a nested ``dict`` of tensors: each inner ``dict`` becomes a TensorDict of
    the same ``batch_size`` (the caller built every leaf to fit)."""
    return unchecked_tensordict({key: unchecked_nested(value, batch_size, device) if isinstance(value, dict)
                                 else value for key, value in source.items()}, torch.Size(batch_size), device)


def set_unchecked(tensordict: TensorDict, key: str, value: TensorDict, device: torch.device) -> None:
    """``tensordict.set(key, value)``, unchecked where that is what ``set`` would do: a plain TensorDict on
    ``device`` without dim names, given a TensorDict ``value`` of the same batch size on ``device`` (validation
    would leave it as it is)."""
    if (_set_str is not None and _has_names is not None and type(tensordict) is TensorDict
            and type(value) is TensorDict and tensordict.device == device and value.device == device
            and value.batch_size == tensordict.batch_size and not _has_names(tensordict)):
        try:
            tensordict._set_str(key, value, inplace=False, validated=True)
            return
        except TypeError:  # another signature: the public way
            pass
    tensordict.set(key, value)


def item_reader(indices: Sequence[int]) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """The reader of the items ``indices`` of a list, in that order, as one C call (an ``operator.itemgetter``)."""
    if len(indices) > 1:
        return operator.itemgetter(*indices)
    # an itemgetter of one index gives the item itself: a slice gives it in a list (and none, an empty one)
    return operator.itemgetter(slice(indices[0], indices[0] + 1) if indices else slice(0, 0))


class Tree:
    """Builds the nested TensorDict of ``keys`` from a list of leaves (``keys[i]`` at ``leaves[at[i]]``; ``at``:
    ``0, 1, ...`` if not given), unchecked.

    A top-level name with nested keys becomes a sub-TensorDict of batch ``batches[name]`` (a group's
    ``(B, n_agents)``), or ``batch`` when the name is no group; deeper levels keep their parent's batch.
    """

    def __init__(self, keys: Sequence[Key], batch: torch.Size, device: torch.device,
                 batches: Mapping[str, torch.Size] | None = None, at: Sequence[int] | None = None):
        self.batch, self.device = batch, device
        leaves: list[tuple[str, int]] = []
        nested: dict[str, list[tuple[Key, int]]] = {}
        for key, index in zip(keys, range(len(keys)) if at is None else at, strict=True):
            if len(key) == 1:
                leaves.append((key[0], index))
            else:
                nested.setdefault(key[0], []).append((key[1:], index))
        self.subtrees: list[tuple[str, Tree]] = [
            (name, Tree([k for k, _ in entries], (batches or {}).get(name, batch), device, at=[i for _, i in entries]))
            for name, entries in nested.items()]
        self._names = tuple(name for name, _ in leaves)  # this level's names, and the reader of their leaves
        self._pick = item_reader([i for _, i in leaves])  # from the list (one C call)

    def __call__(self, leaves: Sequence[Any]) -> TensorDict:
        source = dict(zip(self._names, self._pick(leaves)))
        for name, tree in self.subtrees:
            source[name] = tree(leaves)
        return unchecked_tensordict(source, self.batch, self.device)
