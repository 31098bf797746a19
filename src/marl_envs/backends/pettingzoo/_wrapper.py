"""``PettingZooWrapper``: PettingZoo instances, parallel or turn-based (AEC), behind one batch dim."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDictBase

from groupings import GroupMap, MarlGroupMapType, default_group_map

from ..._core.agents import nest_keys
from ..._core.env import EnvBase
from ..._core.tensordicts import unchecked_nested, unchecked_tensordict
from .._quiet import quiet_import
from .._spaces import space_spec
from ..._core.validate import checked_keywords
from ...specs import Binary, Composite, Unbounded
from ._shard import BatchFacts, Buffers, StepArrays, Group, Shard, dead_message, reset_instance, root_ends, state_of
from ._spaces import ACTION_MASK, ActionCodec, obs_split
from ._tasks import EPISODE_BOUNDS, SWIG_WARNINGS
from ._workers import DEFAULT_TIMEOUT_S, PooledEnv, WorkerPool, shared_zeros

__all__ = ["PettingZooWrapper", "cycle_steps"]

Factory = Callable[[], Any]
RGB_ARRAY = "render_mode='rgb_array'"  # what render() needs the instances built with


def cycle_steps(env: Any, cycles: int) -> int:
    """The env steps of ``cycles`` cycles of the PettingZoo instance ``env``: a cycle is one step of a parallel env and
    a move of every agent in an AEC one (there an upper bound: agents that leave make the later cycles shorter)."""
    return cycles if isinstance(env, quiet_import("pettingzoo").ParallelEnv) else cycles * len(env.possible_agents)


def _numeric_infos(info: dict) -> dict[str, tuple[int, ...]]:
    arrays = {key: np.asarray(value) for key, value in info.items() if key != ACTION_MASK}
    return {key: array.shape for key, array in arrays.items() if array.dtype.kind in "biuf"}


class PettingZooWrapper(PooledEnv, EnvBase):
    """Batch ``num_envs`` instances of a PettingZoo env, parallel or turn-based (AEC).

    Keys (``B = num_envs``, ``n`` agents in the group, groups from ``groupings.default_group_map``):

    ================================================ ================= ======================= ========================
    key                                              shape             dtype                   when
    ================================================ ================= ======================= ========================
    ``(group, "observation")`` (nested for ``Dict``) ``(B, n, *obs)``  float32 (int/bool kept) always
    ``(group, "action")``                            ``(B, n)``        int64 / float32         always
    ``("next", group, "reward")``                    ``(B, n, 1)``     float32                 always
    ``(group, "done" / "terminated" / "truncated")`` ``(B, n, 1)``     bool                    always
    ``(group, "action_mask")``                       ``(B, n, k)``     bool                    the env has action masks
    ``(group, "mask")``                              ``(B, n, 1)``     bool                    ``use_mask=True``
    ``(group, "info", key)``                         ``(B, n, *)``     float32                 numeric infos (below)
    ``"state"``                                      ``(B, *state)``   float32 (int kept)      ``return_state=True``
    ================================================ ================= ======================= ========================

    The root ``done``/``terminated``/``truncated`` aggregate the agents': ``any`` for parallel envs, ``all``
    for AEC ones (``done_on_any`` overrides; with ``all``, ``truncated`` is "all done but not all terminated").
    ``mask`` is True for agents alive in a parallel env and for the acting agent of an AEC env. Agents that
    leave (dead agents) keep zeros, zero rewards and their last end flags. ``action_mask`` is the env's for
    acting agents and all True for the others. An AEC step applies only the acting agent's action (``None``
    if that agent is done, as PettingZoo asks) and reports every agent's reward of that step. Discrete actions are
    indices, or ``(B, n, k)`` one-hot with ``categorical_actions=False``; box actions are ``(B, n, *box)``. An info
    key is declared where the agents' infos hold a number after a reset and a step.

    Args:
        env: a built PettingZoo ``ParallelEnv``/``AECEnv`` (then ``num_envs`` must be 1) or a zero-argument
            factory building one (any ``num_envs``).
        num_envs: instances stepped together.
        return_state: put ``env.state()`` at the root ``"state"``.
        group_map: a dict or ``MarlGroupMapType``; ``None`` uses ``groupings.default_group_map``.
        use_mask: add ``(group, "mask")`` and allow dead agents; required for AEC envs.
        categorical_actions: discrete actions as indices (``True``) or one-hot vectors.
        done_on_any: root done when any agent is done (``True``) or all are; ``None``: any for parallel envs.
        max_steps: truncate every episode after this many steps; None: at the env's own ``max_cycles`` if it has
            one (``env.max_steps`` is then ``max_cycles``, times the number of agents in an AEC env), else never. A
            longer one than the env's own is refused: lengthen ``max_cycles`` instead.
        seed: if given, ``set_seed(seed)``.
        device: device of every tensor.
        num_workers: run the instances in that many worker processes (each a contiguous slice of the batch,
            results in shared memory; Linux), for CPU-heavy envs; 0 steps them in this process. Results are
            identical either way. A failing instance is reported with its env index and original traceback.
        worker_timeout: with ``num_workers > 0``, the seconds a step, reset or render waits for a worker before it
            counts as hung (None: forever). A worker that dies or hangs raises a :class:`WorkerError` naming it,
            its rows and the cause (a hung one is killed); ``reset()`` then builds it anew and restarts every env
            from the env's seed, as a fresh env built with that seed starts.

    Raises:
        TypeError: ``env`` is neither a PettingZoo env nor a factory of one; an unsupported space.
        ValueError: a built env with ``num_envs > 1`` or ``num_workers > 0``; an AEC env without ``use_mask``; a
            ``group_map`` grouping agents whose specs differ; ``return_state`` for an env without a state;
            ``num_workers`` not in ``[0, num_envs]``; ``worker_timeout`` not a positive number or None.
        WorkerError: a worker died while it built its instances.
    """

    _masked_actions = True  # the actions of the agents a group's "mask" leaves out are not applied
    #: group agents by name prefix even where all look alike (opposing teams: ``red_*`` and ``blue_*``)
    teams_by_prefix: ClassVar[bool] = False
    #: what steps the instances and writes their results: a family whose results can be written straight into the
    #: arrays, without PettingZoo's dicts (OpenSpiel, MAgent2, the tuple-agent envs), has its own, giving the same data
    shard_class: ClassVar[type[Shard]] = Shard

    @checked_keywords
    def __init__(self, env: Any | Factory, *, num_envs: int = 1, return_state: bool = False,
                 group_map: GroupMap | MarlGroupMapType | None = None, use_mask: bool = False,
                 categorical_actions: bool = True, done_on_any: bool | None = None, max_steps: int | None = None,
                 seed: int | None = None, device: torch.device | str = "cpu", num_workers: int = 0,
                 worker_timeout: float | None = DEFAULT_TIMEOUT_S):
        pettingzoo = quiet_import("pettingzoo", SWIG_WARNINGS)
        kinds = (pettingzoo.AECEnv, pettingzoo.ParallelEnv)
        first = env if isinstance(env, kinds) else self._build(env, 0, kinds)
        # the library's time limit, read from an instance, bounds max_steps: known before the base class sets it
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps, horizon=self._library_horizon(first))
        self._episode_bound = self._library_bound(first)
        self._check_workers(num_workers, num_envs, worker_timeout)
        if num_workers and isinstance(env, kinds):
            raise ValueError("num_workers > 0 needs a zero-argument factory of the env (each worker builds its own "
                             "instances), not a built env")
        instances = self._instances(env, first, num_envs if not num_workers else 1, kinds)  # workers build the others
        self.parallel = isinstance(first, pettingzoo.ParallelEnv)
        if not self.parallel and not use_mask:
            raise ValueError(
                f"turn-based (AEC) {self._family_title()} envs need use_mask=True, so that (group, 'mask') says which "
                f"agent acts; got use_mask=False for {type(first).__name__}"
            )
        self.use_mask = bool(use_mask)
        self.render_mode = getattr(first, "render_mode", None)  #: the instances' (``"rgb_array"`` to render)
        self._declares_render_mode = hasattr(first, "render_mode")  # else render() is asked and must give a frame
        self._render_modes = list((getattr(first, "metadata", None) or {}).get("render_modes", ["rgb_array"]))
        self.done_on_any = self.parallel if done_on_any is None else bool(done_on_any)
        self.return_state = bool(return_state)
        self.categorical_actions = bool(categorical_actions)
        self._agents = list(first.possible_agents)
        self._position = {agent: k for k, agent in enumerate(self._agents)}
        self._seeds: list[int | None] = [None] * num_envs  # each row's seed for its next reset
        self._seed: int | None = None  # the env's seed: a reset after a worker failure starts every row from it
        self.num_workers = num_workers

        infos = self._probe_infos(first)  # resets the first instance
        self._state_dtype = self._state_shape = None
        if self.return_state:
            state = state_of(first)
            self._state_shape, self._state_dtype = state.shape, (np.float32 if state.dtype.kind == "f" else state.dtype)
        self._groups = self._build_groups(group_map, infos, first)
        facts = BatchFacts(tuple(self._agents), tuple(self._groups), self.parallel, self.use_mask, self._state_shape,
                         self._state_dtype, self.done_on_any)
        # in this process, one shard writes new arrays at every step, handed to torch as they are
        self._buffers = Buffers(facts, num_envs, shared_zeros if num_workers else np.zeros, fresh=not num_workers)
        self._own = (lambda array: array) if self._buffers.fresh else np.copy  # arrays are reused: copy them
        if num_workers:
            first.close()  # a probe: the workers build the instances
            self._runner: Shard | WorkerPool = WorkerPool(env, num_envs, num_workers, facts, self._buffers,
                                                          self.shard_class, name=self._name_in_errors(),
                                                          timeout=worker_timeout, library=self._library)
        else:
            self._runner = self.shard_class(instances, 0, facts, self._buffers)
        if seed is not None:
            self.set_seed(seed)

    # -- construction ----------------------------------------------------------------------------------
    def _name_in_errors(self) -> str:
        """How the workers' errors name this env."""
        return type(self).__name__

    def _family_title(self) -> str:
        """How messages name the library of these envs (``PettingZooEnv``: its family's, ``"OpenSpiel"``)."""
        return "PettingZoo"

    def _built_with(self, keyword: str) -> str:
        """How to build these envs again with ``keyword`` (``"render_mode='rgb_array'"``), for a message's fix."""
        return f"a factory passing {keyword} to the {self._family_title()} env"

    @staticmethod
    def _build(factory: Any, i: int, kinds: tuple[type, ...]) -> Any:
        """Instance ``i``, built by ``factory`` and checked to be a PettingZoo env."""
        if not callable(factory):
            raise TypeError(
                f"env must be a PettingZoo ParallelEnv/AECEnv or a zero-argument factory of one, got {factory!r}"
            )
        instance = factory()
        if not isinstance(instance, kinds):
            raise TypeError(f"the env factory returned {instance!r} (instance {i}); expected a PettingZoo "
                            f"ParallelEnv or AECEnv")
        return instance

    def _instances(self, env: Any, first: Any, num_envs: int, kinds: tuple[type, ...]) -> list[Any]:
        """``num_envs`` instances: ``first`` and those ``env`` (a factory) builds, all of one kind."""
        if isinstance(env, kinds):
            if num_envs != 1:
                raise ValueError(
                    f"a built PettingZoo env backs num_envs=1 only, got num_envs={num_envs}; pass a zero-argument "
                    f"factory instead, e.g. PettingZooWrapper(lambda: simple_spread_v3.parallel_env(), "
                    f"num_envs={num_envs})"
                )
            return [env]
        instances = [first, *(self._build(env, i, kinds) for i in range(1, num_envs))]
        for i, instance in enumerate(instances):
            if type(instance) is not type(first) or instance.possible_agents != first.possible_agents:
                raise ValueError(f"the env factory built different envs: instance {i} has agents "
                                 f"{instance.possible_agents}, instance 0 {first.possible_agents}")
        return instances

    @staticmethod
    def _library_horizon(env: Any) -> tuple[int, str] | None:
        """The library's own time limit of instance ``env`` in env steps, and the keyword that lengthens it
        (``EnvBase``'s ``horizon``), or None: PettingZoo's ``max_cycles`` where the env keeps one."""
        raw = env.unwrapped
        for holder in (raw, getattr(raw, "env", None)):  # cooperative pong and SISL keep it in the game under it
            cycles = getattr(holder, "max_cycles", None)
            if isinstance(cycles, int) and not isinstance(cycles, bool) and cycles > 0:
                return cycle_steps(env, cycles), "max_cycles=N"
        return None

    @staticmethod
    def _library_bound(env: Any) -> int | None:
        """The most env steps an episode of instance ``env`` lasts where the game ends itself within a known number
        of moves (``EnvBase._episode_bound``; tic-tac-toe: 9), else None."""
        return EPISODE_BOUNDS.get((getattr(env, "metadata", None) or {}).get("name"))

    def _build_groups(self, group_map: GroupMap | MarlGroupMapType | None, infos: dict, env: Any) -> list[Group]:
        """Each agent's specs -> the core's grouping and stacking; then the group facts the hot path reads."""
        device = self.device
        splits, masks, info_keys, agent_specs = {}, {}, {}, {}
        for agent in self._agents:
            split = obs_split(env.observation_space(agent), where=f"agent {agent!r}'s observation")
            agent_info = infos.get(agent, {}) or {}
            mask_shape = split.mask_leaf.shape if split.mask_leaf is not None else None
            if mask_shape is None and ACTION_MASK in agent_info:
                mask_shape = np.asarray(agent_info[ACTION_MASK]).shape
            splits[agent], masks[agent], info_keys[agent] = split, mask_shape, _numeric_infos(agent_info)
            spec = Composite(device=device)
            spec["observation"] = space_spec(split.space, device, where=f"agent {agent!r}'s observation")
            spec["action"] = space_spec(env.action_space(agent), device, categorical=self.categorical_actions,
                                        where=f"agent {agent!r}'s action")
            if mask_shape is not None:
                spec[ACTION_MASK] = Binary(mask_shape, device=device)
            spec["reward"] = Unbounded((1,), device=device)
            for name in ("done", "terminated", "truncated"):
                spec[name] = Binary((1,), device=device)
            agent_specs[agent] = spec
        if group_map is None and self.teams_by_prefix:  # teams that look alike stay apart
            group_map = default_group_map(self._agents, [agent.rpartition("_")[0] for agent in self._agents])
        specs = self._group_agents(agent_specs, group_map, bounds=False)
        groups = []
        for name, members in self.group_map.items():
            lead, spec = members[0], specs[name]
            info = tuple((k, s) for k, s in info_keys[lead].items() if all(info_keys[m].get(k) == s for m in members))
            if self.use_mask:
                spec["mask"] = Binary((*spec.shape, 1), device=device)
            if info:
                spec["info"] = Composite({k: Unbounded((*spec.shape, *s), device=device) for k, s in info},
                                         shape=spec.shape, device=device)
            groups.append(Group(
                name=name, agents=tuple(members), index=np.array([self._position[m] for m in members]),
                obs=splits[lead], mask_from_info=splits[lead].mask_leaf is None and masks[lead] is not None,
                mask_shape=masks[lead], info=info,
                codec=ActionCodec(env.action_space(lead), self.categorical_actions),
            ))
        root = {}
        if self.return_state:
            root["state"] = Unbounded((self.num_envs, *self._state_shape), device=device,
                                      dtype=torch.from_numpy(np.zeros(0, self._state_dtype)).dtype)
        self._declare_specs(specs, **root)
        return groups

    # -- instances -------------------------------------------------------------------------------------
    def _probe_infos(self, env: Any) -> dict[str, dict]:
        """Each agent's infos after a reset and one random step (some envs fill their infos only in steps)."""
        obs, _, _, _, infos, acting, _ = reset_instance(env, self.parallel)
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
        live = self._buffers.live
        over = ~live.any(1)
        if over.any():
            raise ValueError(
                f"env {int(over.argmax())} has no agents left: its episode is over (done); reset it before stepping "
                f"again (rollout and step_and_maybe_reset do)"
            )
        if self.parallel and not self.use_mask and not live.all():
            i = int((~live.all(1)).argmax())
            raise ValueError(dead_message(i, [a for a, alive in zip(self._agents, live[i]) if not alive]))

    # -- the backend hook ------------------------------------------------------------------------------
    def _load_actions(self, tensordict: TensorDictBase) -> list | None:
        """Each group's actions into its wire buffer (a ``Dict`` action space's decoded values are returned
        instead: ``[gi][i][j]``, None for the other groups; None if no group has one), after checking that the
        instances can step."""
        decoded = None
        for gi, (g, wire) in enumerate(zip(self._groups, self._buffers.actions)):
            action = tensordict.get((g.name, "action"))
            if wire is not None:
                wire[:] = g.codec.wire(action)
            else:
                decoded = decoded or [None] * len(self._groups)
                decoded[gi] = g.codec.decode(action)
        self._check_can_step()
        return decoded

    def _to_tensordict(self, arrays: StepArrays, with_reward: bool = False) -> TensorDictBase:
        """The one output builder: the arrays the shards wrote -> one TensorDict (its arrays copied where they are
        reused: worker processes)."""
        B, f, cpu, own = self.num_envs, arrays, torch.device("cpu"), self._own
        term, trunc = f.term.copy(), f.trunc.copy()
        out: dict[str, Any] = {}
        for gi, g in enumerate(self._groups):
            idx = g.index
            flat = {leaf.key: torch.from_numpy(own(buf)) for leaf, buf in zip(g.obs.leaves, f.obs[gi])}
            flat.update({("info", key): torch.from_numpy(own(buf)) for (key, _), buf in zip(g.info, f.infos[gi])})
            if f.action_mask[gi] is not None:
                flat[(ACTION_MASK,)] = torch.from_numpy(own(f.action_mask[gi]))
            if self.use_mask:
                flat[("mask",)] = torch.from_numpy(f.acting[:, idx, None])
            if with_reward:
                flat[("reward",)] = torch.from_numpy(f.reward[:, idx, None])
            flat[("terminated",)] = torch.from_numpy(term[:, idx, None])
            flat[("truncated",)] = torch.from_numpy(trunc[:, idx, None])
            out[g.name] = unchecked_nested(nest_keys(flat), (B, len(g.agents)), cpu)
        root_term, root_trunc = root_ends(term, trunc, self.done_on_any)
        out["terminated"] = torch.from_numpy(root_term[:, None])
        out["truncated"] = torch.from_numpy(root_trunc[:, None])
        if f.state is not None:
            out["state"] = torch.from_numpy(own(f.state))
        td = unchecked_tensordict(out, torch.Size((B,)), cpu)  # built to fit: every step, no checks
        return td if self.device.type == "cpu" else td.to(self.device)

    # -- extras ----------------------------------------------------------------------------------------
    @property
    def envs(self) -> list[Any]:
        """The PettingZoo instances, one per batch index (``num_workers=0`` only: else they live in the workers)."""
        if not isinstance(self._runner, Shard):
            raise AttributeError("with num_workers > 0 the PettingZoo instances live in the worker processes")
        return list(self._runner.instances)

    @property
    def renders(self) -> bool:
        """Whether ``render()`` gives images: instances built with ``render_mode="rgb_array"`` (or declaring none)
        of an env that draws them."""
        asked = self.render_mode == "rgb_array" or not self._declares_render_mode
        return asked and "rgb_array" in self._render_modes

    def _render(self, env_index: int) -> Any:
        """``render()`` of instance ``env_index``: an image of instances built with ``render_mode="rgb_array"``."""
        if "rgb_array" not in self._render_modes:
            raise ValueError(f"these envs draw no images: their render modes are {self._render_modes} (no "
                             f"'rgb_array'); env.renders says so beforehand")
        frame = self._runner.render(env_index) if self.renders else None
        if frame is None:  # "human" draws in a window of its own; None: the env was not built for frames
            raise ValueError(
                f"render() draws {self._family_title()} envs built with render_mode='rgb_array'; these have "
                f"render_mode={self.render_mode!r}: build them with {self._built_with(RGB_ARRAY)}"
            )
        return frame
