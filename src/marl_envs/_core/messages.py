"""The name and keyword messages every part of the library shares ("did you mean"), importing nothing heavy: the
registry, the CLI's ``list`` and the backends' checks run before any library import use them without torch."""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["UnknownEnvName", "accepted_keywords", "check_kwargs", "check_name", "close_matches", "did_you_mean",
           "keyword_error", "missing_library", "shell_safe", "unknown_env", "unknown_full_name", "unknown_name"]


def missing_library(module: str, library: str, err: ImportError, extra: str, note: str) -> ImportError:
    """The error of ``module``, which needs ``library``, when importing it failed with ``err``: the pip extra that
    installs it, and ``note`` (what installing it changes)."""
    return ImportError(f"{module} needs {library}, which could not be imported ({err}); install it with: pip install "
                       f"'marl-envs[{extra}]' ({note})")


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> str:
    """``"; did you mean 'a' or 'b'?"`` for the candidates that start with ``name`` (``kuhn``: ``kuhn_poker``; three
    characters or more) and
    the close matches of ``name`` among ``candidates`` (``difflib``'s similarity of at least ``cutoff``), at most
    ``n``, else ``""``."""
    shown = close_matches(name, candidates, n, cutoff)
    return f"; did you mean {' or '.join(map(repr, shown))}?" if shown else ""


def close_matches(name: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The candidates ``did_you_mean`` offers for ``name``, best first."""
    candidates = list(candidates)
    name = str(name)
    started = [c for c in candidates if len(name) >= 3 and c.startswith(name) and c != name]
    close = difflib.get_close_matches(name, candidates, n=n, cutoff=cutoff)
    return list(dict.fromkeys(started + close))[:n]


def unknown_name(what: str, name: str, candidates: Sequence[str], listing: str | None = None) -> ValueError:
    """``ValueError("unknown <what> 'x'; did you mean 'y'? available: ...")``.

    ``listing`` replaces the list of every candidate (e.g. a shortened one with a pointer to the full list).
    """
    shown = ", ".join(candidates) if listing is None else listing
    return ValueError(f"unknown {what} {name!r}{did_you_mean(name, candidates) or ';'} available: {shown}")


class UnknownEnvName(ValueError):
    """An env name its backend does not build (``unknown_env``). ``what``, ``name`` and ``candidates`` are the
    backend's terms (``"VMAS scenario"``, ``"navigatoin"``, its scenario names): ``marl_envs.make`` says it again with
    the names it takes (``'vmas/navigation'``)."""

    def __init__(self, message: str, what: str = "env", name: str = "", candidates: Sequence[str] = ()):
        super().__init__(message)
        self.what, self.name, self.candidates = what, name, list(candidates)


def unknown_env(what: str, name: str, candidates: Sequence[str], listing: str | None = None) -> UnknownEnvName:
    """``unknown_name`` for the name of an env, as a backend refuses it (``"VMAS scenario"``, ``"Brax env"``): the one
    refusal of an unknown env name, whether the env class was reached through ``make`` or built directly."""
    return UnknownEnvName(unknown_name(what, name, candidates, listing).args[0], what, name, candidates)


def unknown_full_name(backend: str, name: str, error: UnknownEnvName, everything: str) -> UnknownEnvName:
    """``error`` (a backend's refusal of its own name) said with the names ``make`` takes: ``name`` as asked for,
    the close matches (found among the backend's own names) and a short listing, prefixed with ``backend/``, then
    where ``everything`` is listed."""
    full = [f"{backend}/{candidate}" for candidate in error.candidates]
    close = [f"{backend}/{candidate}" for candidate in close_matches(error.name, error.candidates)]
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ";"
    shown = ", ".join(full[:12]) + (", ..." if len(full) > 12 else "")
    return UnknownEnvName(f"unknown {error.what} {name!r}{hint} available: {shown} ({everything} lists them all)",
                          error.what, name, full)


def check_name(family: str, name: str, names: list[str], unavailable: dict[str, str]) -> None:
    """Raise a ValueError for a name the family does not offer: the reason, or close matches."""
    if name in unavailable:
        raise ValueError(f"the {family} env {name!r} cannot be built here: {unavailable[name]}")
    if name not in names:
        raise unknown_env(f"{family} env", name, names)


def shell_safe(name: str, what: str = "env") -> str:
    """``name`` with the agents' joint counts of a split robot written ``9-8``, as every env name is now: the old
    ``9|8`` still builds, with a ``DeprecationWarning`` naming the new name (``|`` is a pipe in a shell)."""
    if "|" not in name:
        return name
    new = name.replace("|", "-")
    warnings.warn(f"the {what} name {name!r} is now {new!r} (a '|' in a name is a pipe in a shell); the old name "
                  f"will be removed", DeprecationWarning, stacklevel=3)
    return new


def accepted_keywords(factory: Callable[..., Any]) -> list[str] | None:
    """The keywords ``factory`` takes, or None when its signature cannot say (``**kwargs``, no signature)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return [n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]


def check_kwargs(owner: str, accepted: Sequence[str] | Callable[..., Any] | None, kwargs: Mapping[str, Any], *,
                 env: Sequence[str] = (), kind: str = "") -> None:
    """Raise ``TypeError`` for the first keyword of ``kwargs`` not in ``accepted``, with a close match among
    ``accepted`` and ``env``.

    Args:
        owner: what takes the keywords, as the message names it (``"'vmas/balance'"``, ``"VMAS scenario
            'balance'"``).
        accepted: the keywords it takes, or a callable whose signature says (no check if it has ``**kwargs``),
            or None (no check).
        kwargs: the keywords given.
        env: the env-level keywords taken beside them (``num_envs``, ``max_steps``, ...): a typo of one of those
            lands among the backend's keywords, so the close match is looked for in both, and both are listed.
        kind: what ``accepted`` are, for the message (``"the scenario's"``); with ``env`` given.
    """
    if callable(accepted):
        accepted = accepted_keywords(accepted)
    if accepted is None:
        return
    for key in kwargs:
        if key not in accepted:
            raise keyword_error(owner, key, list(accepted), env=env, kind=kind)


def keyword_error(owner: str, key: str, accepted: Sequence[str], *, env: Sequence[str] = (),
                  kind: str = "") -> TypeError:
    """The ``TypeError`` of a keyword ``owner`` does not take: the close match among ``env`` and ``accepted``,
    then both lists."""
    # stricter than for names: a keyword of another scenario (n_agents) is not taken for an env keyword's typo
    hint = did_you_mean(key, [name for name in (*env, *accepted) if name != key], n=1, cutoff=0.7) or ";"
    if not env:
        return TypeError(f"{owner} got an unexpected keyword argument {key!r}{hint} it accepts {list(accepted)}")
    return TypeError(f"{owner} got an unexpected keyword argument {key!r}{hint} it accepts the env keywords "
                     f"{list(env)} and {kind or 'its own'} keywords {list(accepted)}")
