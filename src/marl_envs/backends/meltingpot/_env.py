"""``MeltingpotEnv``: ``num_envs`` copies of a Melting Pot substrate behind one batch dim."""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import numpy as np
import torch
from tensordict import TensorDictBase

from groupings import GroupMap, MarlGroupMapType

from ..._core.env import EnvBase
from ..._core.messages import unknown_env
from ..._core.tensordicts import unchecked_nested, unchecked_tensordict
from ..._core.validate import checked_keywords
from ...specs import Bounded, Categorical, Composite, OneHot, Unbounded
from .._named import NamedRepr
from ..pettingzoo import DEFAULT_TIMEOUT_S, InstanceError, PooledEnv, WorkerError, WorkerPool, shared_zeros
from ._library import Facts, Instance, facts, row_seed, scenarios, substrate_names
from ._shard import Layout, SubstrateBuffers, SubstrateShard

__all__ = ["InstanceError", "MeltingpotEnv", "WorkerError", "env_names", "row_seed"]


def env_names() -> list[str]:
    """Every substrate of the installed Melting Pot (``"clean_up"``, ``"predator_prey__open"``, ...)."""
    return substrate_names()


def _check_name(substrate: str) -> None:
    names = substrate_names()
    if substrate in names:
        return
    if substrate in scenarios():
        raise ValueError(
            f"{substrate!r} is a Melting Pot scenario: a substrate played with bots, whose TensorFlow models this "
            f"family does not install (the meltingpot extra builds Melting Pot without them); build its substrate, "
            f"{scenarios()[substrate]!r}, and train every player")
    raise unknown_env("Melting Pot substrate", substrate, names)


def _default_group_map(roles: tuple[str, ...], players: list[str]) -> dict[str, list[str]]:
    """One group per role where roles differ (``predator``, ``prey``), else ``agents``."""
    if len(set(roles)) == 1:
        return {"agents": list(players)}
    groups: dict[str, list[str]] = {}
    for role, player in zip(roles, players):
        groups.setdefault(role, []).append(player)
    return groups


class MeltingpotEnv(NamedRepr, PooledEnv, EnvBase):
    """A Melting Pot substrate by name, ``num_envs`` copies batched (``B = num_envs``, ``n`` players in the group;
    players ``player_0 ... player_{N-1}``):

    ========================================= ============================ ================================
    key                                       shape                        dtype
    ========================================= ============================ ================================
    ``(group, "observation", "RGB")``         ``(B, n, H, W, 3)``          uint8
    ``(group, "observation", KEY)``           ``(B, n, *shape)`` (``(1,)`` Melting Pot's (float64 mostly)
                                              for a scalar)
    ``(group, "observation", "COLLECTIVE_REWARD")`` ``(B, n, 1)``          float64 (the players' summed reward)
    ``(group, "action")``                     ``(B, n)``, one-hot ``(B, n, k)`` int64
    ``("next", group, "reward")``             ``(B, n, 1)``                float32
    ``"state"``                               ``(B, H, W, 3)``             uint8: ``WORLD.RGB``, the whole map
    ========================================= ============================ ================================

    Groups: one per role where the substrate's roles differ (``predator`` / ``prey``), else ``agents``. An episode
    that reaches the substrate's length (``maxEpisodeLengthFrames``, ``env.max_steps``) is *truncated*; one the
    substrate ends earlier (the one-shot matrix games) *terminated*. ``render()`` draws ``WORLD.RGB``.

    Args:
        substrate: a name of ``env_names()`` (``"clean_up"``).
        num_envs: substrates stepped together.
        roles: one role per player (``get_config(name).valid_roles``); None: the substrate's default roles.
        group_map: a dict or ``MarlGroupMapType``; None: by role (above).
        categorical_actions: actions as indices (True) or one-hot vectors.
        max_steps: truncate episodes after this many steps (at most the substrate's length, the default).
        seed: if given, ``set_seed(seed)``: row ``i``'s episodes are seeded from ``row_seed(seed, i)``, as Melting
            Pot's ``builder(..., env_seed=...)`` seeds them.
        device: device of every tensor.
        num_workers: run the substrates in that many worker processes (each a contiguous slice of the batch; Linux);
            0 steps them in this process. Results are identical either way.
        worker_timeout: with ``num_workers > 0``, the seconds a call waits for a worker (None: forever); a worker
            that dies or hangs raises a ``WorkerError``, and ``reset()`` builds it anew.

    Raises:
        ValueError: an unknown substrate (close matches), a scenario (its bots are not installed), roles the
            substrate does not have, ``num_workers`` out of range.
    """

    family: ClassVar[str] = "meltingpot"
    _library = "Melting Pot"
    _row_seed = staticmethod(row_seed)

    @checked_keywords
    def __init__(self, substrate: str, *, num_envs: int = 1, roles: list[str] | tuple[str, ...] | None = None,
                 group_map: GroupMap | MarlGroupMapType | None = None, categorical_actions: bool = True,
                 max_steps: int | None = None, seed: int | None = None, device: torch.device | str = "cpu",
                 num_workers: int = 0, worker_timeout: float | None = DEFAULT_TIMEOUT_S):
        _check_name(substrate)
        self.env_name = self.substrate = self.task = substrate
        if roles is not None:
            roles = list(roles)
            from ._library import substrate_module

            valid = substrate_module().get_config(substrate).valid_roles
            if not roles or any(role not in valid for role in roles):
                raise ValueError(f"roles={roles!r} for {substrate!r}: give one role per player, each one of "
                                 f"{sorted(valid)}")
        self.facts: Facts = facts(substrate, roles)
        length = self.facts.episode_length
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps,
                         horizon=(length, "the substrate's own episode length, maxEpisodeLengthFrames"))
        self._check_workers(num_workers, num_envs, worker_timeout)
        self.roles = self.facts.roles
        self.task_kwargs = {} if roles is None else {"roles": list(self.roles)}  #: what builds a twin of it
        self.num_workers = num_workers
        self.categorical_actions = bool(categorical_actions)
        players = [f"player_{k}" for k in range(len(self.roles))]
        if group_map is None:
            group_map = _default_group_map(self.roles, players)
        self._declare(players, group_map)
        self._layout = Layout(self.facts.observations, self.facts.world, len(players), length)
        self._buffers = SubstrateBuffers(self._layout, num_envs, shared_zeros if num_workers else np.zeros,
                                         fresh=not num_workers)
        self._own = (lambda array: array) if self._buffers.fresh else np.copy  # shared arrays are reused: copy
        make = functools.partial(Instance, substrate, self.roles)
        if num_workers:
            self._runner: SubstrateShard | WorkerPool = WorkerPool(
                make, num_envs, num_workers, self._layout, self._buffers, SubstrateShard,
                name=f"meltingpot/{substrate}", timeout=worker_timeout, library=self._library)
        else:
            self._runner = SubstrateShard([make() for _ in range(num_envs)], 0, self._layout, self._buffers)
        self._seed: int | None = None
        self._seeds: list[int | None] = [None] * num_envs  # each row's seed for its next reset
        if seed is not None:
            self.set_seed(seed)

    def _declare(self, players: list[str], group_map: GroupMap | MarlGroupMapType) -> None:
        """Each player's specs -> the groups' (by the core's grouping and stacking) and the root's."""
        device, n = self.device, self.facts.num_actions
        agent_specs = {}
        for player in players:
            obs = Composite(device=device)
            for key, shape, dtype in self.facts.observations:
                torch_dtype = torch.from_numpy(np.zeros(0, dtype)).dtype
                if dtype == np.uint8:
                    obs[key] = Bounded(0, 255, shape or (1,), dtype=torch_dtype, device=device)
                else:
                    obs[key] = Unbounded(shape or (1,), dtype=torch_dtype, device=device)
            action = Categorical(n, device=device) if self.categorical_actions else OneHot(n, device=device)
            agent_specs[player] = Composite({"observation": obs, "action": action,
                                             "reward": Unbounded((1,), device=device)}, device=device)
        groups = self._group_agents(agent_specs, group_map)
        shape = self.facts.world[0]
        self._declare_specs(groups, state=Bounded(0, 255, (self.num_envs, *shape), dtype=torch.uint8, device=device))
        position = {player: k for k, player in enumerate(players)}
        self._groups = []
        for name, members in self.group_map.items():
            index = np.array([position[m] for m in members])
            contiguous = bool((np.diff(index) == 1).all())
            if contiguous and len(members) == len(players):  # all players, in order: the arrays are the group's
                index = None
            elif contiguous:
                index = slice(int(index[0]), int(index[-1]) + 1)
            self._groups.append((name, index, len(members)))

    # -- the backend hook ----------------------------------------------------------------------------
    def _load_actions(self, tensordict: TensorDictBase) -> None:
        wire = self._buffers.actions
        for name, index, _ in self._groups:
            action = tensordict.get((name, "action"))
            if not self.categorical_actions:
                action = action.argmax(-1)
            wire[:, slice(None) if index is None else index] = action.cpu().numpy()

    def _to_tensordict(self, arrays: Any, with_reward: bool = False) -> TensorDictBase:
        """The one output builder: the arrays the shards wrote -> one TensorDict."""
        B, cpu, own = self.num_envs, torch.device("cpu"), self._own
        obs = {key: torch.from_numpy(own(array)) for key, array in arrays.obs.items()}
        reward = torch.from_numpy(own(arrays.reward)).unsqueeze(-1) if with_reward else None
        out: dict[str, Any] = {}
        for name, index, n in self._groups:
            group: dict[str, Any] = {"observation": obs if index is None else {
                key: value[:, index] for key, value in obs.items()}}
            if reward is not None:
                group["reward"] = reward if index is None else reward[:, index]
            out[name] = unchecked_nested(group, (B, n), cpu)
        out["state"] = torch.from_numpy(own(arrays.world))
        out["terminated"] = torch.from_numpy(own(arrays.term)).unsqueeze(-1)
        out["truncated"] = torch.from_numpy(own(arrays.trunc)).unsqueeze(-1)
        td = unchecked_tensordict(out, torch.Size((B,)), cpu)
        return td if self.device.type == "cpu" else td.to(self.device)

    # -- extras --------------------------------------------------------------------------------------
    def _render(self, env_index: int, **kwargs: Any) -> Any:
        """``WORLD.RGB`` of env ``env_index`` as it last stood (reset or step)."""
        if kwargs:
            raise TypeError(f"Melting Pot's render() takes no keywords, got {sorted(kwargs)}")
        frame = self._runner.render(env_index)  # EnvBase.render refuses one until the first reset
        return np.asarray(frame)
