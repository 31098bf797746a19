"""The checks and messages every part of the library shares: names, keywords, env indices, action values.

One wording each, so that a user meets the same message whether a registry name, a VMAS scenario, a Brax env
or a PettingZoo task is misspelled.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from tensordict import TensorDictBase

from .specs import Categorical, MultiCategorical, NestedKey, OneHot, TensorSpec

__all__ = ["ActionCheck", "accepted_keywords", "action_checks", "check_actions", "check_carried", "check_env_index",
           "check_kwargs", "did_you_mean", "unknown_name"]


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
_TORCH, _FINITE, _RANGE = 0, 1, 2  # how an action's values are checked


class ActionCheck(NamedTuple):
    """What ``check_actions`` checks of one action entry, worked out when the specs are set (``action_checks``).

    ``values``: ``_FINITE`` (a float action on the CPU: NumPy, several times faster than torch on a batch),
    ``_RANGE`` (a ``Categorical`` action on the CPU: NumPy's min and max while the spec has no mask), else
    ``_TORCH`` (a 0-dim bool tensor left on its device: no host sync until every action is checked).
    """

    key: NestedKey
    spec: TensorSpec
    shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    values: int


def action_checks(leaves: Sequence[tuple[NestedKey, TensorSpec]]) -> list[ActionCheck]:
    """The ``ActionCheck`` of each action entry (key, spec)."""
    checks = []
    for key, spec in leaves:
        how = _TORCH
        if spec.device.type == "cpu":
            if spec.dtype in _NUMPY_FLOATS:
                how = _FINITE
            elif type(spec) is Categorical and not spec.dtype.is_floating_point:
                how = _RANGE
        checks.append(ActionCheck(key, spec, spec.shape, spec.dtype, spec.device, how))
    return checks


def _any_bad(check: ActionCheck, action: torch.Tensor) -> bool | torch.Tensor:
    """Whether ``action`` holds an invalid value: a bool where NumPy checks it, else a 0-dim bool tensor."""
    if check.values == _FINITE:
        return not np.isfinite((action.detach() if action.requires_grad else action).numpy()).all()
    if check.values == _RANGE and check.spec.mask is None:
        values = action.numpy()
        return values.size > 0 and bool(values.min() < 0 or values.max() >= check.spec.n)
    return _bad_actions(check.spec, action).any()


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


def check_actions(tensordict: TensorDictBase, checks: Sequence[ActionCheck], *, values: bool) -> None:
    """Raise unless every action of ``checks`` (``action_checks``) is in ``tensordict`` with its spec's shape, dtype
    and device, and (if ``values``) valid values: one host sync for all keys.

    Raises:
        KeyError: an action is missing.
        ValueError: wrong shape, dtype or device; a non-finite (NaN, inf) or an out-of-range discrete value.
    """
    actions = []
    for check in checks:
        action = tensordict.get(check.key, None)
        if action is None:
            raise KeyError(f"action {check.key!r} is missing from the TensorDict; env.action_keys = "
                           f"{[c.key for c in checks]}")
        if action.shape != check.shape or action.dtype != check.dtype or action.device != check.device:
            _check_layout(f"action {check.key!r}", action, check.spec,
                          f"env.full_action_spec[{check.key!r}].rand() builds a valid one")
        actions.append(action)
    if not values:
        return
    flags = [_any_bad(check, action) for check, action in zip(checks, actions)]
    if any(flag is True for flag in flags):
        index = next(i for i, flag in enumerate(flags) if flag is True)
    else:
        lazy = [flag for flag in flags if flag is not False]
        if not lazy or not bool(lazy[0] if len(lazy) == 1 else torch.stack(lazy).any()):  # one host sync at most
            return
        index = next(i for i, flag in enumerate(flags) if bool(flag))
    check, action = checks[index], actions[index]
    bad = _bad_actions(check.spec, action)
    raise ValueError(
        f"action {check.key!r} has {int(bad.sum())} invalid value(s), e.g. {action[bad][:3].tolist()} at "
        f"index {bad.nonzero()[0].tolist()}; expected {_domain(check.spec)}"
    )
