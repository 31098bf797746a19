"""The checks and messages every part of the library shares: names, keywords, env indices, action values.

One wording each, so that a user meets the same message whether a registry name, a VMAS scenario, a Brax env
or a PettingZoo task is misspelled.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from .specs import Categorical, MultiCategorical, NestedKey, OneHot, TensorSpec

__all__ = ["accepted_keywords", "check_actions", "check_carried", "check_env_index", "check_kwargs", "did_you_mean",
           "unknown_name"]


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3) -> str:
    """``"; did you mean 'a' or 'b'?"`` for the close matches of ``name`` among ``candidates``, else ``""``."""
    close = difflib.get_close_matches(str(name), list(candidates), n=n, cutoff=0.6)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def unknown_name(what: str, name: str, candidates: Sequence[str], listing: str | None = None) -> ValueError:
    """``ValueError("unknown <what> 'x'; did you mean 'y'? available: ...")``.

    ``listing`` replaces the list of every candidate (e.g. a shortened one with a pointer to the full list).
    """
    shown = ", ".join(candidates) if listing is None else listing
    return ValueError(f"unknown {what} {name!r}{did_you_mean(name, candidates)} available: {shown}")


def accepted_keywords(factory: Callable[..., Any]) -> list[str] | None:
    """The keywords ``factory`` takes, or None when its signature cannot say (``**kwargs``, no signature)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return [n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]


def check_kwargs(owner: str, accepted: Sequence[str] | Callable[..., Any] | None, kwargs: Mapping[str, Any]) -> None:
    """Raise ``TypeError`` for the first keyword of ``kwargs`` not in ``accepted``, with a close match.

    Args:
        owner: what takes the keywords, as the message names it (``"'vmas/balance'"``, ``"VMAS scenario
            'balance'"``).
        accepted: the keywords it takes, or a callable whose signature says (no check if it has ``**kwargs``),
            or None (no check).
        kwargs: the keywords given.
    """
    if callable(accepted):
        accepted = accepted_keywords(accepted)
    if accepted is None:
        return
    for key in kwargs:
        if key not in accepted:
            raise TypeError(
                f"{owner} got an unexpected keyword argument {key!r}{did_you_mean(key, accepted, n=1) or ';'} "
                f"it accepts {list(accepted)}"
            )


def check_env_index(env_index: Any, num_envs: int) -> int:
    """``env_index`` if it is an int in ``[0, num_envs)``, else ``IndexError``."""
    if isinstance(env_index, bool) or not isinstance(env_index, int) or not 0 <= env_index < num_envs:
        raise IndexError(f"env_index must be an int in [0, {num_envs}), got {env_index!r}")
    return env_index


def _bad_actions(spec: TensorSpec, action: torch.Tensor) -> torch.Tensor:
    """Bool tensor flagging invalid entries of ``action`` (per one-hot vector for ``OneHot``)."""
    if action.dtype.is_floating_point:
        return ~torch.isfinite(action)
    if isinstance(spec, (Categorical, OneHot, MultiCategorical)):
        return ~spec.in_domain(action)
    return torch.zeros((), dtype=torch.bool, device=action.device)


_NUMPY_FLOATS = (torch.float32, torch.float64, torch.float16)


def _any_bad(spec: TensorSpec, action: torch.Tensor) -> bool | torch.Tensor:
    """Whether ``action`` holds an invalid value: a bool for float and unmasked integer actions on the CPU (NumPy
    checks a batch several times faster than torch), else a 0-dim bool tensor, left on its device (no host sync
    here)."""
    if action.device.type == "cpu":
        if action.dtype in _NUMPY_FLOATS:
            return not np.isfinite(action.detach().numpy()).all()
        if type(spec) is Categorical and spec.mask is None and not action.dtype.is_floating_point:
            values = action.numpy()
            return values.size > 0 and bool(values.min() < 0 or values.max() >= spec.n)
    return _bad_actions(spec, action).any()


def _domain(spec: TensorSpec) -> str:
    """The valid values of an action spec, in words."""
    if isinstance(spec, Categorical):
        return f"integers in [0, {spec.n})" + (" allowed by the action mask" if spec.mask is not None else "")
    if isinstance(spec, OneHot):
        return f"one-hot vectors over {spec.n} choices"
    if isinstance(spec, MultiCategorical):
        return f"integers in [0, nvec) with nvec={spec.nvec.reshape(-1, spec.nvec.shape[-1])[0].tolist()}"
    return "finite numbers (no NaN, inf or -inf)"


def _check_layout(what: str, value: torch.Tensor, spec: TensorSpec, fix: str) -> None:
    if value.shape != spec.shape or value.dtype != spec.dtype or value.device != spec.device:
        raise ValueError(
            f"{what} has shape {tuple(value.shape)}, dtype {value.dtype}, device {value.device}; "
            f"expected shape {tuple(spec.shape)}, dtype {spec.dtype}, device {spec.device} ({fix})"
        )


def check_carried(tensordict: TensorDictBase, leaves: Sequence[tuple[NestedKey, TensorSpec]]) -> None:
    """Raise ``ValueError`` unless each entry of ``leaves`` (key, spec) present in ``tensordict`` has its spec's
    shape, dtype and device: the entries a partial ``reset(tensordict)`` keeps for the envs it does not reset."""
    for key, spec in leaves:
        value = tensordict.get(key, None)
        if value is not None:
            _check_layout(f"entry {key!r} of the TensorDict given to reset()", value, spec,
                          "the envs not reset keep it; drop it or give it the spec's layout")


def check_actions(tensordict: TensorDictBase, leaves: Sequence[tuple[NestedKey, TensorSpec]], *, values: bool) -> None:
    """Raise unless every action of ``leaves`` (key, spec) is in ``tensordict`` with its spec's shape, dtype and
    device, and (if ``values``) valid values: one host sync for all keys.

    Raises:
        KeyError: an action is missing.
        ValueError: wrong shape, dtype or device; a non-finite (NaN, inf) or an out-of-range discrete value.
    """
    checked = []
    for key, spec in leaves:
        action = tensordict.get(key, None)
        if action is None:
            raise KeyError(f"action {key!r} is missing from the TensorDict; env.action_keys = {[k for k, _ in leaves]}")
        _check_layout(f"action {key!r}", action, spec, f"env.full_action_spec[{key!r}].rand() builds a valid one")
        if values:
            checked.append((key, spec, action))
    if checked:
        flags = [_any_bad(spec, action) for _, spec, action in checked]
        lazy = [flag for flag in flags if isinstance(flag, torch.Tensor)]
        if any(flag is True for flag in flags) or (lazy and bool(torch.stack(lazy).any())):  # one host sync at most
            key, spec, action = next(c for c, flag in zip(checked, flags) if bool(flag))
            bad = _bad_actions(spec, action)
            raise ValueError(
                f"action {key!r} has {int(bad.sum())} invalid value(s), e.g. {action[bad][:3].tolist()} at "
                f"index {bad.nonzero()[0].tolist()}; expected {_domain(spec)}"
            )
