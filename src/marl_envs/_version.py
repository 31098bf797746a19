"""The version of marl-envs: the one place it is written (pyproject.toml reads it)."""

from __future__ import annotations

__version__ = "0.1.0"


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (a pip name: ``"open-spiel"``), None if it is not installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
