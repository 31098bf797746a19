"""Plain-text tables of an env's keys and specs (used by the CLI and the demo)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch

from .._core.env import EnvBase
from ..specs import Bounded, Categorical, Composite, MultiCategorical, NestedKey, OneHot, TensorSpec


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A left-aligned text table with a header rule."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _range(values: torch.Tensor) -> str:
    lo, hi = values.min().item(), values.max().item()
    return f"{lo:g}" if lo == hi else f"{lo:g}..{hi:g}"


def describe(spec: TensorSpec) -> str:
    """A short description of a leaf spec's domain."""
    name = type(spec).__name__
    if isinstance(spec, Bounded):
        return f"{name}[{_range(spec.low)}, {_range(spec.high)}]"
    if isinstance(spec, (Categorical, OneHot)):
        return f"{name}(n={spec.n}{', masked' if spec.mask is not None else ''})"
    if isinstance(spec, MultiCategorical):
        return f"{name}(nvec={spec.nvec.reshape(-1, spec.shape[-1])[0].tolist()})"
    return name


def _key(key: NestedKey) -> str:
    return key if isinstance(key, str) else ".".join(key)


SPEC_HEADERS = ("key", "role", "shape", "dtype", "spec", "meaning")
GROUP_HEADERS = ("group", "agents", "n")
KEYWORD_HEADERS = ("keyword", "default", "taken by")

#: What an entry means, by the first part of its key below its group (``("agents", "info", "pos_rew")``: ``info``):
#: (an agent's entry, in a group; the env's entry, at the root).
MEANINGS: dict[str, tuple[str, str]] = {
    "observation": ("each agent's observation", "the observation"),
    "action": ("each agent's action, written by the policy before step()",
               "the action, written by the policy before step()"),
    "action_mask": ("the actions each agent may take now (True: allowed)", "the actions allowed now (True: allowed)"),
    "mask": ("True for the agents that act this step: alive (parallel env) or whose turn it is (turn-based env)",
             "True for the envs that act this step"),
    "reward": ("each agent's reward for the step", "the reward for the step"),
    "done": ("the agent is done: terminated or truncated", "the episode is over: terminated or truncated"),
    "terminated": ("the agent reached a terminal state (e.g. it died)", "the episode reached a terminal state"),
    "truncated": ("the agent was cut off by a time limit", "the episode was cut off by a time limit"),
    "state": ("each agent's state", "the global state (e.g. for a centralised critic)"),
    "info": ("a numeric info the backend reports per agent", "a numeric info the backend reports"),
}
#: The meaning of an entry whose name ``MEANINGS`` does not know, by the spec it is in.
ROLE_MEANINGS = {
    "observation": "returned by reset() and step()",
    "state input": "read by step() besides the action",
    "action": "written by the policy before step()",
    "reward": "returned by step()",
    "done": "an end flag",
}


def _name(env: EnvBase, key: NestedKey) -> tuple[bool, str, tuple[str, ...]]:
    """``(in a group, the entry's name below its group, the rest of its key)``."""
    parts = (key,) if isinstance(key, str) else tuple(key)
    grouped = len(parts) > 1 and parts[0] in env.group_map
    return (grouped, parts[1], parts[2:]) if grouped else (grouped, parts[0], parts[1:])


def meaning(env: EnvBase, key: NestedKey, role: str) -> str:
    """What the entry ``key`` of the spec of ``role`` means, in words (the backend's own words for it, else
    ``MEANINGS``, else ``ROLE_MEANINGS``)."""
    told = env._meanings.get(key)
    if told is not None:
        return told
    grouped, name, rest = _name(env, key)
    if name not in MEANINGS:
        return ROLE_MEANINGS[role]
    text = MEANINGS[name][0 if grouped else 1]
    return f"{text}: {'.'.join(rest)}" if rest else text


def spec_rows(env: EnvBase) -> list[tuple[str, str, tuple[int, ...], str, str, str]]:
    """One row per key the env reads or writes: key, role, shape, dtype, spec and meaning (``SPEC_HEADERS``)."""
    rows = []
    kinds: list[tuple[str, Composite, str]] = [
        ("observation", env.full_observation_spec, ""),
        ("state input", env.full_state_spec, ""),
        ("action", env.full_action_spec, ""),
        ("reward", env.full_reward_spec, "next."),
        ("done", env.full_done_spec, ""),
    ]
    for role, full, prefix in kinds:
        for key, spec in full.items(True, True):
            shown = "info" if _name(env, key)[1] == "info" else role  # infos travel with the observations
            rows.append((prefix + _key(key), shown, tuple(spec.shape), str(spec.dtype).replace("torch.", ""),
                         describe(spec), meaning(env, key, role)))
    return rows


def spec_table(env: EnvBase) -> str:
    """Every key the env reads or writes, with its role, shape, dtype, spec and meaning."""
    return table(SPEC_HEADERS, spec_rows(env))


def group_rows(env: EnvBase) -> list[tuple[str, str, int]]:
    """One row per group: its name, its agents and their number (``GROUP_HEADERS``)."""
    return [(g, _agents(m), len(m)) for g, m in env.group_map.items()]


def _agents(members: list[str], shown: int = 6) -> str:
    """The agents' names, the first few and the last of a long group (MAgent2's teams have 81)."""
    if len(members) <= shown:
        return ", ".join(members)
    return ", ".join(members[:shown - 2]) + f", ... ({len(members) - shown + 1} more), " + members[-1]


def group_table(env: EnvBase) -> str:
    """The groups and their agents; a sentence for a single-agent env (no groups: its keys are at the root)."""
    if not env.group_map:
        return "single-agent env: no groups, its keys are at the root (observation, action, reward, ...)"
    return table(GROUP_HEADERS, group_rows(env))


def keyword_rows(env: EnvBase, library: str) -> list[tuple[str, str, str]]:
    """One row per keyword ``make`` takes for the env (``KEYWORD_HEADERS``): its class's own, read from its
    ``__init__``'s signature (the keyword-only ones and those with a default: not the name ``make`` fills in), then
    its library's as the backend declares them (``env.library_keywords``), taken by ``library``; ``?`` where the
    default is not a constant (computed, or none)."""
    cls = type(env)
    rows = [(p.name, "required" if p.default is p.empty else repr(p.default), cls.__name__)
            for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
            if p.kind is p.KEYWORD_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty)]
    declared = getattr(env, "library_keywords", None) or {}
    return rows + [(name, "?" if default is None else default, library) for name, default in declared.items()]


def keyword_table(env: EnvBase, library: str) -> str:
    """Every keyword the env takes with its default (``keyword_rows``), and a line where its library's keywords
    are not declared."""
    text = table(KEYWORD_HEADERS, keyword_rows(env, library))
    if hasattr(type(env), "library_keywords") and env.library_keywords is None:
        text += (f"\n{library}'s own keywords for this env are not declared (your own class, a {library} version "
                 f"marl_envs does not declare, or keywords the library passes on unread): not listed")
    return text
