"""Agent grouping for multi-agent environments (pure Python, no torch).

A group map says which agents share a group: ``{"agents": ["agent_0", "agent_1"]}``. Data of one group is
stacked along an agent dimension, so agents of one group must share their specs.

>>> MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(["a_0", "a_1"])
{'agents': ['a_0', 'a_1']}
>>> default_group_map(["adversary_0", "agent_0", "agent_1"], signatures=["s1", "s2", "s2"])
{'adversary': ['adversary_0'], 'agent': ['agent_0', 'agent_1']}
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from enum import Enum

__all__ = ["GroupMap", "MarlGroupMapType", "RESERVED_GROUP_NAMES", "check_marl_grouping", "default_group_map"]

GroupMap = dict[str, list[str]]

#: Root keys of every environment's data; a group of the same name would overwrite them.
RESERVED_GROUP_NAMES = frozenset({"done", "terminated", "truncated", "_reset", "next"})

_INDEXED_NAME = re.compile(r"^(?P<prefix>.+)_(?P<index>\d+)$")


class MarlGroupMapType(Enum):
    """Ready-made grouping strategies."""

    ALL_IN_ONE_GROUP = 1
    ONE_GROUP_PER_AGENT = 2

    def get_group_map(self, agent_names: Sequence[str]) -> GroupMap:
        """Return the group map this strategy gives for ``agent_names``."""
        names = list(agent_names)
        if self is MarlGroupMapType.ALL_IN_ONE_GROUP:
            return {"agents": names}
        return {name: [name] for name in names}

    @classmethod
    def coerce(cls, value: object) -> object:
        """``value`` as our member when it is a strategy of the same name from another library (TorchRL's
        ``torchrl.envs.utils.MarlGroupMapType``, so that code written for TorchRL keeps working); anything else
        unchanged.

        >>> class Other(Enum):
        ...     ONE_GROUP_PER_AGENT = 2
        >>> type(Other.ONE_GROUP_PER_AGENT).__name__ = "MarlGroupMapType"
        >>> MarlGroupMapType.coerce(Other.ONE_GROUP_PER_AGENT)
        <MarlGroupMapType.ONE_GROUP_PER_AGENT: 2>
        """
        if isinstance(value, Enum) and type(value).__name__ == cls.__name__ and value.name in cls.__members__:
            return cls[value.name]
        return value


def check_marl_grouping(group_map: GroupMap, agent_names: Sequence[str]) -> None:
    """Validate ``group_map`` against the environment's ``agent_names``.

    Raises:
        ValueError: no agents, duplicate agent names, more groups than agents, a group name that is not a
            non-empty string or clashes with a root key, an empty group, an unknown agent, an agent placed
            twice, or an agent in no group. The message names the culprit.
    """
    agent_names = list(agent_names)
    if not agent_names:
        raise ValueError("No agents passed: the environment must have at least one agent")
    seen_names: set[str] = set()
    for name in agent_names:
        if name in seen_names:
            raise ValueError(f"There are agents with the same name: {name!r} appears more than once in {agent_names}")
        seen_names.add(name)
    if not isinstance(group_map, dict):
        raise ValueError(
            f"group_map must be a dict mapping group names to lists of agent names, got {type(group_map).__name__}"
        )
    if len(group_map) > len(agent_names):
        raise ValueError(
            f"Number of groups {len(group_map)} greater than number of agents {len(agent_names)}: "
            f"every group needs at least one agent"
        )
    placed: dict[str, str] = {}
    for group, members in group_map.items():
        if not isinstance(group, str) or not group:
            raise ValueError(f"Group name {group!r} is not a non-empty string; name groups like 'agents'")
        if group in RESERVED_GROUP_NAMES:
            raise ValueError(
                f"Group name {group!r} clashes with a root key ({', '.join(sorted(RESERVED_GROUP_NAMES))}); "
                f"rename the group"
            )
        if isinstance(members, str) or not isinstance(members, Sequence):
            raise ValueError(f"Group {group} must be a list of agent names, got {members!r}")
        if len(members) == 0:
            raise ValueError(f"Group {group} is empty: every group needs at least one agent")
        for agent in members:
            if agent not in seen_names:
                raise ValueError(
                    f"Agent {agent} wasn't present in environment (group {group!r}); agents are {agent_names}"
                )
            if agent in placed:
                raise ValueError(
                    f"Agent {agent} present more than once: in group {placed[agent]!r} and group {group!r}"
                )
            placed[agent] = group
    for agent in agent_names:
        if agent not in placed:
            raise ValueError(f"Agent {agent} wasn't found in any group; add it to one of {list(group_map)}")


def default_group_map(
    agent_names: Sequence[str], signatures: Sequence[Hashable] | Mapping[str, Hashable] | None = None
) -> GroupMap:
    """The one default grouping every backend uses.

    Args:
        agent_names: the environment's agents, in environment order.
        signatures: one hashable per agent describing its specs (agents with equal signatures can share a
            group), in ``agent_names`` order or as a mapping ``{agent: signature}``. ``None`` means all agents
            look alike.

    Returns:
        ``{"agents": all}`` when every agent has the same signature. Otherwise agents are grouped by name
        prefix (``adversary_0`` -> ``adversary``); an agent whose name has no ``_<int>`` suffix gets its own
        group, and a prefix group whose members still differ in signature is split into one group per agent.
        Groups keep the environment's agent order.
    """
    names = list(agent_names)
    if signatures is None:
        signatures = [None] * len(names)
    elif isinstance(signatures, Mapping):
        missing, unknown = [n for n in names if n not in signatures], [k for k in signatures if k not in names]
        if missing or unknown:
            raise ValueError(
                f"signatures maps agents to signatures, but agents {missing} have none and {unknown} are not among "
                f"the agents {names}; give one signature per agent"
            )
        signatures = [signatures[n] for n in names]
    elif isinstance(signatures, (str, bytes)) or not isinstance(signatures, Sequence):
        raise TypeError(
            f"signatures must be a sequence with one signature per agent (in agent_names order) or a mapping "
            f"{{agent: signature}}, got {type(signatures).__name__} {signatures!r}"
        )
    signatures = list(signatures)
    if len(signatures) != len(names):
        raise ValueError(f"got {len(signatures)} signatures for {len(names)} agents; pass one per agent")
    if len(set(signatures)) <= 1:
        return {"agents": names}
    by_prefix: GroupMap = {}
    for name in names:
        match = _INDEXED_NAME.match(name)
        by_prefix.setdefault(match["prefix"] if match else name, []).append(name)
    signature_of = dict(zip(names, signatures))
    group_map: GroupMap = {}
    for prefix, members in by_prefix.items():
        if len({signature_of[m] for m in members}) == 1:
            group_map[prefix] = members
        else:
            group_map.update({m: [m] for m in members})
    # An agent called e.g. "done" must not shadow the root key of the same name.
    return {(f"{g}_group" if g in RESERVED_GROUP_NAMES else g): m for g, m in group_map.items()}
