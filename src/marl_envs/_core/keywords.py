"""The keywords a library's env takes where its signature cannot say (``**kwargs``): a declaration shipped in the
package, never read from the library's source at run time.

VMAS scenarios read their keywords out of ``**kwargs`` (``kwargs.pop("n_agents", 3)``); JaxMARL's, Brax's and
Jumanji's env classes pass ``**kwargs`` on to their bases. A keyword they do not read is dropped (VMAS only warns),
so a typo would go unnoticed: the backends check the keywords given against this declaration, and
``marl-envs info NAME`` lists them with their defaults.

``keywords_snapshot.json`` holds, per backend, ``{"versions": Stamp, "envs": {env: {keyword: default}}}``: the
keywords of each env in the library's order, each default the repr of a constant (None where the source gives
none), an env None where its keywords cannot be told (it passes them on to a function by an expression). The
versions are the ``names.stamp`` of the backend's extra. ``python scripts/snapshot_keywords.py`` reads the
libraries' source and rewrites it; ``tests/test_keywords.py`` fails when it differs from what the installed
versions declare.

Where the installed versions are not the snapshot's, the keywords are unknown: ``declared`` warns once per backend
and process, naming the versions and the fix, and the env is built without the check.
"""

from __future__ import annotations

import ast
import functools
import json
import warnings
from pathlib import Path

from . import names
from .._version import installed_version

__all__ = ["SNAPSHOT_FILE", "Keywords", "declared", "defaults", "installed", "snapshot"]

#: The declaration shipped in the package: ``{backend: {"versions": Stamp, "envs": {env: Keywords | None}}}``.
SNAPSHOT_FILE = Path(__file__).with_name("keywords_snapshot.json")

Keywords = dict[str, str | None]
"""Keyword -> the repr of its default, None where it has none or the source does not give a constant."""

_INSTALLED: dict[str, dict[str, Keywords | None] | None] = {}  # backend -> its envs here (None: not declared)


@functools.cache
def snapshot() -> dict[str, dict]:
    """``keywords_snapshot.json``, read when first needed (``import marl_envs`` does not read it)."""
    return json.loads(SNAPSHOT_FILE.read_text())


def _versions(backend: str, entry: dict | None) -> names.Stamp | None:
    """The installed versions of what ``backend``'s extra installs; without marl-envs' metadata (a source tree),
    those of the distributions the snapshot's entry names."""
    from ..registry import backend_record  # when called: the registry imports the backends' records

    versions = names.stamp(backend_record(backend).extra)
    if versions is None and entry is not None:
        versions = {distribution: installed_version(distribution) for distribution in entry["versions"]}
    return versions


def installed(backend: str) -> dict[str, Keywords | None] | None:
    """``backend``'s declared envs for the installed versions; None, after a warning (once per backend and
    process), where the snapshot holds other versions or none."""
    if backend not in _INSTALLED:
        entry = snapshot().get(backend)
        versions = _versions(backend, entry)
        if entry is not None and entry["versions"] == versions:
            _INSTALLED[backend] = entry["envs"]
        else:
            _INSTALLED[backend] = None
            shipped = "none" if entry is None else entry["versions"]
            warnings.warn(
                f"marl_envs has no keyword declaration for the installed {backend} ({versions}; it ships one for "
                f"{shipped}): the keywords given to {backend}'s envs are not checked against a declaration in this "
                f"process (a misspelled one may be ignored by {backend}) and marl-envs info does not list them. Declare "
                f"them for these versions: python scripts/snapshot_keywords.py (in a marl-envs checkout)",
                UserWarning, stacklevel=3)
    return _INSTALLED[backend]


def declared(backend: str, env: str) -> Keywords | None:
    """The keywords ``backend``'s library takes for ``env`` with their defaults; None where they are not known (the
    installed versions are not declared: ``installed`` warns; the env is not declared, or its keywords cannot be
    told): the caller builds the env without the check."""
    envs = installed(backend)
    return None if envs is None else envs.get(env)


def defaults(keywords: Keywords | None) -> dict[str, object] | None:
    """``keywords`` (``declared``'s) with each default read back as a value (``"3"`` -> ``3``; None where the source
    gives none): what ``marl_envs._core.messages.check_kwargs`` reads the type each keyword takes from."""
    if keywords is None:
        return None
    return {name: None if default is None else ast.literal_eval(default) for name, default in keywords.items()}
