"""Gymnasium multi-agent envs whose spaces are per-agent tuples (Level-Based Foraging, RWARE) as PettingZoo
parallel envs, so that the PettingZoo machinery batches them (instances, worker processes, seeding).

Such an env takes a tuple of actions (one per agent) and gives a tuple of observations, a list of rewards and one
``done`` for the whole team. Agent ``k`` becomes ``agent_k``. Neither library tells a time limit from the end of
the task in its flags (both give ``truncated=False``), so each family says which it is from the env's state
(``ends``): Level-Based Foraging terminates when no food is left, RWARE only ever stops at its step limit.
"""

from __future__ import annotations

import ctypes.util
import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from pettingzoo import ParallelEnv

from .._quiet import quiet_import
from ._env import PettingZooEnv
from ._shard import BatchFacts, Buffers, Shard
from ._tasks import Task, signature_keywords

__all__ = ["Ends", "Forget", "TupleAgentsEnv", "TupleAgentsFamily", "TupleShard", "gymnasium_tasks", "raw_env"]

Ends = Callable[[Any, bool], tuple[bool, bool]]
"""``ends(env, done)`` -> ``(terminated, truncated)`` of the team after a step that returned ``done``."""
Forget = Callable[[Any], None]
"""``forget(env)``: clear what the env keeps from its last episode that its seeded reset would read."""


class TupleAgentsEnv(ParallelEnv):
    """A Gymnasium env with per-agent ``Tuple`` spaces seen through PettingZoo's parallel API.

    Args:
        env: the Gymnasium env (its ``unwrapped`` core is stepped: no checker or order wrappers in the way).
        ends: how a step's ``done`` splits into terminated and truncated (:data:`Ends`).
        forget: run before each seeded reset (:data:`Forget`), so that a seeded reset gives what a fresh env
            gives with that seed; unseeded resets follow the library as it is.
    """

    def __init__(self, env: Any, ends: Ends, forget: Forget | None = None):
        self.env = env.unwrapped
        self._ends, self._forget = ends, forget
        self.metadata = {"is_parallelizable": True, "render_modes": render_modes(self.env)}
        self.possible_agents = [f"agent_{k}" for k in range(len(self.env.action_space.spaces))]
        self.agents: list[str] = []
        self._obs_spaces = dict(zip(self.possible_agents, self.env.observation_space.spaces))
        self._act_spaces = dict(zip(self.possible_agents, self.env.action_space.spaces))
        self.render_mode = getattr(self.env, "render_mode", None)
        # RWARE's render() takes the mode as an argument (drawing in a window, "human", by default)
        self._mode_argument = "mode" in (signature_keywords(self.env.render) or {})

    def observation_space(self, agent: str) -> Any:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self._act_spaces[agent]

    def _infos(self, info: dict) -> dict[str, dict]:
        return {agent: info for agent in self.possible_agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None and self._forget is not None:
            self._forget(self.env)
        obs, info = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        return dict(zip(self.possible_agents, obs)), self._infos(info)

    def play(self, actions: Sequence[Any]) -> tuple[tuple, list, bool, bool, dict]:
        """One step of the env with every agent's action (in agent order): its observations, rewards, the team's
        ``terminated`` and ``truncated`` (by ``ends``) and its info; an ended episode leaves no agents."""
        obs, rewards, done, truncated, info = self.env.step(list(actions))
        term, trunc = self._ends(self.env, bool(done)) if done or truncated else (False, False)
        trunc = trunc or bool(truncated)
        if term or trunc:
            self.agents = []  # PettingZoo's parallel convention: an ended episode has no agents left
        return obs, rewards, term, trunc, info

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, term, trunc, info = self.play([actions[agent] for agent in self.possible_agents])
        agents = self.possible_agents
        return (dict(zip(agents, obs)), dict(zip(agents, np.asarray(rewards, dtype=np.float32).tolist())),
                dict.fromkeys(agents, term), dict.fromkeys(agents, trunc), self._infos(info))

    def state(self) -> np.ndarray:
        raise NotImplementedError(f"{type(self.env).__name__} has no global state")

    def render(self) -> Any:
        prepare_pyglet_headless()
        if self._mode_argument and self.render_mode is not None:
            return self.env.render(mode=self.render_mode)
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def render_modes(env: Any) -> list[str]:
    """The render modes of a library's env (its class or an instance): those its metadata lists, and "rgb_array"
    where its ``render`` takes the mode as an argument (Level-Based Foraging lists "human" only, yet its
    ``render(mode="rgb_array")`` returns the image)."""
    modes = list(getattr(env, "metadata", {}).get("render_modes", []))
    if "rgb_array" not in modes and "mode" in (signature_keywords(env.render) or {}):
        modes.append("rgb_array")
    return modes


def prepare_pyglet_headless() -> None:
    """Draw without a display: on a Linux machine with no ``DISPLAY`` that has EGL's library, pyglet (RWARE's and
    LBF's renderer) is told to render headless before its window module is first imported (by us or the library)."""
    if (sys.platform.startswith("linux") and not os.environ.get("DISPLAY") and "pyglet.window" not in sys.modules
            and ctypes.util.find_library("EGL") is not None):
        try:
            import pyglet
        except ImportError:
            return
        pyglet.options["headless"] = True


def raw_env(env_id: str, **kwargs: Any) -> Any:
    """The library's env of ``env_id``: its class with the registered keywords and ``kwargs`` (``gymnasium.make``
    would take some of them as its own: ``max_episode_steps``, a TimeLimit wrapper around the env rather than the
    env's own limit)."""
    registered = quiet_import("gymnasium").spec(env_id).kwargs
    return _entry_class(env_id)(**{**registered, **kwargs})


def _build(env_id: str, ends: Ends, forget: Forget | None, **kwargs: Any) -> TupleAgentsEnv:
    return TupleAgentsEnv(raw_env(env_id, **kwargs), ends, forget)


class TupleShard(Shard):
    """The shard of :class:`TupleAgentsEnv` s: a step's tuples written straight into the step arrays.

    Every agent of such an env is in its episode until the team's end, so a step needs no dict per instance: all
    rows' observations are written in one assignment per entry from the tuples the envs return, the data the generic
    path writes from the views' dicts (a test compares the two); resets go through that path."""

    def __init__(self, instances: Sequence[Any], lo: int, facts: BatchFacts, buffers: Buffers):
        super().__init__(instances, lo, facts, buffers)
        self.direct = facts.parallel and facts.state_shape is None and all(g.mask_shape is None for g in facts.groups)

    def step(self, decoded: Sequence[Sequence | None] | None = None) -> None:
        if not self.direct:
            super().step(decoded)
            return
        b, lo, hi, facts = self.buffers, self.lo, self.hi, self.facts
        actions = self._actions(decoded)
        slots = facts.slots
        played = []
        for r, view in enumerate(self.instances):
            self.current = lo + r
            played.append(view.play([actions[gi][r][j] for gi, j in slots]))
        obs, rewards, terms, truncs, infos = zip(*played)
        f = b.step
        f.clear(lo, hi)
        term, trunc = np.asarray([terms, truncs], bool)[:, :, None]  # (rows, 1) each: the team's, every agent's
        b.term[lo:hi], b.trunc[lo:hi] = term, trunc
        b.seen[lo:hi] = True
        b.live[lo:hi] = f.acting[lo:hi] = ~(term | trunc)
        f.reward[lo:hi] = rewards
        for gi, g in enumerate(facts.groups):
            for leaf, buf in zip(g.obs.leaves, f.obs[gi]):
                buf[lo:hi] = [[leaf.read(row[k]) for k in g.index] for row in obs]
            for (key, _), buf in zip(g.info, f.infos[gi]):
                for r, info in enumerate(infos):
                    if key in info:
                        buf[lo + r] = info[key]
        self._flags(f)


def _entry_class(env_id: str) -> type:
    gymnasium = quiet_import("gymnasium")
    module, _, attr = gymnasium.spec(env_id).entry_point.partition(":")
    return getattr(quiet_import(module), attr)


@functools.cache
def gymnasium_tasks(family: str, package: str, prefix: str, ends: Ends, forget: Forget | None) -> dict[str, Task]:
    """The Gymnasium ids that ``package`` registers, starting with ``prefix``, as tasks of ``family``: parallel
    only, their keywords those of the env's class, with the registered ones as defaults."""
    gymnasium = quiet_import("gymnasium")
    quiet_import(package)  # registers its ids
    ids = [env_id for env_id in gymnasium.registry if env_id.startswith(prefix)]
    found = {}
    for env_id in ids:
        spec = gymnasium.spec(env_id)

        def keywords(env_id: str = env_id, registered: dict = dict(spec.kwargs)) -> dict[str, Any] | None:
            own = signature_keywords(_entry_class(env_id))
            return None if own is None else {**own, **registered}

        found[env_id] = Task(env_id, None, functools.partial(_build, env_id, ends, forget),
                             spec.entry_point.partition(":")[0], keywords=keywords, family=family,
                             render_modes=lambda env_id=env_id: render_modes(_entry_class(env_id)))
    return found


class TupleAgentsFamily(PettingZooEnv):
    """The envs of a library of :class:`TupleAgentsEnv` s by Gymnasium id, ``num_envs`` instances batched; the
    arguments are :class:`~marl_envs.backends.pettingzoo.PettingZooEnv`'s, the task's keywords its env class's.

    A family declares ``family`` (its backend name), ``package`` (the library that registers the ids), ``prefix``
    (of its ids), ``ends`` (:data:`Ends`), ``step_limit`` (where its env keeps its time limit, and the keyword that
    sets it) and, where its seeded resets read the last episode, ``forget`` (:data:`Forget`).
    """

    package: ClassVar[str]
    prefix: ClassVar[str]
    #: the library env's attribute holding its step limit (None or 0: none), and its keyword
    step_limit: ClassVar[tuple[str, str]]
    forget: ClassVar[Forget | None] = None
    shard_class = TupleShard

    def __init_subclass__(cls, **declared: Any) -> None:
        """A family declares itself in its class statement: ``class RwareEnv(TupleAgentsFamily, family="rware",
        package="rware", prefix="rware", step_limit=("max_steps", "max_steps"))``."""
        super().__init_subclass__()
        for key, value in declared.items():
            if key not in ("family", "package", "prefix", "step_limit", "task_max_steps"):
                raise TypeError(f"{cls.__name__} declares {key!r}; a TupleAgentsFamily declares family, package, "
                                "prefix, step_limit and task_max_steps")
            setattr(cls, key, value)

    @staticmethod
    def ends(env: Any, done: bool) -> tuple[bool, bool]:
        raise NotImplementedError

    @classmethod
    def known_tasks(cls) -> dict[str, Task]:
        return gymnasium_tasks(cls.family, cls.package, cls.prefix, cls.ends, cls.forget)

    @classmethod
    def _library_horizon(cls, env: Any) -> tuple[int, str] | None:
        """The library env's step limit (``step_limit``): one env step is one step of the library's env."""
        attribute, keyword = cls.step_limit
        steps = getattr(env.env, attribute, None)
        return (steps, f"{keyword}=N") if steps else None

    @classmethod
    def listed(cls, names: Sequence[str]) -> list[str]:
        """Those of ``names`` that the installed registry has."""
        return [name for name in names if name in cls.known_tasks()]
