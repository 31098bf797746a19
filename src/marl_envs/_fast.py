"""Small hot-path helpers shared by the env core and the backends (costs measured on the 2-core CPU machine)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from tensordict import TensorDict

__all__ = ["set_fitted", "unchecked_nested", "unchecked_tensordict"]

# TensorDict's constructor checks every leaf's batch dims and device (5-10 us for a handful of leaves); its
# unchecked twin takes ~1 us. Private in tensordict 0.14 and 0.15: fall back to the checked one if it goes away.
_new_unsafe = getattr(TensorDict, "_new_unsafe", None)
# ``TensorDict.set`` validates the value (~5 us for a TensorDict value); its string-key setter can skip that.
# Private in tensordict 0.14 and 0.15 (same keywords), as is the dim-names test: ``set`` is used if either goes.
_set_str = getattr(TensorDict, "_set_str", None)
_has_names = getattr(TensorDict, "_has_names", None)


def unchecked_tensordict(source: Mapping[str, torch.Tensor | TensorDict], batch_size: torch.Size,
                         device: torch.device) -> TensorDict:
    """``TensorDict(source, batch_size, device)`` without its checks: for data the caller built to fit
    (every leaf on ``device``, leading dims ``batch_size``; string keys, nested TensorDicts built the same way)."""
    if _new_unsafe is None:
        return TensorDict(source, batch_size=batch_size, device=device)
    return _new_unsafe(source, batch_size=batch_size, device=device)


def unchecked_nested(source: Mapping[str, object], batch_size: torch.Size | tuple[int, ...],
                     device: torch.device) -> TensorDict:
    """:func:`unchecked_tensordict` of a nested ``dict`` of tensors: each inner ``dict`` becomes a TensorDict of
    the same ``batch_size`` (the caller built every leaf to fit)."""
    return unchecked_tensordict({key: unchecked_nested(value, batch_size, device) if isinstance(value, dict)
                                 else value for key, value in source.items()}, torch.Size(batch_size), device)


def set_fitted(tensordict: TensorDict, key: str, value: TensorDict, device: torch.device) -> None:
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
