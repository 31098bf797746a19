"""The name and keyword messages every part of the library shares ("did you mean"), importing nothing heavy: the
registry, the CLI's ``list`` and the backends' checks run before any library import use them without torch."""

from __future__ import annotations

import ast
import difflib
import inspect
import numbers
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ["Taken", "UnknownEnvName", "accepted_keywords", "check_kwargs", "check_name", "close_matches",
           "did_you_mean", "keyword_error", "missing_library", "shell_safe", "taken", "unknown_env", "unknown_family",
           "unknown_full_name", "unknown_name", "value_error"]


def missing_library(module: str, library: str, err: ImportError, extra: str, note: str) -> ImportError:
    """The error of ``module``, which needs ``library``, when importing it failed with ``err``: the pip extra that
    installs it, and ``note`` (what installing it changes)."""
    return ImportError(f"{module} needs {library}, which could not be imported ({err}); install it with: pip install "
                       f"'marl-envs[{extra}]' ({note})")


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> str:
    """``"; did you mean 'a' or 'b'?"`` for the candidates ``close_matches`` finds, else ``""``."""
    shown = close_matches(name, candidates, n, cutoff)
    return f"; did you mean {' or '.join(map(repr, shown))}?" if shown else ""


def close_matches(name: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The candidates ``did_you_mean`` offers for ``name``, best first, at most ``n``: those equal to it but for case
    (``smax``: ``SMAX``), those that start with it (``kuhn``: ``kuhn_poker``; three characters or more), then its
    close matches (``difflib``'s similarity of at least ``cutoff``)."""
    candidates = list(candidates)
    name = str(name)
    cased = [c for c in candidates if c.casefold() == name.casefold() and c != name]
    started = [c for c in candidates if len(name) >= 3 and c.startswith(name) and c != name]
    close = difflib.get_close_matches(name, candidates, n=n, cutoff=cutoff)
    return list(dict.fromkeys(cased + started + close))[:n]


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


def unknown_family(name: str, families: Sequence[str], nearest: Sequence[str] = ()) -> UnknownEnvName:
    """The refusal of an env name whose family (the part before its first ``/``) is none of ``families``: the name
    in a family of a close name (``vmass/balance``: ``vmas/balance``), else what the families have nearest to it
    (``nearest``: sentences from ``Backend.counterpart``), then the families."""
    family, _, rest = name.partition("/")
    # stricter than for names: meltingpot is not taken for a typo of pettingzoo
    close = [f"{match}/{rest}" for match in close_matches(family, families, n=1, cutoff=0.8)]
    if close:
        hint = f"; did you mean {close[0]!r}?"
    else:
        hint = f": marl_envs has no {family} family" + "".join(f"; {sentence}" for sentence in nearest) + ";"
    return UnknownEnvName(f"unknown env family {family!r} in {name!r}{hint} the families are {', '.join(families)} "
                          f"(marl_envs.available_backends(); marl-envs list FAMILY lists a family's envs)",
                          "env family", family, families)


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


def _parameters(factory: Callable[..., Any]) -> tuple[dict[str, inspect.Parameter], bool] | None:
    """The keywords ``factory`` names, by name, and whether it takes others too (``**kwargs``); None without a
    signature."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return None
    named = {n: p for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return named, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def accepted_keywords(factory: Callable[..., Any]) -> list[str] | None:
    """The keywords ``factory`` takes, or None when its signature cannot say (``**kwargs``, no signature)."""
    found = _parameters(factory)
    return None if found is None or found[1] else list(found[0])


def check_kwargs(owner: str, accepted: Sequence[str] | Mapping[str, Any] | Callable[..., Any] | None,
                 kwargs: Mapping[str, Any], *, env: Sequence[str] = (), kind: str = "") -> None:
    """Raise ``TypeError`` for the first keyword of ``kwargs`` not in ``accepted``, with a close match among
    ``accepted`` and ``env``; then, where ``accepted`` says the types, for the first value of a type its keyword
    does not take (``taken``, ``value_error``): every backend's keywords are checked here.

    Args:
        owner: what takes the keywords, as the message names it (``"'vmas/balance'"``, ``"VMAS scenario
            'balance'"``).
        accepted: the keywords it takes: their names; a mapping of each to its default (the type it takes, read
            by ``taken``; None or ``inspect.Parameter.empty``: not told); a callable whose signature says (their
            defaults and annotations; with ``**kwargs``, only the values of the keywords it names are checked); or
            None (no check).
        kwargs: the keywords given.
        env: the env-level keywords taken beside them (``num_envs``, ``max_steps``, ...): a typo of one of those
            lands among the backend's keywords, so the close match is looked for in both, and both are listed.
        kind: what ``accepted`` are, for the message (``"the scenario's"``); with ``env`` given.
    """
    if callable(accepted):
        found = _parameters(accepted)
        if found is None:
            return
        accepted, open_ = found
        if open_:  # the keywords it does not name are maybe right: only the values of those it names are checked
            kwargs = {key: value for key, value in kwargs.items() if key in accepted}
    if accepted is None:
        return
    for key in kwargs:
        if key not in accepted:
            raise keyword_error(owner, key, list(accepted), env=env, kind=kind)
    if isinstance(accepted, Mapping):
        for key, value in kwargs.items():
            declared = accepted[key]
            default = declared.default if isinstance(declared, inspect.Parameter) else declared
            what = taken(default, declared.annotation if isinstance(declared, inspect.Parameter) else None)
            if what is not None and not what.takes(value):
                raise value_error(owner, key, value, what, default)


class Taken(NamedTuple):
    """The values a keyword takes (``taken``): ``words`` for the message, ``types`` of the value (a bool only
    where ``types`` is ``(bool,)``), and whether None is taken too."""

    words: str
    types: tuple[type, ...]
    none: bool = False

    def takes(self, value: Any) -> bool:
        """True if ``value`` is one of these; a 0-d array (NumPy, torch, JAX) or a NumPy scalar counts as the
        Python scalar it holds."""
        if value is None:
            return self.none
        if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
            value = value.item()
        if isinstance(value, bool):
            return self.types == (bool,)
        return self.types != (bool,) and isinstance(value, self.types)


_SCALARS = {"bool": Taken("a bool (True or False)", (bool,)), "int": Taken("an int", (numbers.Integral,)),
            "float": Taken("a float (or an int)", (numbers.Real,))}


def taken(default: Any, annotation: Any = None) -> Taken | None:
    """What a keyword takes, from its annotation where that is ``int``, ``float`` or ``bool`` (``| None`` or
    ``Optional[...]`` too, also written as a string), else from its default's type: a bool default takes a bool
    only, a float default a float or an int, an int default an int (or a float: libraries write ``5`` for a mass
    of 5.0, so a float is not refused); a None default takes None too. None (anything is taken) for any other
    annotation and default (a str, a tuple, None, none)."""
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        if text.startswith("Optional[") and text.endswith("]"):
            text = f"{text[9:-1]}|None"
        parts = text.split("|")
    elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
        parts = ["None" if a is type(None) else getattr(a, "__name__", "?") for a in typing.get_args(annotation)]
    else:
        parts = [getattr(annotation, "__name__", "?")]
    names = set(parts) - {"None"}
    none = "None" in parts or default is None
    if len(names) == 1 and (name := names.pop()) in _SCALARS:
        kind = _SCALARS[name]
    elif isinstance(default, bool):
        kind = _SCALARS["bool"]
    elif isinstance(default, int):
        kind = Taken("an int", (numbers.Real,))
    elif isinstance(default, float):
        kind = _SCALARS["float"]
    else:
        return None
    return kind._replace(words=f"{kind.words} or None", none=True) if none else kind


def value_error(owner: str, key: str, value: Any, kind: Taken, default: Any = None) -> TypeError:
    """The ``TypeError`` of a value ``kind`` does not take: the value and its type, what is taken and the fix (the
    value unquoted where it is the string of one, the bool a 0 or 1 stands for, else the default)."""
    def a(name: str) -> str:
        return f"an {name}" if name[0] in "aeiou" else f"a {name}"

    try:
        unquoted = ast.literal_eval(value) if isinstance(value, str) else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        unquoted = None
    like = "" if default is None or default is inspect.Parameter.empty else f", like its default {default!r}"
    if unquoted is not None and kind.takes(unquoted):
        fix = f": pass {key}={unquoted!r}, without the quotes"
    elif kind.types == (bool,) and isinstance(value, int) and value in (0, 1):
        fix = f": pass {key}={bool(value)!r}"
    elif like:
        fix = f": pass e.g. {key}={default!r}"
    else:
        fix = f": pass {kind.words}"
    got = "" if value is None else f" ({a(type(value).__name__)})"
    return TypeError(f"{owner} got {key}={value!r}{got}; {key} takes {kind.words}{like}{fix}")


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
