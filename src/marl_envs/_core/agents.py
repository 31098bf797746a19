"""Agents into groups, once for every backend: group-map resolution from per-agent specs, and their stacking.

A backend describes each agent by a ``Composite`` without batch dims (``action``, ``observation``, ``reward``,
``info``, ``action_mask``, ...). From those, ``EnvBase._group_agents`` resolves the group map (the default rule
of ``groupings``, or the user's map checked once), refuses a group whose agents differ, and stacks each group's
specs into one ``Composite`` of batch ``(num_envs, n_agents)``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import torch

from groupings import GroupMap, MarlGroupMapType, default_group_map

from .composite import Composite
from .leaf_specs import Bounded, Categorical, MultiCategorical, OneHot, TensorSpec, Unbounded

__all__ = ["nest_keys", "resolve_group_map", "signature", "specs_by_kind", "stack_specs"]


def _leaf_signature(spec: TensorSpec, bounds: bool) -> Hashable:
    kind: Hashable = type(spec).__name__
    fields: tuple = ()
    if isinstance(spec, (Bounded, Unbounded)) and spec.dtype.is_floating_point and not bounds:
        kind = "box"  # Box spaces whose bounds may differ per agent (stacked per agent)
    elif isinstance(spec, Bounded):
        fields = (tuple(spec.low.reshape(-1).tolist()), tuple(spec.high.reshape(-1).tolist()))
    elif isinstance(spec, (Categorical, OneHot)):
        fields = (spec.n,)
    elif isinstance(spec, MultiCategorical):
        fields = (tuple(spec.nvec.reshape(-1).tolist()),)
    return kind, tuple(spec.shape), str(spec.dtype), fields


def signature(spec: Composite, *, bounds: bool = True) -> tuple:
    """What agents sharing a group must share: each leaf's kind, shape, dtype, size (and bounds if ``bounds``)."""
    return tuple((key, _leaf_signature(leaf, bounds)) for key, leaf in spec.items(True, True))


def _first_difference(a: Composite, b: Composite, bounds: bool) -> str:
    keys_b = b.keys(True, True)
    for key in a.keys(True, True):
        if key not in keys_b:
            return f"{key!r} (absent from the second)"
        if _leaf_signature(a[key], bounds) != _leaf_signature(b[key], bounds):
            return f"{key!r}: {a[key]} vs {b[key]}"
    extra = [k for k in keys_b if k not in a.keys(True, True)]
    return f"{extra[0]!r} (absent from the first)"


def resolve_group_map(
    group_map: GroupMap | MarlGroupMapType | None, agent_specs: Mapping[str, Composite], *, bounds: bool = True
) -> GroupMap:
    """The group map to use: ``default_group_map`` over the agents' signatures when ``group_map`` is None,
    else ``group_map`` (a ``MarlGroupMapType`` resolved over the agents) after checking that each group's agents
    share their specs. ``check_marl_grouping`` is left to the ``EnvBase.group_map`` setter.

    Raises:
        ValueError: a group mixing agents whose specs differ (naming both agents and the first differing entry).
    """
    names = list(agent_specs)
    signatures = {name: signature(spec, bounds=bounds) for name, spec in agent_specs.items()}
    if group_map is None:
        return default_group_map(names, [signatures[n] for n in names])
    group_map = MarlGroupMapType.coerce(group_map)  # TorchRL's strategies too
    if isinstance(group_map, MarlGroupMapType):
        group_map = group_map.get_group_map(names)
    if not isinstance(group_map, Mapping):
        return group_map  # malformed: the setter's check_marl_grouping says how
    for group, members in group_map.items():
        known = [m for m in members if m in signatures] if isinstance(members, Sequence) else []
        for other in known[1:]:
            if signatures[other] != signatures[known[0]]:
                by_spec = default_group_map(names, [signatures[n] for n in names])
                raise ValueError(
                    f"group {group!r} mixes agents with different specs: {known[0]!r} and {other!r} differ at "
                    f"{_first_difference(agent_specs[known[0]], agent_specs[other], bounds)}; agents of one group "
                    f"share their specs (one dense tensor per group, as TorchRL's losses and BenchMARL's models "
                    f"need), so put them in separate groups: group_map=None gives {by_spec}"
                )
    return group_map


def _stack_leaves(specs: Sequence[TensorSpec]) -> TensorSpec:
    first, n = specs[0], len(specs)
    if all(spec == first for spec in specs[1:]):
        return first.expand(n, *first.shape)
    # Box specs with per-agent bounds (the signature was taken without bounds): stack them, inf where unbounded
    lows, highs = [], []
    for spec in specs:
        if isinstance(spec, Bounded):
            lows.append(spec.low.expand(spec.shape))
            highs.append(spec.high.expand(spec.shape))
        else:
            lows.append(torch.full(spec.shape, -torch.inf, dtype=spec.dtype, device=spec.device))
            highs.append(torch.full(spec.shape, torch.inf, dtype=spec.dtype, device=spec.device))
    return Bounded(torch.stack(lows), torch.stack(highs), (n, *first.shape), dtype=first.dtype, device=first.device)


def stack_specs(specs: Sequence[Composite], batch: Sequence[int]) -> Composite:
    """One Composite of shape ``(*batch, n)`` from the ``n`` agents' Composites of one group (shape ``()``)."""
    first = specs[0]
    stacked = Composite(shape=(len(specs),), device=first.device)
    for name, spec in first.items():
        members = [s[name] for s in specs]
        stacked[name] = stack_specs(members, ()) if isinstance(spec, Composite) else _stack_leaves(members)
    return stacked.expand(*batch, len(specs)) if batch else stacked


_KINDS = {"action": "action", "reward": "reward", "done": "done", "terminated": "done", "truncated": "done"}


def specs_by_kind(groups: Mapping[str, Composite], root: Mapping[str, TensorSpec | Composite], batch: torch.Size,
                  device: torch.device) -> dict[str, Composite]:
    """The ``full_*_spec`` Composites of group specs and root entries: ``action`` entries are actions, ``reward``
    rewards, ``done`` / ``terminated`` / ``truncated`` done entries, everything else (observations, infos, masks,
    a root ``state``) observations."""
    specs = {kind: Composite(shape=batch, device=device) for kind in ("observation", "action", "reward", "done")}
    for group, spec in groups.items():
        for name, entry in spec.items():
            kind = _KINDS.get(name, "observation")
            if group not in specs[kind]:
                specs[kind][group] = Composite(shape=spec.shape, device=device)
            specs[kind][group, name] = entry
    for name, entry in root.items():
        specs[_KINDS.get(name, "observation")][name] = entry
    return specs


def nest_keys(flat: Mapping[tuple[str, ...], object]) -> dict:
    """``{("a", "b"): x, ("c",): y}`` -> ``{"a": {"b": x}, "c": y}``."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = value
    return out
