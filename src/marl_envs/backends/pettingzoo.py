"""PettingZoo backend: ``num_envs`` PettingZoo instances, parallel or turn-based (AEC), behind one batch dim.

>>> import marl_envs
>>> env = marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, N=3, seed=0)
>>> env.reset()["agents", "observation"].shape
torch.Size([2, 3, 18])

PettingZoo is Python, so a step loops over the instances; each instance's results are written into numpy
buffers that become tensors once per step (``torch.from_numpy``, no per-agent tensors).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from groupings import GroupMap, MarlGroupMapType, default_group_map

from .._env import EnvBase
from ..specs import Binary, Composite, Unbounded
from ._pettingzoo_spaces import ACTION_MASK, ActionCodec, ObsLayout, obs_layout, signature, stacked_spec
from ._pettingzoo_tasks import quiet_import, resolve_task, tasks

__all__ = ["PettingZooEnv", "PettingZooWrapper", "benchmark", "env_names", "make_env"]

Factory = Callable[[], Any]


def env_names() -> list[str]:
    """Every PettingZoo task that builds here (``"mpe/simple_spread_v3"``, ``"classic/tictactoe_v3"``, ...)."""
    return list(tasks())


def make_env(name: str, **kwargs: Any) -> PettingZooEnv:
    """``PettingZooEnv(name, **kwargs)``; turn-based games default to ``parallel=False, use_mask=True``."""
    task = resolve_task(name)
    if task.parallel is None:
        kwargs.setdefault("parallel", False)
    if not kwargs.get("parallel", True):
        kwargs.setdefault("use_mask", True)
    return PettingZooEnv(task.name, **kwargs)


@dataclass(frozen=True)
class _Group:
    """Static facts of one group: its agents (and their positions in ``possible_agents``) and layouts."""

    name: str
    agents: tuple[str, ...]
    index: np.ndarray
    obs: ObsLayout
    mask_from_info: bool  # the action mask comes from the infos (else from the observation, if any)
    mask_shape: tuple[int, ...] | None
    info: tuple[tuple[str, tuple[int, ...]], ...]  # (key, shape) of the numeric infos
    codec: ActionCodec


def _numeric_infos(info: dict) -> dict[str, tuple[int, ...]]:
    out = {}
    for key, value in info.items():
        array = np.asarray(value)
        if key != ACTION_MASK and array.dtype.kind in "biuf":
            out[key] = array.shape
    return out


def _nest(flat: dict[tuple[str, ...], Any]) -> dict:
    out: dict = {}
    for key, value in flat.items():
        node = out
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = value
    return out


class PettingZooWrapper(EnvBase):
    """Batch ``num_envs`` instances of a PettingZoo env, parallel or turn-based (AEC).

    Keys (``B = num_envs``, ``n`` agents in the group, groups from ``groupings.default_group_map``):

    ================================================ ======================================================= ================================ ============
    key                                              shape                                                   dtype                            when
    ================================================ ======================================================= ================================ ============
    ``(group, "observation")`` (nested for ``Dict``) ``(B, n, *obs)``                                        float32 (int/bool kept)          always
    ``(group, "action")``                            ``(B, n)``, one-hot ``(B, n, k)``, box ``(B, n, *box)`` int64 / float32                  always
    ``("next", group, "reward")``                    ``(B, n, 1)``                                           float32                          always
    ``(group, "done" / "terminated" / "truncated")`` ``(B, n, 1)``                                           bool                             always
    ``(group, "action_mask")``                       ``(B, n, k)``                                           bool                             the env has action masks
    ``(group, "mask")``                              ``(B, n, 1)``                                           bool                             ``use_mask=True``
    ``(group, "info", key)``                         ``(B, n, *)``                                           float32                          numeric infos (after a reset and a step)
    ``"state"``                                      ``(B, *state)``                                         float32 (int states keep theirs) ``return_state=True``
    ================================================ ======================================================= ================================ ============

    The root ``done``/``terminated``/``truncated`` aggregate the agents': ``any`` for parallel envs, ``all``
    for AEC ones (``done_on_any`` overrides; with ``all``, ``truncated`` is "all done but not all terminated").
    ``mask`` is True for agents alive in a parallel env and for the acting agent of an AEC env. Agents that
    leave (dead agents) keep zeros, zero rewards and their last end flags. ``action_mask`` is the env's for
    acting agents and all True for the others. An AEC step applies only the acting agent's action (``None``
    if that agent is done, as PettingZoo asks) and reports every agent's reward of that step.

    Args:
        env: a built PettingZoo ``ParallelEnv``/``AECEnv`` (then ``num_envs`` must be 1) or a zero-argument
            factory building one (any ``num_envs``).
        num_envs: instances stepped together.
        return_state: put ``env.state()`` at the root ``"state"``.
        group_map: a dict or ``MarlGroupMapType``; ``None`` uses ``groupings.default_group_map``.
        use_mask: add ``(group, "mask")`` and allow dead agents; required for AEC envs.
        categorical_actions: discrete actions as indices (``True``) or one-hot vectors.
        done_on_any: root done when any agent is done (``True``) or all are; ``None``: any for parallel envs.
        max_steps: truncate every episode after this many steps (on top of the env's own ``max_cycles``).
        seed: if given, ``set_seed(seed)``.
        device: device of every tensor.

    Raises:
        TypeError: ``env`` is neither a PettingZoo env nor a factory of one; an unsupported space.
        ValueError: a built env with ``num_envs > 1``; an AEC env without ``use_mask``; a ``group_map`` grouping
            agents whose specs differ; ``return_state`` for an env without a state.
    """

    def __init__(self, env: Any | Factory, *, num_envs: int = 1, return_state: bool = False,
                 group_map: GroupMap | MarlGroupMapType | None = None, use_mask: bool = False,
                 categorical_actions: bool = True, done_on_any: bool | None = None, max_steps: int | None = None,
                 seed: int | None = None, device: torch.device | str = "cpu"):
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps)
        pettingzoo = quiet_import("pettingzoo")
        self._envs = self._instances(env, num_envs, (pettingzoo.AECEnv, pettingzoo.ParallelEnv))
        first = self._envs[0]
        self.parallel = isinstance(first, pettingzoo.ParallelEnv)
        if not self.parallel and not use_mask:
            raise ValueError(
                f"turn-based (AEC) PettingZoo envs need use_mask=True, so that (group, 'mask') says which agent "
                f"acts; got use_mask=False for {type(first).__name__}"
            )
        self.use_mask = bool(use_mask)
        self.done_on_any = self.parallel if done_on_any is None else bool(done_on_any)
        self.return_state = bool(return_state)
        self.categorical_actions = bool(categorical_actions)
        self._agents = list(first.possible_agents)
        self._position = {agent: k for k, agent in enumerate(self._agents)}
        self.agent_names = self._agents
        self._seeds: list[int | None] = [None] * num_envs

        self._groups = self._build_groups(group_map, self._probe_infos(first))
        self._slot = {agent: (gi, j) for gi, g in enumerate(self._groups) for j, agent in enumerate(g.agents)}
        self._slots = [self._slot[agent] for agent in self._agents]
        self._state_dtype = self._state_shape = None
        if self.return_state:
            state = self._state_of(first)
            self._state_shape, self._state_dtype = state.shape, (np.float32 if state.dtype.kind == "f" else state.dtype)
        self._build_specs()

        B, N = num_envs, len(self._agents)
        self._term = np.zeros((B, N), dtype=bool)  # each agent's last end flags, kept once it has left
        self._trunc = np.zeros((B, N), dtype=bool)
        self._seen = np.zeros((B, N), dtype=bool)  # the agent has been in this episode
        if seed is not None:
            self.set_seed(seed)

    # ------------------------------------------------------------------------------------------------
    # Construction
    # ------------------------------------------------------------------------------------------------
    @staticmethod
    def _instances(env: Any, num_envs: int, kinds: tuple[type, ...]) -> list[Any]:
        if isinstance(env, kinds):
            if num_envs != 1:
                raise ValueError(
                    f"a built PettingZoo env backs num_envs=1 only, got num_envs={num_envs}; pass a zero-argument "
                    f"factory instead, e.g. PettingZooWrapper(lambda: simple_spread_v3.parallel_env(), "
                    f"num_envs={num_envs})"
                )
            return [env]
        if not callable(env):
            raise TypeError(
                f"env must be a PettingZoo ParallelEnv/AECEnv or a zero-argument factory of one, got {env!r}"
            )
        instances = [env() for _ in range(num_envs)]
        for i, instance in enumerate(instances):
            if not isinstance(instance, kinds):
                raise TypeError(f"the env factory returned {instance!r} (instance {i}); expected a PettingZoo "
                                f"ParallelEnv or AECEnv")
            if type(instance) is not type(instances[0]) or instance.possible_agents != instances[0].possible_agents:
                raise ValueError(f"the env factory built different envs: instance {i} has agents "
                                 f"{instance.possible_agents}, instance 0 {instances[0].possible_agents}")
        return instances

    def _build_groups(self, group_map: GroupMap | MarlGroupMapType | None, infos: dict) -> list[_Group]:
        env = self._envs[0]
        layouts, masks, info_keys, signatures = {}, {}, {}, {}
        for agent in self._agents:
            layout = obs_layout(env.observation_space(agent))
            agent_info = infos.get(agent, {}) or {}
            mask_shape = layout.mask_leaf.shape if layout.mask_leaf is not None else None
            if mask_shape is None and ACTION_MASK in agent_info:
                mask_shape = np.asarray(agent_info[ACTION_MASK]).shape
            layouts[agent], masks[agent], info_keys[agent] = layout, mask_shape, _numeric_infos(agent_info)
            signatures[agent] = {
                "observation": signature(layout.space, f"agent {agent!r}'s observation"),
                "action": signature(env.action_space(agent), f"agent {agent!r}'s action"),
                "action_mask": mask_shape,
            }
        if group_map is None:
            group_map = default_group_map(self._agents, [tuple(s.values()) for s in signatures.values()])
        self.group_map = group_map  # validated by EnvBase against agent_names
        groups = []
        for name, members in self.group_map.items():
            lead = members[0]
            for other in members[1:]:
                for entry, value in signatures[lead].items():
                    if signatures[other][entry] != value:
                        raise ValueError(
                            f"group {name!r} puts agents {lead!r} and {other!r} together but their {entry} specs "
                            f"differ ({value} vs {signatures[other][entry]}); agents of one group must share specs: "
                            f"put them in different groups or pass group_map=None"
                        )
            shared = info_keys[lead]
            info = tuple((k, s) for k, s in shared.items() if all(info_keys[m].get(k) == s for m in members))
            groups.append(_Group(
                name=name, agents=tuple(members), index=np.array([self._position[m] for m in members]),
                obs=layouts[lead], mask_from_info=layouts[lead].mask_leaf is None and masks[lead] is not None,
                mask_shape=masks[lead], info=info,
                codec=ActionCodec(env.action_space(lead), self.categorical_actions),
            ))
        return groups

    def _build_specs(self) -> None:
        env, B, device = self._envs[0], self.num_envs, self.device
        obs, act, rew, done = {}, {}, {}, {}
        for g in self._groups:
            n, batch = len(g.agents), (B, len(g.agents))
            entries: dict[str, Any] = {
                "observation": stacked_spec([obs_layout(env.observation_space(a)).space for a in g.agents], B, device)
            }
            if g.mask_shape is not None:
                entries[ACTION_MASK] = Binary((*batch, *g.mask_shape), device=device)
            if self.use_mask:
                entries["mask"] = Binary((*batch, 1), device=device)
            if g.info:
                entries["info"] = Composite({k: Unbounded((*batch, *s), device=device) for k, s in g.info},
                                            shape=batch, device=device)
            obs[g.name] = Composite(entries, shape=batch, device=device)
            act[g.name] = Composite(
                action=stacked_spec([env.action_space(a) for a in g.agents], B, device, action=True,
                                    categorical=self.categorical_actions),
                shape=batch, device=device,
            )
            rew[g.name] = Composite(reward=Unbounded((*batch, 1), device=device), shape=batch, device=device)
            done[g.name] = Composite({k: Binary((B, n, 1), device=device) for k in ("done", "terminated", "truncated")},
                                     shape=batch, device=device)
        if self.return_state:
            obs["state"] = Unbounded((B, *self._state_shape), dtype=torch.from_numpy(
                np.zeros(0, self._state_dtype)).dtype, device=device)
        self.full_observation_spec = Composite(obs, shape=(B,), device=device)
        self.full_action_spec = Composite(act, shape=(B,), device=device)
        self.full_reward_spec = Composite(rew, shape=(B,), device=device)
        self.full_done_spec = Composite(done, shape=(B,), device=device)

    def _state_of(self, env: Any) -> np.ndarray:
        try:
            return np.asarray(env.state())
        except (NotImplementedError, AttributeError, TypeError) as err:
            raise ValueError(
                f"{type(env).__name__} has no global state (env.state() raised {type(err).__name__}: {err}); "
                f"build it with return_state=False"
            ) from err

    # ------------------------------------------------------------------------------------------------
    # Instances: one record per reset or step, in PettingZoo's own dicts
    # ------------------------------------------------------------------------------------------------
    def _record(self, env: Any, obs: dict, rewards: dict, terms: dict, truncs: dict, infos: dict) -> tuple:
        acting = env.agents if self.parallel else ([env.agent_selection] if env.agents else [])
        return obs, rewards, terms, truncs, infos, acting, env

    def _aec_record(self, env: Any) -> tuple:
        obs = {agent: env.observe(agent) for agent in env.agents}
        return self._record(env, obs, env.rewards, env.terminations, env.truncations, env.infos)

    def _reset_instance(self, env: Any, seed: int | None) -> tuple:
        if self.parallel:
            obs, infos = env.reset(seed=seed)
            return self._record(env, obs, {}, {}, {}, infos)
        env.reset(seed=seed)
        return self._aec_record(env)

    def _probe_infos(self, env: Any) -> dict[str, dict]:
        """Each agent's infos after a reset and one random step (some envs fill their infos only in steps)."""
        obs, _, _, _, infos, acting, _ = self._reset_instance(env, None)
        merged = {agent: dict(infos.get(agent) or {}) for agent in self._agents}

        def sample(agent: str) -> Any:
            value = obs.get(agent)
            mask = value.get(ACTION_MASK) if isinstance(value, dict) else merged[agent].get(ACTION_MASK)
            return env.action_space(agent).sample(None if mask is None else np.asarray(mask, dtype=np.int8))

        if self.parallel:
            infos = env.step({agent: sample(agent) for agent in acting})[4]
        elif acting:
            env.step(sample(acting[0]))
            infos = env.infos
        for agent, info in infos.items():
            merged.setdefault(agent, {}).update(info or {})
        return merged

    def _check_can_step(self) -> None:
        """Raise before any instance steps, so that nothing is half-applied."""
        for i, env in enumerate(self._envs):
            live = env.agents
            if not live:
                raise ValueError(
                    f"env {i} has no agents left: its episode is over (done); reset it before stepping again "
                    f"(rollout and step_and_maybe_reset do)"
                )
            if self.parallel and not self.use_mask and len(live) < len(self._agents):
                gone = [a for a in self._agents if a not in live]
                raise ValueError(self._dead_message(i, gone))

    @staticmethod
    def _dead_message(i: int, gone: Sequence[str]) -> str:
        return (
            f"agents {list(gone)} of env {i} are not in the episode (dead agents); build the env with "
            f"use_mask=True to step on with them masked out (done_on_any=True ends the episode instead)"
        )

    # ------------------------------------------------------------------------------------------------
    # The backend hook
    # ------------------------------------------------------------------------------------------------
    def _set_seed(self, seed: int) -> None:
        self._seeds = [seed + i for i in range(self.num_envs)]

    def _reset(self, mask: torch.Tensor | None) -> TensorDictBase:
        rows = list(range(self.num_envs)) if mask is None else mask.nonzero().flatten().tolist()
        records = []
        for i in rows:
            seed, self._seeds[i] = self._seeds[i], None
            self._term[i] = self._trunc[i] = self._seen[i] = False
            records.append(self._reset_instance(self._envs[i], seed))
        return self._emit(rows, records, with_reward=False)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = [g.codec.decode(tensordict.get((g.name, "action"))) for g in self._groups]
        self._check_can_step()
        slot, records = self._slot, []
        for i, env in enumerate(self._envs):
            if self.parallel:
                step = {agent: actions[gi][i][j] for agent in env.agents for gi, j in (slot[agent],)}
                records.append(self._record(env, *env.step(step)))
            else:
                agent = env.agent_selection
                gi, j = slot[agent]
                env.step(None if env.terminations[agent] or env.truncations[agent] else actions[gi][i][j])
                records.append(self._aec_record(env))
        return self._emit(range(self.num_envs), records, with_reward=True)

    def _emit(self, rows: Sequence[int], records: Sequence[tuple], with_reward: bool) -> TensorDictBase:
        """The one output builder: PettingZoo's dicts of ``rows`` -> numpy buffers -> one TensorDict."""
        B, N, groups = self.num_envs, len(self._agents), self._groups
        obs = [[np.zeros((B, len(g.agents), *leaf.shape), leaf.dtype) for leaf in g.obs.leaves] for g in groups]
        infos = [[np.zeros((B, len(g.agents), *shape), np.float32) for _, shape in g.info] for g in groups]
        action_mask = [None if g.mask_shape is None else np.ones((B, len(g.agents), *g.mask_shape), bool)
                       for g in groups]
        reward = np.zeros((B, N), np.float32)
        acting = np.zeros((B, N), bool)
        term, trunc, seen = self._term, self._trunc, self._seen
        state = np.zeros((B, *self._state_shape), self._state_dtype) if self.return_state else None
        for i, (agent_obs, rewards, terms, truncs, agent_infos, live, env) in zip(rows, records):
            for agent in live:
                acting[i, self._position[agent]] = True
            for k, agent in enumerate(self._agents):
                value = agent_obs.get(agent)
                if value is None:  # not (or no longer) in the episode
                    if not self.use_mask:
                        raise ValueError(self._dead_message(i, [agent]))
                    if seen[i, k] and not (term[i, k] or trunc[i, k]):
                        term[i, k] = True  # left without saying why
                    continue
                gi, j = self._slots[k]
                g = groups[gi]
                for leaf, buf in zip(g.obs.leaves, obs[gi]):
                    buf[i, j] = leaf.read(value)
                seen[i, k] = True
                term[i, k] = terms.get(agent, False)
                trunc[i, k] = truncs.get(agent, False)
                reward[i, k] = rewards.get(agent, 0.0)
                info = agent_infos.get(agent) or {}
                for (key, _), buf in zip(g.info, infos[gi]):
                    if key in info:
                        buf[i, j] = info[key]
                if g.mask_shape is not None and acting[i, k]:
                    mask = info.get(ACTION_MASK) if g.mask_from_info else g.obs.mask_leaf.read(value)
                    if mask is not None:
                        action_mask[gi][i, j] = mask
            if state is not None:
                state[i] = self._state_of(env)
        return self._to_tensordict(obs, infos, action_mask, reward if with_reward else None, acting, state)

    def _to_tensordict(self, obs, infos, action_mask, reward, acting, state) -> TensorDictBase:
        B = self.num_envs
        term, trunc = self._term.copy(), self._trunc.copy()
        out: dict[str, Any] = {}
        for gi, g in enumerate(self._groups):
            idx = g.index
            flat = {leaf.key: torch.from_numpy(buf) for leaf, buf in zip(g.obs.leaves, obs[gi])}
            flat.update({("info", key): torch.from_numpy(buf) for (key, _), buf in zip(g.info, infos[gi])})
            if action_mask[gi] is not None:
                flat[(ACTION_MASK,)] = torch.from_numpy(action_mask[gi])
            if self.use_mask:
                flat[("mask",)] = torch.from_numpy(acting[:, idx, None])
            if reward is not None:
                flat[("reward",)] = torch.from_numpy(reward[:, idx, None])
            flat[("terminated",)] = torch.from_numpy(term[:, idx, None])
            flat[("truncated",)] = torch.from_numpy(trunc[:, idx, None])
            out[g.name] = TensorDict(_nest(flat), batch_size=(B, len(g.agents)))
        if self.done_on_any:
            root_term, root_trunc = term.any(1), trunc.any(1)
        else:  # every agent done; "terminated" if every agent terminated, else "truncated"
            root_term = term.all(1)
            root_trunc = (term | trunc).all(1) & ~root_term
        out["terminated"] = torch.from_numpy(root_term[:, None])
        out["truncated"] = torch.from_numpy(root_trunc[:, None])
        if state is not None:
            out["state"] = torch.from_numpy(state)
        td = TensorDict(out, batch_size=(B,))
        return td if self.device.type == "cpu" else td.to(self.device)

    # ------------------------------------------------------------------------------------------------
    # Extras
    # ------------------------------------------------------------------------------------------------
    @property
    def envs(self) -> list[Any]:
        """The PettingZoo instances, one per batch index."""
        return list(self._envs)

    def render(self, env_index: int = 0) -> Any:
        """``render()`` of instance ``env_index`` (build the task with ``render_mode="rgb_array"`` for frames)."""
        if not 0 <= env_index < self.num_envs:
            raise IndexError(f"env_index {env_index} out of range for num_envs={self.num_envs}")
        return self._envs[env_index].render()

    def close(self) -> None:
        for env in self._envs:
            env.close()


class PettingZooEnv(PettingZooWrapper):
    """A PettingZoo task by name, ``num_envs`` instances of it batched.

    >>> env = PettingZooEnv("mpe/simple_spread_v3", num_envs=4, N=3, seed=0)
    >>> env.group_map
    {'agents': ['agent_0', 'agent_1', 'agent_2']}

    Args:
        task: ``"<family>/<name>"`` as ``env_names()`` lists it (``"mpe/simple_spread_v3"``,
            ``"classic/tictactoe_v3"``), or the bare module name.
        parallel: use the task's parallel API; turn-based games have none: pass ``parallel=False,
            use_mask=True`` (``marl_envs.make`` does).
        **task_kwargs: the task's own keywords (``N``, ``max_cycles``, ``continuous_actions``, ``render_mode``...).

    The other arguments are :class:`PettingZooWrapper`'s.

    Raises:
        ValueError: unknown task (with close matches); ``parallel=True`` for a turn-based game.
        TypeError: a keyword the task does not take.
    """

    def __init__(self, task: str, *, num_envs: int = 1, parallel: bool = True, return_state: bool = False,
                 group_map: GroupMap | MarlGroupMapType | None = None, use_mask: bool = False,
                 categorical_actions: bool = True, done_on_any: bool | None = None, max_steps: int | None = None,
                 seed: int | None = None, device: torch.device | str = "cpu", **task_kwargs: Any):
        spec = resolve_task(task)
        if parallel and spec.parallel is None:
            raise ValueError(
                f"pettingzoo task {spec.name!r} is turn-based and has no parallel API; build it with "
                f"parallel=False, use_mask=True (marl_envs.make('pettingzoo/{spec.name}') does)"
            )
        spec.check_kwargs(task_kwargs)
        self.task = spec.name
        creator = spec.parallel if parallel else spec.aec
        super().__init__(functools.partial(creator, **task_kwargs), num_envs=num_envs, return_state=return_state,
                         group_map=group_map, use_mask=use_mask, categorical_actions=categorical_actions,
                         done_on_any=done_on_any, max_steps=max_steps, seed=seed, device=device)


# ----------------------------------------------------------------------------------------------------
# Benchmark
# ----------------------------------------------------------------------------------------------------
#: ``marl-envs bench`` default: PettingZoo instances are Python objects, one per env.
BENCH_NUM_ENVS = 8


def benchmark(name: str, *, num_envs: int, steps: int, device: str = "cpu") -> list[tuple[str, float, int]]:
    """Time ``steps`` batched steps of ours against a hand-written loop over as many PettingZoo instances.

    Both sides step the same pre-drawn random actions (parallel tasks; turn-based ones draw legal actions on
    the fly on both sides) and reset finished instances, so the difference is the wrapper's cost. The two
    run in alternating blocks of 25 steps, so that a busy machine slows both alike.

    Returns:
        ``[("marl_envs", seconds, env_steps), ("raw PettingZoo loop", seconds, env_steps)]``.
    """
    env = make_env(name, num_envs=num_envs, device=device, seed=0)
    raw = make_env(name, num_envs=num_envs, seed=0).envs  # only its PettingZoo instances are used
    keys = env.action_keys
    actions = env.full_action_spec.rand((steps,), generator=torch.Generator().manual_seed(0))  # (T, B, ...)
    drawn = {key: actions.get(key).tolist() for key in keys}  # Python values, as a raw loop holds them
    where = {agent: (key, j) for key, members in zip(keys, env.group_map.values()) for j, agent in enumerate(members)}
    rng = np.random.default_rng(0)

    def ours(td: TensorDictBase, t0: int, t1: int) -> TensorDictBase:
        for t in range(t0, t1):
            if env.parallel:
                for key in keys:
                    td.set(key, actions.get(key)[t])
            else:
                env.rand_action(td)
            td = env.step_and_maybe_reset(td)[1]
        return td

    def by_hand(t0: int, t1: int) -> None:
        for t in range(t0, t1):
            for i, instance in enumerate(raw):
                if env.parallel:
                    if not instance.agents:
                        instance.reset()
                    instance.step({a: drawn[where[a][0]][t][i][where[a][1]] for a in instance.agents})
                    continue
                if all(instance.terminations.values()) or all(instance.truncations.values()):
                    instance.reset()
                obs, _, term, trunc, info = instance.last()
                mask = obs[ACTION_MASK] if isinstance(obs, dict) and ACTION_MASK in obs else info.get(ACTION_MASK)
                instance.step(None if term or trunc else int(rng.choice(np.flatnonzero(mask))))

    td = env.reset()
    for i, instance in enumerate(raw):
        instance.reset(seed=i)
    ours_time = raw_time = 0.0
    for t0 in range(0, steps, 25):
        t1 = min(steps, t0 + 25)
        start = time.perf_counter()
        td = ours(td, t0, t1)
        middle = time.perf_counter()
        by_hand(t0, t1)
        ours_time, raw_time = ours_time + middle - start, raw_time + time.perf_counter() - middle
    env.close()
    for instance in raw:
        instance.close()
    return [("marl_envs", ours_time, steps * num_envs), ("raw PettingZoo loop", raw_time, steps * num_envs)]
