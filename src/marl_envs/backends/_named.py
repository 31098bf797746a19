"""The ``repr`` of envs built by name: the name first, then ``EnvBase``'s fields."""

from __future__ import annotations

__all__ = ["NamedRepr"]


class NamedRepr:
    """Mixin of an env built by name (``env_name``): ``BraxEnv('ant', num_envs=8, ...)``.

    Put it before the ``EnvBase`` subclass: ``class BraxEnv(NamedRepr, BraxWrapper)``.
    """

    env_name: str

    def __repr__(self) -> str:
        cls = type(self).__name__
        return super().__repr__().replace(f"{cls}(", f"{cls}({self.env_name!r}, ", 1)
