"""The action checks of every step (``EnvBase.step`` and the JAX executor): worked out once when the specs are set
(``action_checks``), run on each step's actions (``check_actions``) without reading device data on the host unless
asked to check values at once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch
from tensordict import TensorDictBase

from .leaf_specs import Categorical, MultiCategorical, NestedKey, OneHot, TensorSpec, legal_choices
from .tensordicts import read_entry

__all__ = ["ActionCheck", "action_checks", "action_domain", "check_actions", "check_carried", "forbidden_message"]


def _bad_actions(spec: TensorSpec, action: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Bool tensor flagging invalid entries of ``action`` (per one-hot vector for ``OneHot``); with ``rows`` (a
    bool of the action's leading dims), per row, and only where ``rows`` is True."""
    if action.dtype.is_floating_point:
        bad = ~torch.isfinite(action)
    elif isinstance(spec, (Categorical, OneHot, MultiCategorical)):
        bad = ~spec.in_domain(action)
    else:
        bad = torch.zeros((), dtype=torch.bool, device=action.device)
    if rows is None:
        return bad
    bad = bad.expand(action.shape[:rows.ndim]) if bad.ndim < rows.ndim else bad
    return (bad.flatten(rows.ndim).any(-1) if bad.ndim > rows.ndim else bad) & rows


_NUMPY_FLOATS = (torch.float32, torch.float64, torch.float16)
_TORCH, _FINITE, _RANGE = 0, 1, 2  # how an action's values are checked


class ActionCheck(NamedTuple):
    """What ``check_actions`` checks of one action entry, worked out when the specs are set (``action_checks``).

    ``values``: ``_FINITE`` (a float action on the CPU: NumPy, faster than torch on a batch there),
    ``_RANGE`` (a ``Categorical`` action on the CPU: NumPy's min and max while the spec has no mask), else
    ``_TORCH`` (a 0-dim bool tensor left on its device: no host sync until every action is checked).
    ``rows``: the key of a bool ``(B, n_agents[, 1])`` entry saying whose actions count (the group's ``"mask"``: the
    agents acting, or alive); when the data hold it, the other agents' actions are not checked (nor applied by
    the backend). ``legal``: the key of the action's mask (``(group, "action_mask")``, one bool per choice); when
    the data hold it, a choice it forbids is refused like an out-of-range one. ``agents``: the group's agent names.
    """

    key: NestedKey
    spec: TensorSpec
    shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    values: int
    rows: NestedKey | None = None
    legal: NestedKey | None = None
    agents: tuple[str, ...] = ()


def action_checks(leaves: Sequence[tuple[NestedKey, TensorSpec]],
                  rows: Mapping[NestedKey, NestedKey] | None = None, legal: Mapping[NestedKey, NestedKey] | None = None,
                  agents: Mapping[NestedKey, Sequence[str]] | None = None) -> list[ActionCheck]:
    """The ``ActionCheck`` of each action entry (key, spec); ``rows``, ``legal``, ``agents``: action key -> its
    ``rows`` key, its action mask's key, its group's agent names."""
    checks = []
    for key, spec in leaves:
        how = _TORCH
        if spec.device.type == "cpu":
            if spec.dtype in _NUMPY_FLOATS:
                how = _FINITE
            elif type(spec) is Categorical and not spec.dtype.is_floating_point:
                how = _RANGE
        mask = (legal or {}).get(key) if isinstance(spec, (Categorical, OneHot)) else None
        checks.append(ActionCheck(key, spec, spec.shape, spec.dtype, spec.device, how, (rows or {}).get(key), mask,
                                  tuple((agents or {}).get(key, ()))))
    return checks


def _forbidden(check: ActionCheck, action: torch.Tensor, legal: torch.Tensor) -> torch.Tensor:
    """Bool of the action's leading dims: the choices ``legal`` (its action mask) forbids (none in a row that allows
    no choice: ``legal_choices``). An out-of-range choice reads as its nearest in range here (the range check names
    it)."""
    spec = check.spec
    choice = action.argmax(-1) if isinstance(spec, OneHot) else action
    choice = choice.long().clamp(0, spec.n - 1)
    return ~legal_choices(legal.reshape(*choice.shape, spec.n)).gather(-1, choice.unsqueeze(-1)).squeeze(-1)


def forbidden_message(key: NestedKey, env: int, agent: int | None, agents: Sequence[str], choice: int,
                      mask: NestedKey, allowed: Sequence[int]) -> str:
    """The one message of a choice an action mask forbids (checked before the step or inside it): the key, the
    env, the agent (``None``: a root action), the choice and the legal ones."""
    who = "" if agent is None else f", agent {agent}" + (f" ({agents[agent]!r})" if agent < len(agents) else "")
    return (f"action {key!r} of env {env}{who} was {choice}, which its action mask {mask!r} forbids; the legal ones: "
            f"{list(allowed)}.")


def _refuse_forbidden(check: ActionCheck, action: torch.Tensor, legal: torch.Tensor, forbidden: torch.Tensor) -> None:
    """Raise on the first choice ``forbidden`` flags, naming the env, the agent, the choice and the legal ones."""
    at = forbidden.nonzero()[0].tolist()
    env, agent = at[0], (at[1] if len(at) > 1 else None)
    row = (env,) if agent is None else (env, agent)
    choice = action[row].argmax(-1) if isinstance(check.spec, OneHot) else action[row]
    allowed = legal.reshape(*forbidden.shape, check.spec.n)[row].nonzero().flatten().tolist()
    raise ValueError(
        forbidden_message(check.key, env, agent, check.agents, int(choice), check.legal, allowed)
        + " Nothing of this step was applied: draw actions from the mask (env.rand_action honours it, a masked "
          "policy does)")


def _any_bad(check: ActionCheck, action: torch.Tensor) -> bool | torch.Tensor:
    """Whether ``action`` holds an invalid value: a bool where NumPy checks it, else a 0-dim bool tensor."""
    if check.values == _FINITE:
        return not np.isfinite((action.detach() if action.requires_grad else action).numpy()).all()
    if check.values == _RANGE and check.spec.mask is None:
        values = action.numpy()
        return values.size > 0 and bool(values.min() < 0 or values.max() >= check.spec.n)
    return _bad_actions(check.spec, action).any()


def action_domain(spec: TensorSpec) -> str:
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


def check_actions(tensordict: TensorDictBase, checks: Sequence[ActionCheck], *, values: bool) -> list[torch.Tensor]:
    """Raise unless every action of ``checks`` (``action_checks``) is in ``tensordict`` with its spec's shape, dtype
    and device, and (if ``values``) valid values: one host sync for all keys. Returns the actions, in order.

    Raises:
        KeyError: an action is missing.
        ValueError: wrong shape, dtype or device; a non-finite (NaN, inf) or an out-of-range discrete value.
    """
    actions = []
    for check in checks:
        action = read_entry(tensordict, check.key)
        if action is None:
            raise KeyError(f"action {check.key!r} is missing from the TensorDict; env.action_keys = "
                           f"{[c.key for c in checks]}")
        if action.shape != check.shape or action.dtype != check.dtype or action.device != check.device:
            _check_layout(f"action {check.key!r}", action, check.spec,
                          f"env.full_action_spec[{check.key!r}].rand() builds a valid one")
        actions.append(action)
    if not values:
        return actions
    flags = [_any_bad(check, action) for check, action in zip(checks, actions)]  # every row, the fast way
    masked = []  # (check, action, legal, forbidden) of the actions whose mask the data hold
    for check, action in zip(checks, actions):
        legal = None if check.legal is None else read_entry(tensordict, check.legal)
        if legal is not None:
            forbidden = _forbidden(check, action, legal)
            rows = _rows(tensordict, check)
            masked.append((check, action, legal, forbidden if rows is None else forbidden & rows))
    if not any(flag is True for flag in flags):
        lazy = [flag for flag in flags if flag is not False] + [m[3].any() for m in masked]
        if not lazy or not bool(lazy[0] if len(lazy) == 1 else torch.stack(lazy).any()):  # one host sync at most
            return actions
    for check, action, flag in zip(checks, actions, flags):
        if not bool(flag):
            continue
        rows = _rows(tensordict, check)  # something is off: is it in a row whose action counts?
        bad = _bad_actions(check.spec, action, rows)
        if rows is not None and not bool(bad.any()):
            continue
        raise ValueError(
            f"action {check.key!r} has {int(bad.sum())} invalid value(s), e.g. {action[bad][:3].tolist()} at "
            f"index {bad.nonzero()[0].tolist()}; expected {action_domain(check.spec)}"
        )
    for check, action, legal, forbidden in masked:
        if bool(forbidden.any()):
            _refuse_forbidden(check, action, legal, forbidden)
    return actions


def _rows(tensordict: TensorDictBase, check: ActionCheck) -> torch.Tensor | None:
    """The ``(B, n_agents)`` bool of the agents whose actions count (``check.rows``), None to count every row."""
    row = None if check.rows is None else read_entry(tensordict, check.rows)
    if row is None:
        return None
    if row.dtype != torch.bool or row.numel() != check.shape[:2].numel() or row.device != check.device:
        raise ValueError(
            f"entry {check.rows!r} (whose actions count) has shape {tuple(row.shape)}, dtype {row.dtype}, device "
            f"{row.device}; expected a bool of shape {tuple(check.shape[:2])} (a trailing 1 allowed) on "
            f"{check.device}, as the env writes it"
        )
    return row.reshape(check.shape[:2])
