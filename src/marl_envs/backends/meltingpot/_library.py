"""Melting Pot as this family uses it: the import (without TensorFlow), the substrates' facts, seeded builds.

``import meltingpot`` imports its bots' policies, which import TensorFlow at module level; substrates never use it.
``substrate_module()`` imports Melting Pot with a stand-in module under the name ``tensorflow`` for the duration
of the import only: the stand-in is then removed from ``sys.modules`` (a later ``import tensorflow`` finds the real
package, or fails as it would without us), and the Melting Pot modules that bound it now forward every attribute
to the real TensorFlow, imported at first use (so a user's own Melting Pot bots still work where TensorFlow is
installed). Where TensorFlow (or Melting Pot) was imported already, nothing is replaced.

A substrate cannot be pickled: each process builds its own (``Instance``), from the substrate's configuration.
An ``Instance`` is built and reset by Melting Pot's own builder and wrappers (a reset builds the episode's dmlab2d
env anew, as ``substrate.build``'s does); a step drives that dmlab2d env itself: the discrete action vector looked
up from a table of the substrate's action set, ``advance``, and only the observations the env hands out read (the
players' own, their rewards and ``WORLD.RGB``). Melting Pot's wrappers do the same work through a dict of every
observation (the text and layer views included), lists of dicts of the players' and their reactive observables
at each step, the larger part of a small substrate's step; the data are the same (``tests/backends``
compares them with ``substrate.step``).
Seeds: Melting Pot's ``builder(..., env_seed=s)`` seeds episode ``k`` of a substrate with ``s + k``; each row of
a batch draws its ``s`` from the env's seed and its index (``row_seed``), so no two rows share a seed. Two
substrates built with one ``env_seed`` in one process still differ (measured on every substrate tried: Melting Pot
2.4.1 and dmlab2d 1.0.2 draw from a state the seed does not set), so a seeded env is not reproducible yet.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._version import installed_version

__all__ = ["ActionTable", "COLLECTIVE", "Facts", "Instance", "MAX_SEED", "build", "facts", "row_seed", "scenarios",
           "substrate_module", "substrate_names"]

#: Melting Pot's bound on a Lua seed (``builder._MAX_SEED``)
MAX_SEED = 2**31 - 1
#: the observation Melting Pot's CollectiveRewardWrapper adds to every player's: the sum of the players' rewards
COLLECTIVE = "COLLECTIVE_REWARD"
_TF = "tensorflow"


class _Absent:
    """What the stand-in gives for any attribute: a class, so that annotations (``tree.Structure[tf.Tensor]``) and
    module-level calls (``tf.executing_eagerly()``) of Melting Pot's policy modules pass at import."""


class _StandIn(types.ModuleType):
    """``tensorflow`` while Melting Pot is imported; afterwards a forwarder to the real one, imported at first use."""

    def __init__(self) -> None:
        super().__init__(_TF)
        self.importing = True

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if self.importing:
            return type(name, (_Absent,), {"__module__": _TF})
        return getattr(importlib.import_module(_TF), name)  # a Melting Pot bot's TensorFlow, at first use


@contextlib.contextmanager
def _without_tensorflow() -> Iterator[None]:
    """A stand-in ``tensorflow`` in ``sys.modules`` for the duration of the block; after it, what was there before
    (nothing, or the ``None`` that blocks the import)."""
    before = sys.modules.get(_TF, _Absent)
    if before is not None and before is not _Absent:  # the real one is imported already: Melting Pot uses it
        yield
        return
    stand_in = _StandIn()
    sys.modules[_TF] = stand_in
    try:
        yield
    finally:
        stand_in.importing = False
        if sys.modules.get(_TF) is stand_in:
            if before is _Absent:
                del sys.modules[_TF]
            else:
                sys.modules[_TF] = before


@functools.cache
def substrate_module() -> types.ModuleType:
    """``meltingpot.substrate``, imported without TensorFlow (see the module docstring)."""
    if "meltingpot.substrate" in sys.modules:
        return sys.modules["meltingpot.substrate"]
    with _without_tensorflow():
        return importlib.import_module("meltingpot.substrate")


def substrate_names() -> list[str]:
    """The installed Melting Pot's substrates."""
    return sorted(substrate_module().SUBSTRATES)


def scenarios() -> dict[str, str]:
    """The installed Melting Pot's scenarios (substrates with bots) and the substrate of each, to refuse them."""
    substrate_module()
    from meltingpot.configs import scenarios as configs

    return {name: config.substrate for name, config in configs.SCENARIO_CONFIGS.items()}


@dataclass(frozen=True)
class Facts:
    """What the parent process knows of a substrate, read from its configuration (no substrate is built)."""

    name: str
    roles: tuple[str, ...]
    observations: tuple[tuple[str, tuple[int, ...], np.dtype], ...]  # a player's (key, shape, dtype), WORLD.* out
    world: tuple[tuple[int, ...], np.dtype]  # WORLD.RGB
    num_actions: int
    episode_length: int  # maxEpisodeLengthFrames: the substrate's own time limit


def facts(name: str, roles: Sequence[str] | None = None) -> Facts:
    """The facts of substrate ``name`` played with ``roles`` (None: its default roles)."""
    config = substrate_module().get_config(name)
    roles = tuple(config.default_player_roles if roles is None else roles)
    settings = config.lab2d_settings_builder(roles=roles, config=config)
    spec = config.timestep_spec.observation
    player = [(key, tuple(spec[key].shape), np.dtype(spec[key].dtype)) for key in config.individual_observation_names]
    player.append((COLLECTIVE, (), np.dtype(np.float64)))
    world = spec["WORLD.RGB"]
    return Facts(name, roles, tuple(player), (tuple(world.shape), np.dtype(world.dtype)),
                 int(config.action_spec.num_values), int(settings["maxEpisodeLengthFrames"]))


def row_seed(seed: int, row: int) -> int:
    """The ``env_seed`` of row ``row`` of an env seeded with ``seed``: its episodes are seeded ``row_seed + k``."""
    return int(np.random.SeedSequence((seed, row)).generate_state(1)[0]) % (MAX_SEED - 2**20) + 1


def build(name: str, roles: Sequence[str], env_seed: int | None) -> Any:
    """A Melting Pot ``Substrate`` as ``substrate.build(name, roles=roles)`` builds it, its episodes seeded from
    ``env_seed`` (None: Melting Pot's random seed): ``substrate.build_substrate`` with the seed passed to
    ``builder.builder``, its one seeded step."""
    substrate_module()
    from meltingpot.utils.substrates import builder, substrate
    from meltingpot.utils.substrates.wrappers import (collective_reward_wrapper, discrete_action_wrapper,
                                                      multiplayer_wrapper, observables_wrapper)

    config = substrate_module().get_config(name)
    env = builder.builder(config.lab2d_settings_builder(roles=roles, config=config), env_seed=env_seed)
    try:
        env = observables_wrapper.ObservablesWrapper(env)
        env = multiplayer_wrapper.Wrapper(env, individual_observation_names=config.individual_observation_names,
                                          global_observation_names=config.global_observation_names)
        env = discrete_action_wrapper.Wrapper(env, action_table=config.action_set)
        return substrate.Substrate(collective_reward_wrapper.CollectiveRewardWrapper(env))
    except Exception:
        with contextlib.suppress(Exception):
            env.close()
        raise


def _lab2d(substrate: Any) -> tuple[Any, Any]:
    """The dmlab2d ``Lab2d`` of a built substrate's current episode, under Melting Pot's wrappers, and dmlab2d's
    status of a running episode (what ``advance`` returns until the episode ends)."""
    import dmlab2d

    env = substrate
    while type(env) is not dmlab2d.Environment:
        env = getattr(env, "_env", None)
        if env is None:
            raise RuntimeError(f"no dmlab2d.Environment under {type(substrate).__name__}'s wrappers: this family "
                               f"reads Melting Pot 2.4's wrapper chain (installed: dm-meltingpot "
                               f"{installed_version('dm-meltingpot')})")
    return env._env, dmlab2d.RUNNING


class ActionTable:
    """Each player's action index -> dmlab2d's discrete action vector, as Melting Pot's discrete action, multiplayer
    and dmlab2d wrappers build it: entry ``j`` (named ``"<player>.<key>"``) takes ``action_set[a][key]`` of its
    player's action ``a``."""

    def __init__(self, names: Sequence[str], action_set: Sequence[dict[str, Any]]):
        self.names = tuple(names)
        players, keys = zip(*(name.split(".", 1) for name in names))
        self.player = np.array([int(p) - 1 for p in players], dtype=np.intp)
        self.values = np.array([[action[key] for key in keys] for action in action_set], dtype=np.int32)
        self.columns = np.arange(len(names))

    def __call__(self, actions: np.ndarray) -> np.ndarray:
        return self.values[actions[self.player], self.columns]


class Instance:
    """One row's substrate, built at its first reset (seeded, or with a random seed) and built again at a seeded
    reset; an unseeded reset starts the substrate's next episode (seed ``+ 1``). A step advances the episode's
    dmlab2d env ``lab`` (the module docstring says why), whose ``observation(name)`` reads the observations
    (``"1.RGB"``, ``"2.REWARD"``, ``"WORLD.RGB"``)."""

    def __init__(self, name: str, roles: Sequence[str]):
        self.name, self.roles = name, tuple(roles)
        self.substrate: Any = None
        self.lab: Any = None  # the current episode's dmlab2d env (Melting Pot builds one at each reset)
        self.running: Any = None  # dmlab2d's status of a running episode, read once instead of at every step
        self.table: ActionTable | None = None
        self.episode_seed = 0  # the seed of the episode the next reset starts

    def reset(self, seed: int | None) -> None:
        """Start a new episode."""
        if self.substrate is None or seed is not None:
            self.close()
            self.episode_seed = int(np.random.SeedSequence().generate_state(1)[0]) % MAX_SEED if seed is None else seed
            self.substrate = build(self.name, self.roles, self.episode_seed)
        self.episode_seed += 1
        self.substrate.reset()
        self.lab, self.running = _lab2d(self.substrate)
        names = tuple(self.lab.action_discrete_names())  # their order may change from one build to the next
        if self.table is None or self.table.names != names:
            self.table = ActionTable(names, substrate_module().get_config(self.name).action_set)

    def step(self, actions: np.ndarray) -> bool:
        """Advance one step with each player's action index ``(players,)``; True where the episode ended."""
        self.lab.act_discrete(self.table(actions))
        status, _ = self.lab.advance()
        return status != self.running

    def close(self) -> None:
        if self.substrate is not None:
            self.substrate.close()
            self.substrate = self.lab = None
