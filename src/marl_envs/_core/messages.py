"""The name messages every part of the library shares ("did you mean"), importing nothing heavy: the registry
and the CLI's ``list`` use them without torch."""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterable, Sequence

__all__ = ["check_name", "did_you_mean", "shell_safe", "unknown_name"]


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> str:
    """``"; did you mean 'a' or 'b'?"`` for the candidates that start with ``name`` (``kuhn``: ``kuhn_poker``; three
    characters or more) and
    the close matches of ``name`` among ``candidates`` (``difflib``'s similarity of at least ``cutoff``), at most
    ``n``, else ``""``."""
    candidates = list(candidates)
    name = str(name)
    started = [c for c in candidates if len(name) >= 3 and c.startswith(name) and c != name]
    close = difflib.get_close_matches(name, candidates, n=n, cutoff=cutoff)
    shown = list(dict.fromkeys(started + close))[:n]
    return f"; did you mean {' or '.join(map(repr, shown))}?" if shown else ""


def unknown_name(what: str, name: str, candidates: Sequence[str], listing: str | None = None) -> ValueError:
    """``ValueError("unknown <what> 'x'; did you mean 'y'? available: ...")``.

    ``listing`` replaces the list of every candidate (e.g. a shortened one with a pointer to the full list).
    """
    shown = ", ".join(candidates) if listing is None else listing
    return ValueError(f"unknown {what} {name!r}{did_you_mean(name, candidates) or ';'} available: {shown}")


def check_name(family: str, name: str, names: list[str], unavailable: dict[str, str]) -> None:
    """Raise a ValueError for a name the family does not offer: the reason, or close matches."""
    if name in unavailable:
        raise ValueError(f"the {family} env {name!r} cannot be built here: {unavailable[name]}")
    if name not in names:
        raise unknown_name(f"{family} env", name, names)


def shell_safe(name: str, what: str = "env") -> str:
    """``name`` with the agents' joint counts of a split robot written ``9-8``, as every env name is now: the old
    ``9|8`` still builds, with a ``DeprecationWarning`` naming the new name (``|`` is a pipe in a shell)."""
    if "|" not in name:
        return name
    new = name.replace("|", "-")
    warnings.warn(f"the {what} name {name!r} is now {new!r} (a '|' in a name is a pipe in a shell); the old name "
                  f"will be removed", DeprecationWarning, stacklevel=3)
    return new
