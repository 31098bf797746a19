"""Plain-text tables of an env's keys and specs (used by the CLI and the demo)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._env import EnvBase
from .specs import Bounded, Categorical, Composite, MultiCategorical, NestedKey, OneHot, TensorSpec


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


SPEC_HEADERS = ("key", "role", "shape", "dtype", "spec")
GROUP_HEADERS = ("group", "agents", "n")


def spec_rows(env: EnvBase) -> list[tuple[str, str, tuple[int, ...], str, str]]:
    """One row per key the env reads or writes: key, role, shape, dtype and spec (``SPEC_HEADERS``)."""
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
            rows.append((prefix + _key(key), role, tuple(spec.shape), str(spec.dtype).replace("torch.", ""), describe(spec)))
    return rows


def spec_table(env: EnvBase) -> str:
    """Every key the env reads or writes, with its role, shape, dtype and spec."""
    return table(SPEC_HEADERS, spec_rows(env))


def group_rows(env: EnvBase) -> list[tuple[str, str, int]]:
    """One row per group: its name, its agents and their number (``GROUP_HEADERS``)."""
    return [(g, ", ".join(m), len(m)) for g, m in env.group_map.items()]


def group_table(env: EnvBase) -> str:
    return table(GROUP_HEADERS, group_rows(env))
