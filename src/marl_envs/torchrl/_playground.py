"""TorchRL's ``MujocoPlaygroundEnv`` by name, our Playground env inside, with TorchRL's agent mappings: a split's
agents each a group of their own, without an agent dim, in any of TorchRL's homogenization modes."""

from __future__ import annotations

import copy
import re
import warnings

import torch

from groupings import MarlGroupMapType

from ._adapter import rl_specs
from ._classes import BatchSize, Device, EnvNames, JaxLibraryEnv, LibraryModule, build_env

__all__ = ["MujocoPlaygroundEnv"]


class MujocoPlaygroundEnv(JaxLibraryEnv):
    """``torchrl.envs.MujocoPlaygroundEnv``'s arguments, our Playground env inside: ``MujocoPlaygroundEnv(
    "CheetahRun", batch_size=(64,))``; ``config`` / ``config_overrides`` are the env's config entries.

    ``frame_skip=k`` (k > 1) gives TorchRL's ``FrameSkipTransform`` around it, as TorchRL's class does.
    ``agent_mapping`` splits the robot as TorchRL's does: each agent a group of its own, its entries without an
    agent dim (``td["agent_0", "observation"]``), the reward every agent's, ``done`` at the root. It is TorchRL's
    ``MujocoPlaygroundAgentMapping`` (each agent's action and observation indices, in any of TorchRL's
    ``homogenization_mode``: ``"none"``, ``"max"``, ``"concat"``), or the name of a split (``"halfcheetah_6x1"``):
    ours of that robot (``playground/CheetahRun_6x1``, derived from the model, where TorchRL's reads MABrax's
    tables: a ``UserWarning`` says so). ``_agent_mapping`` holds the split in use as TorchRL's mapping (a copy of
    the one given; for a name, ours), as TorchRL's class keeps it.

    Raises:
        ValueError: no split of ``env_name`` has the named mapping's agent layout (the splits there are named); a
            mapping's indices out of range, overlapping or missing an action.
        NotImplementedError: a mapping of a dict-observation env's entries.
    """

    available_envs = EnvNames("playground")
    lib = LibraryModule("mujoco_playground")

    def __init__(self, env_name: str, *, config=None, config_overrides: dict | None = None, agent_mapping=None,
                 batch_size: BatchSize = None, num_envs: int | None = None, device: Device = None,
                 seed: int | None = None, frame_skip: int = 1, **kwargs):
        if isinstance(frame_skip, bool) or not isinstance(frame_skip, int) or frame_skip < 1:
            raise ValueError(f"frame_skip must be a positive int, got {frame_skip!r}")
        name, mapping = env_name, None
        if isinstance(agent_mapping, str):
            if re.fullmatch(r"\w+_\d+[x|]\d+", agent_mapping):  # MABrax's names
                warnings.warn(f"agent_mapping={agent_mapping!r} names one of JaxMARL's MABrax splits, whose index "
                              f"tables TorchRL's MujocoPlaygroundEnv applies to Playground's observation; marl-envs "
                              f"splits {env_name!r} from its own model instead, so each agent's observation is not "
                              f"TorchRL's: pass torchrl.envs.libs.mujoco_playground.KNOWN_MARL_MAPPINGS["
                              f"{agent_mapping!r}] for TorchRL's indices",
                              UserWarning, stacklevel=3)  # the caller (TorchRL's metaclass between)
            name = _playground_split(env_name, agent_mapping)
        elif agent_mapping is not None:
            mapping = _mapping_indices(agent_mapping)
        mode = getattr(agent_mapping, "homogenization_mode", "none")
        if agent_mapping is not None:
            kwargs.setdefault("group_map", MarlGroupMapType.ONE_GROUP_PER_AGENT)
        overrides = {**(config.to_dict() if hasattr(config, "to_dict") else config or {}), **(config_overrides or {})}
        env, batch = build_env("playground", "PlaygroundEnv", batch_size, num_envs, "mujoco_playground", name,
                               device=device or "cpu", seed=0 if seed is None else seed, config=overrides or None,
                               mapping=mapping, **kwargs)
        super().__init__(env, batch)
        self._agent_mapping = (copy.deepcopy(agent_mapping) if not isinstance(agent_mapping, str)
                               else _torchrl_mapping(env.action_indices, env.observation_indices))
        #: the groups of one agent each, seen without their agent dim, and no root "state" (the whole observation,
        #: which the agents' entries cut): TorchRL's layout of a split
        self._single = [g for g, agents in env.group_map.items() if len(agents) == 1] if agent_mapping else []
        self._homogenized = None if mode == "none" else _Homogenized(
            mode, mapping, env.playground_env.observation_size, env.playground_env.action_size)
        dim = len(self.batch_size)
        for attr in ("full_observation_spec", "full_action_spec", "full_reward_spec", "full_done_spec"):
            spec = getattr(self, attr).clone()
            for k, group in enumerate(self._single):
                if group in spec.keys():
                    spec[group] = spec[group].squeeze(dim)
                    if self._homogenized is not None and attr == "full_observation_spec":
                        spec[group, "observation"] = rl_specs.Unbounded(
                            (*self.batch_size, self._homogenized.obs_dims[k]), device=self.device)
                    elif self._homogenized is not None and attr == "full_action_spec":
                        spec[group, "action"] = rl_specs.Bounded(
                            -1.0, 1.0, (*self.batch_size, self._homogenized.act_dims[k]), device=self.device)
            if self._single and attr == "full_observation_spec" and "state" in spec.keys():
                del spec["state"]
            setattr(self, attr, spec)
        # as TorchRL's: a frame_skip above 1 puts a FrameSkipTransform around the env (TorchRL's EnvBase reads it)
        self.frame_skip = frame_skip

    def _into_env(self, tensordict):
        tensordict = super()._into_env(tensordict)
        if tensordict is None or not self._single:
            return tensordict
        tensordict = tensordict.clone(recurse=False)  # the caller's data keep their layout
        for k, group in enumerate(self._single):
            sub = tensordict.get(group, None)
            if sub is not None:
                sub = sub.clone(recurse=False)
                if self._homogenized is not None:
                    self._homogenized.own(k, sub)
                tensordict.set(group, sub.unsqueeze(1))
        return tensordict

    def _completed(self, data):
        if not self._single:
            return data
        data = data.exclude("state")
        for k, group in enumerate(self._single):
            sub = data.get(group, None)
            if sub is not None:
                sub = sub.squeeze(1)
                if self._homogenized is not None:
                    self._homogenized.torchrl(k, sub)
                data.set(group, sub)
        return data

    def rand_action(self, tensordict=None):
        """Uniform actions of the action spec (a robot's actions have no mask)."""
        drawn = self.full_action_spec.rand()
        return drawn if tensordict is None else tensordict.update(drawn)


def _mapping_indices(agent_mapping) -> dict:
    """TorchRL's ``MujocoPlaygroundAgentMapping`` -> our ``mapping`` (agent -> action / observation indices)."""
    agents = list(getattr(agent_mapping, "agents", None) or [])
    if not agents:
        raise TypeError(f"agent_mapping={agent_mapping!r}: expected TorchRL's MujocoPlaygroundAgentMapping (its "
                        f"agents' names, action_indices and observation_indices) or a split's name")
    if any(isinstance(agent.observation_indices, dict) for agent in agents):
        raise NotImplementedError("an agent_mapping of a dict-observation env's entries: the Playground envs here "
                                  "split flat observations; pass an env with a flat observation")
    mode = getattr(agent_mapping, "homogenization_mode", "none")
    if mode not in ("none", "max", "concat"):  # refused before the env is built (an MJX build takes seconds)
        raise ValueError(f"homogenization_mode={mode!r}: expected 'none', 'max' or 'concat'")
    return {"action_indices": {a.name: list(a.action_indices) for a in agents},
            "observation_indices": {a.name: list(a.observation_indices) for a in agents}}


class _Homogenized:
    """TorchRL's ``homogenization_mode`` of a split, each agent's entries to and from its own (``"none"``):
    ``"max"``: the observation ``[its one-hot index | its own | zeros]`` of the largest own size plus one per agent,
    the action of the largest own size (its first entries used); ``"concat"``: the whole observation's size, its own
    entries at their indices (zeros elsewhere), and the whole action (its own entries used)."""

    def __init__(self, mode: str, mapping: dict, obs_size: int, act_size: int):
        self.max = mode == "max"
        obs = [torch.as_tensor(v) for v in mapping["observation_indices"].values()]
        act = [torch.as_tensor(v) for v in mapping["action_indices"].values()]
        n = len(obs)
        self.obs_dims = [max(len(i) for i in obs) + n] * n if self.max else [obs_size] * n
        self.act_dims = [max(len(i) for i in act)] * n if self.max else [act_size] * n
        #: entry -> (each agent's own indices, where "max" puts its own entries, each agent's size in TorchRL's layout)
        self.entries = {"observation": (obs, n, self.obs_dims), "action": (act, 0, self.act_dims)}

    def own(self, k: int, sub) -> None:
        """Agent ``k``'s entries in ``sub`` from TorchRL's layout to its own, in place."""
        for name, (indices, start, _) in self.entries.items():
            if name in sub.keys():
                value = sub.get(name)
                sub.set(name, value[..., start:start + len(indices[k])] if self.max else value[..., indices[k]])

    def torchrl(self, k: int, sub) -> None:
        """Agent ``k``'s entries in ``sub`` from its own layout to TorchRL's, in place."""
        for name, (indices, start, dims) in self.entries.items():
            if name in sub.keys():
                own = sub.get(name)
                out = own.new_zeros((*own.shape[:-1], dims[k]))
                if not self.max:
                    out[..., indices[k]] = own
                else:
                    out[..., start:start + own.shape[-1]] = own
                    if name == "observation":
                        out[..., k] = 1.0  # the agent's one-hot index
                sub.set(name, out)


def _torchrl_mapping(action_indices: dict, observation_indices: dict):
    """Our split as TorchRL's ``MujocoPlaygroundAgentMapping`` (None where this TorchRL has no such class)."""
    try:
        from torchrl.envs.libs.mujoco_playground import MujocoPlaygroundAgentMapping, MujocoPlaygroundAgentSpec
    except ImportError:  # TorchRL before 0.14
        return None
    return MujocoPlaygroundAgentMapping(agents=[
        MujocoPlaygroundAgentSpec(agent, list(action_indices[agent]), list(observation_indices[agent]))
        for agent in action_indices])


def _playground_split(env_name: str, agent_mapping: str) -> str:
    """Our split of ``env_name`` with the agent layout of TorchRL's mapping name (``"walker2d_2x3"`` -> ``2x3``)."""
    layout = agent_mapping.rpartition("_")[2].replace("|", "-")
    name = f"{env_name}_{layout}"
    ours = MujocoPlaygroundEnv.available_envs
    if name in ours:
        return name
    splits = [n for n in ours if n.startswith(f"{env_name}_")]
    where = (f"the splits of {env_name!r} here: {splits}" if splits else
             f"{env_name!r} has no split here; the envs that have one: {[n for n in ours if '_' in n]}")
    raise ValueError(f"Unknown agent_mapping={agent_mapping!r} on {env_name!r}: no env {name!r}; {where} (pass "
                     f"the split's name as env_name, without agent_mapping)")
