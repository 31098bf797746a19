"""The keys and specs of an env: its group map, its ``full_*_spec`` Composites and the key lists read from them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from tensordict import TensorDictBase

from groupings import GroupMap, MarlGroupMapType, check_marl_grouping

from .actions import ActionCheck, action_checks
from .agents import resolve_group_map, specs_by_kind, stack_specs
from .composite import Composite, complete_done_spec
from .leaf_specs import NestedKey, TensorSpec

__all__ = ["SpecsAndKeys"]


def _prefixed(prefix: tuple[str, ...], name: str) -> NestedKey:
    return (*prefix, name) if prefix else name


def _mask_key(action_key: NestedKey) -> NestedKey:
    """The key of an action's mask: ``(group, "action_mask")`` beside ``(group, "action")``, else the root's."""
    return (*action_key[:-1], "action_mask") if isinstance(action_key, tuple) and len(action_key) > 1 else "action_mask"


class SpecsAndKeys:
    """The group map, the specs and the keys of an env (``EnvBase``'s): set while the env is built, read per step
    from the key caches ``_refresh_keys`` recomputes whenever a spec or the group map is set (then ``_configure``,
    the env's, hands them to its executor).
    """

    num_envs: int
    batch_size: torch.Size
    device: torch.device
    _masked_actions: bool = False  # the backend applies only the actions of agents its group's "mask" marks

    def _init_specs(self) -> None:
        self._group_map: GroupMap = {}
        self._agent_names: list[str] | None = None
        self._specs: dict[str, Composite] = {
            name: Composite(shape=self.batch_size, device=self.device)
            for name in ("observation", "action", "reward", "done", "state")
        }
        self._keys: dict[str, list[NestedKey]] = {}
        self._done_levels: dict[tuple[str, ...], torch.Size] = {}  # done level -> shape of its done entries
        self._group_shapes: dict[str, torch.Size] = {}  # group -> batch (B, n_agents) of its sub-TensorDicts
        self._action_checks: list[ActionCheck] = []  # checked on every step
        self._reset_leaves: list[tuple[NestedKey, TensorSpec]] = []  # what a partial reset keeps: checked first
        complete_done_spec(self._specs["done"])

    def _configure(self) -> None:
        raise NotImplementedError

    @property
    def group_map(self) -> GroupMap:
        """Group name -> agent names, in data order."""
        return self._group_map

    @group_map.setter
    def group_map(self, group_map: GroupMap | MarlGroupMapType) -> None:
        agent_names = self._agent_names
        group_map = MarlGroupMapType.coerce(group_map)  # TorchRL's strategies too
        if isinstance(group_map, MarlGroupMapType):
            if agent_names is None:
                raise ValueError("set env.agent_names before resolving a MarlGroupMapType group map")
            group_map = group_map.get_group_map(agent_names)
        if agent_names is None:
            agent_names = [agent for members in group_map.values() for agent in members] if isinstance(
                group_map, dict
            ) else []
        check_marl_grouping(group_map, agent_names)
        self._group_map = {group: list(members) for group, members in group_map.items()}
        self._refresh_keys()

    @property
    def agent_names(self) -> list[str]:
        """Every agent, in the environment's own order (group order if the env did not declare one)."""
        if self._agent_names is not None:
            return list(self._agent_names)
        return [agent for members in self._group_map.values() for agent in members]

    @agent_names.setter
    def agent_names(self, names: Sequence[str]) -> None:
        self._agent_names = list(names)

    @property
    def n_agents(self) -> int:
        return len(self.agent_names)

    def _group_agents(
        self, agent_specs: Mapping[str, Composite], group_map: GroupMap | MarlGroupMapType | None, *,
        bounds: bool = True,
    ) -> dict[str, Composite]:
        """Set ``agent_names`` and ``group_map`` from each agent's specs; return each group's stacked specs.

        Args:
            agent_specs: agent name -> its specs without batch dims (``action``, ``observation``, ``reward``,
                ...), in the environment's agent order.
            group_map: the user's (dict or ``MarlGroupMapType``), or None for ``groupings.default_group_map``
                over the agents' spec signatures.
            bounds: agents with different ``Bounded`` ranges may not share a group (else they may, and the
                ranges are stacked per agent).

        Returns:
            group -> Composite of batch ``(num_envs, n_agents)``; ``_declare_specs`` files its entries.

        Raises:
            ValueError: a malformed ``group_map``, or a group whose agents' specs differ.
        """
        self.agent_names = list(agent_specs)
        self.group_map = resolve_group_map(group_map, agent_specs, bounds=bounds)
        return {group: stack_specs([agent_specs[a] for a in members], self.batch_size)
                for group, members in self.group_map.items()}

    def _declare_specs(self, groups: Mapping[str, Composite], **root: TensorSpec | Composite) -> None:
        """Set the ``full_*_spec`` from group Composites and root entries: ``action`` entries go to the action
        spec, ``reward`` to the reward spec, ``done`` / ``terminated`` / ``truncated`` to the done spec, the rest
        (observations, infos, masks, a root ``state``) to the observation spec."""
        specs = specs_by_kind(groups, root, self.batch_size, self.device)
        for kind, spec in specs.items():
            self._set_spec(kind, spec)

    def _set_spec(self, kind: str, spec: Composite) -> None:
        if not isinstance(spec, Composite):
            raise TypeError(f"full_{kind}_spec must be a marl_envs.specs.Composite, got {type(spec).__name__}")
        if spec.shape != self.batch_size:
            raise ValueError(
                f"full_{kind}_spec has shape {tuple(spec.shape)}; expected the batch shape {tuple(self.batch_size)} "
                f"(spec shapes include the batch: build it with shape=(num_envs,))"
            )
        for key, leaf in spec.items(True, True):
            if leaf.device != self.device:
                raise ValueError(f"spec {key!r} is on {leaf.device}, the env on {self.device}; build it with device=")
        self._specs[kind] = spec
        if kind == "done":
            complete_done_spec(spec)
        self._refresh_keys()

    full_observation_spec = property(lambda self: self._specs["observation"],
                                     lambda self, spec: self._set_spec("observation", spec),
                                     doc="Composite of every observation entry (per group and at the root).")
    full_action_spec = property(lambda self: self._specs["action"], lambda self, spec: self._set_spec("action", spec),
                                doc="Composite of every action entry.")
    full_reward_spec = property(lambda self: self._specs["reward"], lambda self, spec: self._set_spec("reward", spec),
                                doc="Composite of every reward entry.")
    full_done_spec = property(lambda self: self._specs["done"], lambda self, spec: self._set_spec("done", spec),
                              doc="Composite of the done / terminated / truncated entries, root and per group.")
    full_state_spec = property(lambda self: self._specs["state"], lambda self, spec: self._set_spec("state", spec),
                               doc="Composite of inputs other than actions (empty for every built-in backend).")

    def _leaf_or_full(self, kind: str) -> TensorSpec | Composite:
        keys, full = self._keys[kind], self._specs[kind]
        return full[keys[0]] if len(keys) == 1 else full

    action_spec = property(lambda self: self._leaf_or_full("action"),
                           doc="The action spec if the env has one action key, else the full Composite.")
    reward_spec = property(lambda self: self._leaf_or_full("reward"),
                           doc="The reward spec if the env has one reward key, else the full Composite.")
    observation_spec = property(lambda self: self._leaf_or_full("observation"),
                                doc="The observation spec if the env has one observation key, else the full Composite.")
    done_spec = property(lambda self: self._leaf_or_full("done"),
                         doc="The done spec if the env has one done key, else the full Composite.")

    # ------------------------------------------------------------------------------------------------
    # Keys
    # ------------------------------------------------------------------------------------------------
    def _ordered(self, keys: list[NestedKey]) -> list[NestedKey]:
        """Root keys first, then by group in group_map order, each keeping spec order."""
        rank = {group: i for i, group in enumerate(self._group_map)}
        return sorted(keys, key=lambda k: -1 if isinstance(k, str) else rank.get(k[0], len(rank)))

    def _refresh_keys(self) -> None:
        """Recompute the key lists and the per-step lookups from the specs and the group map."""
        done = self._specs["done"]
        keys = {kind: self._ordered(spec.keys(True, True)) for kind, spec in self._specs.items()}
        prefixes = [()] + [(g,) for g in self._group_map if (g, "done") in done]
        keys["reset"] = [_prefixed(prefix, "_reset") for prefix in prefixes]
        self._done_levels = {prefix: done[_prefixed(prefix, "done")].shape for prefix in prefixes}
        self._group_shapes = {
            g: spec[g].shape for spec in self._specs.values() for g in self._group_map
            if g in spec and isinstance(spec[g], Composite)
        }
        observed = set(keys["observation"]) if self._masked_actions else set()
        grouped = [key for key in keys["action"] if isinstance(key, tuple) and len(key) > 1]
        observations = set(keys["observation"])
        self._action_masks = {key: _mask_key(key) for key in keys["action"] if _mask_key(key) in observations}
        self._action_checks = action_checks(
            [(key, self._specs["action"][key]) for key in keys["action"]],
            # a group's "mask" says whose actions count (acting, alive agents)
            {key: (key[0], "mask") for key in grouped if (key[0], "mask") in observed},
            # a choice its action mask forbids is refused like an out-of-range one
            self._action_masks,
            {key: self._group_map.get(key[0], ()) for key in grouped})
        self._reset_leaves = [(key, self._specs[kind][key]) for kind in ("observation", "done") for key in keys[kind]]
        self._keys = keys
        self._configure()

    action_keys = property(lambda self: list(self._keys["action"]), doc="Every action key, root first.")
    reward_keys = property(lambda self: list(self._keys["reward"]), doc="Every reward key, root first.")
    done_keys = property(lambda self: list(self._keys["done"]), doc="Every done/terminated/truncated key.")
    observation_keys = property(lambda self: list(self._keys["observation"]), doc="Every observation key.")
    state_keys = property(lambda self: list(self._keys["state"]), doc="Every non-action input key.")
    action_mask_keys = property(
        lambda self: dict(self._action_masks),
        doc="Action key -> the key of its mask (``(group, 'action_mask')``), for each action whose mask is observed.")
    reset_keys = property(lambda self: list(self._keys["reset"]),
                          doc="'_reset' at the root, plus (group, '_reset') for groups with their own done keys.")

    def _single_key(self, kind: str) -> NestedKey:
        keys = self._keys[kind]
        if len(keys) != 1:
            raise KeyError(
                f"{type(self).__name__} has {len(keys)} {kind} keys {keys}; use env.{kind}_keys instead of env.{kind}_key"
            )
        return keys[0]

    action_key = property(lambda self: self._single_key("action"), doc="The single action key (KeyError if several).")
    reward_key = property(lambda self: self._single_key("reward"), doc="The single reward key (KeyError if several).")

    @property
    def done_key(self) -> NestedKey:
        """The root ``"done"`` key."""
        return "done"

    def _reset_mask(self, tensordict: TensorDictBase | None) -> torch.Tensor | None:
        """The envs a reset of ``tensordict`` selects, ``(B,)`` bool (None: all), from its ``_reset`` entries: the
        root's supersedes the groups' (``reset_keys`` lists it first), an env is selected where any of its flags is
        set. The one reading of ``_reset`` (the TorchRL adapter calls it too); a bad flag is refused."""
        if tensordict is None:
            return None
        masks = []
        for key in self.reset_keys:
            flag = tensordict.get(key, None)
            if flag is None:
                continue
            expected = self._done_levels[key[:-1] if isinstance(key, tuple) else ()]
            if flag.shape != expected or flag.dtype != torch.bool or flag.device != self.device:
                where = "" if flag.device == self.device else f" on {flag.device}; the env is on {self.device}"
                raise ValueError(
                    f"{key!r} must be a bool tensor of shape {tuple(expected)} (the done shape at its level), "
                    f"got {flag.dtype} {tuple(flag.shape)}{where}"
                )
            masks.append(flag.reshape(self.num_envs, -1).any(-1))
            if key == "_reset":  # the root supersedes nested entries
                break
        if not masks:
            return None
        return masks[0] if len(masks) == 1 else torch.stack(masks).any(0)
