"""The adapter: ``to_torchrl``, ``TorchRLEnv`` and the spec conversion (see ``marl_envs.torchrl``)."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence

import torch
from packaging.version import Version
from tensordict import TensorDictBase

from .._core.messages import missing_library

try:
    import torchrl.data as rl_specs
    from torchrl import __version__ as _torchrl_version
    from torchrl.envs import EnvBase as _TorchRLEnvBase
except ImportError as err:  # pragma: no cover - exercised by the import test in the core venv
    from tensordict import __version__ as _tensordict_version

    raise missing_library("marl_envs.torchrl", "TorchRL", err, "torchrl",
                          f"TorchRL 0.14, which pins tensordict 0.14: it replaces the tensordict {_tensordict_version} "
                          "installed here if that is another minor version") from err

from groupings import GroupMap

from .. import specs
from .._core.env import EnvBase
from .._core.rules import merge_rows, where_rows

__all__ = ["COLLECTOR_KWARGS", "TorchRLEnv", "check_batch_size", "to_torchrl", "to_torchrl_spec"]

#: Keywords for TorchRL's ``Collector`` that give it the same behaviour on every TorchRL we support (0.11 to 0.14):
#: 0.14 asks whether to append the transforms a policy needs (and warns while it is not told), 0.11 has no such
#: keyword. ``Collector(env, policy, ..., **COLLECTOR_KWARGS)``.
COLLECTOR_KWARGS: dict = ({"auto_register_policy_transforms": False}
                          if Version(_torchrl_version).release[:2] >= (0, 14) else {})


def to_torchrl_spec(spec: specs.TensorSpec | specs.Composite, batch: Sequence[int] | None = None
                    ) -> rl_specs.TensorSpec:
    """The ``torchrl.data`` spec equal to a ``marl_envs.specs`` one (same shape, dtype, device, bounds, mask).

    >>> from marl_envs import specs
    >>> spec = to_torchrl_spec(specs.Categorical(5, shape=(4, 3)))
    >>> type(spec).__name__, spec.shape, spec.n
    ('Categorical', torch.Size([4, 3]), 5)
    >>> to_torchrl_spec(specs.Categorical(5, shape=(4, 3)), batch=(2, 2)).shape  # the 4 envs seen as 2 x 2
    torch.Size([2, 2, 3])

    Args:
        spec: the spec, its first dim the envs.
        batch: that first dim seen as this batch shape (of as many envs: ``()`` for one); None keeps it.

    Raises:
        TypeError: ``spec`` is of a class TorchRL has no counterpart for.
    """
    shape, device = spec.shape, spec.device
    if batch is not None:
        shape = torch.Size((*batch, *shape[1:]))

    def view(values):  # bounds and masks laid out as the spec
        if batch is None or not isinstance(values, torch.Tensor):
            return values
        return values.reshape(*batch, *values.shape[1:])

    if isinstance(spec, specs.Composite):
        return rl_specs.Composite({name: to_torchrl_spec(sub, batch) for name, sub in spec.items()}, shape=shape,
                                  device=device)
    leaf = {"shape": shape, "dtype": spec.dtype, "device": device}
    if isinstance(spec, specs.Bounded):
        return rl_specs.Bounded(low=view(spec.low), high=view(spec.high), **leaf)
    if isinstance(spec, specs.Unbounded):
        return rl_specs.Unbounded(**leaf)
    if isinstance(spec, (specs.Categorical, specs.OneHot)):
        kind = rl_specs.Categorical if isinstance(spec, specs.Categorical) else rl_specs.OneHot
        return kind(spec.n, mask=view(spec.mask), **leaf)
    if isinstance(spec, specs.Binary):
        return rl_specs.Binary(**leaf)
    if isinstance(spec, specs.MultiCategorical):
        return rl_specs.MultiCategorical(view(spec.nvec), **leaf)
    raise TypeError(f"no torchrl.data counterpart for the spec class {type(spec).__name__}; to_torchrl converts "
                    "Composite, Bounded, Unbounded, Categorical, OneHot, Binary and MultiCategorical")


class _SharedMask:
    """The current mask of one masked action, carried by the adapter's spec of it and by every clone TorchRL makes of
    that (``RandomPolicy``'s, a ``TransformedEnv``'s, a ``Collector``'s), so that each draws from the env's latest data.
    The specs stay of TorchRL's own class (``Categorical`` / ``OneHot``), which TorchRL dispatches on by exact type
    (``QValueModule``'s action space, a ``Stacked`` spec, a batched env's schema): a ``clone`` in each one's instance
    dictionary hands TorchRL's clone the same holder. A spec made otherwise (``spec[0]``, ``expand``) keeps the mask
    it was made with, as in TorchRL."""

    def __init__(self, spec: rl_specs.TensorSpec):
        self.mask: torch.Tensor | None = None
        self._specs: list[weakref.ref] = []  # specs are unhashable (TorchRL's compare by value): no WeakSet
        self.carry(spec)

    def carry(self, spec: rl_specs.TensorSpec) -> rl_specs.TensorSpec:
        """Make ``spec`` carry this mask, and its clones too; ``spec`` itself."""
        spec.mask = self.mask
        spec.__dict__["clone"] = functools.partial(self._clone, spec)
        self._specs = [ref for ref in self._specs if ref() is not None]
        self._specs.append(weakref.ref(spec))
        return spec

    def _clone(self, spec: rl_specs.TensorSpec) -> rl_specs.TensorSpec:
        """TorchRL's clone of ``spec``, carrying this mask."""
        return self.carry(type(spec).clone(spec))

    def set(self, mask: torch.Tensor) -> None:
        """The env's new mask, for every spec that carries it (no copy, no host read)."""
        self.mask = mask
        for ref in self._specs:
            spec = ref()
            if spec is not None:
                spec.mask = mask

    def __getstate__(self) -> dict:
        return {"mask": self.mask, "specs": [spec for ref in self._specs if (spec := ref()) is not None]}

    def __setstate__(self, state: dict) -> None:
        self.mask, self._specs = state["mask"], [weakref.ref(spec) for spec in state["specs"]]


class TorchRLEnv(_TorchRLEnvBase):
    """A marl-envs env seen as a ``torchrl.envs.EnvBase``; build it with ``to_torchrl(env)``.

    TorchRL's ``step`` / ``reset`` / ``step_and_maybe_reset`` / ``rollout`` run their usual logic around the
    hooks, which call the wrapped env's public ``step`` and ``reset``: actions are checked by the wrapped env
    (its errors reach the caller unchanged), ``_reset`` entries select the envs to reset, and the data is
    never copied on the way. ``rand_action`` is the wrapped env's, so action masks in the data are honoured. The
    spec of a masked action carries the mask of the latest step, reset or ``rand_action``, shared with every clone
    TorchRL makes of it, so that TorchRL's own random draws (``RandomPolicy(env.full_action_spec)``, a ``Collector``
    with ``policy=None``) are legal too.

    The attributes TorchRL's multi-agent wrappers carry are here too: ``het_specs`` / ``het_specs_map`` (always
    False: a group's agents share their specs), ``has_action_mask`` (group -> bool), and the wrapped env's
    ``group_map``, ``agent_names``, ``n_agents``, ``num_envs``: any public attribute of it is read through
    (``scenario_name``, ``categorical_actions``, ``parallel``, ``use_mask``, ``done_on_any``, ``return_state``).

    ``TorchRLEnv(env, batch_size=...)`` shows TorchRL the env's ``num_envs`` envs as another batch of as many: ``()``
    for one env, ``(a, b)`` for ``a * b`` (the specs, the data, the masks and the ``_reset`` entries in that shape),
    as TorchRL's classes of ``marl_envs.torchrl`` do; without it, the env's ``(num_envs,)``.

    Attributes:
        env: the wrapped marl-envs env.

    Differences from the wrapped env a TorchRL user may meet:
        - a ``"_step"`` entry (TorchRL's partial step, written by ``rollout(break_when_all_done=True)``) still
          steps every env, like TorchRL's own VMAS wrapper: those TorchRL does not step (they have ended) are
          reset first and given random actions; TorchRL's rollout keeps the finished envs' data frozen.
        - the device is fixed at construction: ``to(other_device)`` raises; build the env on the device.
        - ``set_seed(None)`` keeps the env's random state (TorchRL's VMAS wrapper does the same).
    """

    def __init__(self, env: EnvBase, batch_size: Sequence[int] | None = None):
        if not isinstance(env, EnvBase):
            raise TypeError(f"to_torchrl takes a marl_envs.EnvBase (e.g. marl_envs.make('vmas/balance', num_envs=8)), "
                            f"got {type(env).__name__}")
        batch = env.batch_size if batch_size is None else torch.Size(batch_size)
        if batch.numel() != env.num_envs:
            raise ValueError(f"batch_size={tuple(batch)} holds {batch.numel()} envs; the env has {env.num_envs}")
        super().__init__(device=env.device, batch_size=batch, allow_done_after_reset=env.allow_done_after_reset)
        self.env = env
        #: the env's batch (num_envs,) seen as another shape (TorchRL's classes: () for one env, (a, b)), else None
        self._view = None if batch == env.batch_size else batch
        for part in ("observation", "action", "reward", "done", "state"):
            setattr(self, f"full_{part}_spec", to_torchrl_spec(getattr(env, f"full_{part}_spec"), self._view))
        actions = self.full_action_spec
        # (mask key, holder) of each masked discrete action: its spec carries the env's current mask, so that
        # TorchRL's own random draws (RandomPolicy, a Collector with policy=None) are legal
        self._masks: list[tuple[specs.NestedKey, _SharedMask]] = [
            (mask, _SharedMask(actions[key])) for key, mask in env.action_mask_keys.items()
            if isinstance(actions[key], (rl_specs.Categorical, rl_specs.OneHot))]
        self.is_closed = False  # as TorchRL's wrappers set it once their env is built (its scripts read it)

    # -- what TorchRL's multi-agent wrappers expose ---------------------------------------------------
    @property
    def group_map(self) -> GroupMap:
        """Group name -> agent names, as the wrapped env's."""
        return self.env.group_map

    @property
    def agents(self) -> list:
        """The wrapped env's ``agents`` where it has them (VMAS's agent objects, as TorchRL's VMAS wrapper gives),
        else the agents' names."""
        return getattr(self.env, "agents", self.env.agent_names)

    @property
    def het_specs(self) -> bool:
        """Whether a group holds agents of different specs (lazily stacked in TorchRL): never here."""
        return False

    @property
    def het_specs_map(self) -> dict[str, bool]:
        """Group -> ``het_specs`` of that group (all False)."""
        return dict.fromkeys(self.group_map, False)

    @property
    def has_action_mask(self) -> dict[str, bool]:
        """Group -> whether its data carry an ``action_mask``."""
        masked = {key[0] for key in self.env.action_mask_keys.values() if isinstance(key, tuple)}
        return {group: group in masked for group in self.group_map}

    def __getattr__(self, name: str):
        env = self.__dict__.get("env")
        if env is None or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        try:
            return getattr(env, name)
        except AttributeError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}, nor has the wrapped "
                                 f"{type(env).__name__}") from None

    # -- TorchRL's hooks ------------------------------------------------------------------------------
    def _into_env(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        """TorchRL's data -> the wrapped env's batch ``(num_envs,)`` (a view where the batch is another shape)."""
        if tensordict is None or self._view is None:
            return tensordict
        return tensordict.unsqueeze(0) if not self._view else tensordict.reshape(self.env.num_envs)

    def _out_of_env(self, data: TensorDictBase, complete: bool = True) -> TensorDictBase:
        """The wrapped env's data, completed (``_completed``) unless told not to, in TorchRL's batch shape."""
        if complete:
            data = self._completed(data)
        if self._view is None:
            return data
        return data[0] if not self._view else data.reshape(self._view)

    def _completed(self, data: TensorDictBase) -> TensorDictBase:
        """What a class of ``marl_envs.torchrl`` adds to the env's data (OpenSpiel's ``current_player``), in the
        env's batch ``(num_envs,)``."""
        return data

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        # TorchRL's rollout(break_when_all_done=True) marks the envs to step ("_step") and leaves the per-group
        # "_neg_step" flags it worked them out from in the data (TorchRL 0.11-0.14 pop the root one only; kept,
        # they appear in the data of some steps and not others, which then cannot be stacked): both dropped here.
        partial = tensordict.pop("_step", None)
        if partial is not None:
            for key in [key for key in tensordict.keys(True) if isinstance(key, tuple) and key[-1] == "_neg_step"]:
                del tensordict[key]
        tensordict = self._into_env(tensordict)
        if partial is not None and not partial.all():
            tensordict = self._restart_skipped(tensordict, ~partial.reshape(self.env.num_envs))
        self.env.step(tensordict)  # writes tensordict["next"]; TorchRL's step sets it again
        return self._masked(self._out_of_env(tensordict.pop("next")))

    def _masked(self, data: TensorDictBase, rows: torch.Tensor | None = None) -> TensorDictBase:
        """Give the masked actions' specs the masks in ``data`` (only the envs ``rows`` selects, after a partial
        reset), a row of no legal choice allowing every choice (``specs.legal_choices``), and write them into
        ``data``: TorchRL's modules read the mask there (``QValueModule``, ``EGreedyModule``, ``MaskedCategorical``),
        and a row of all False would make their argmax a multi-hot action and their sampling fail."""
        if rows is not None:
            rows = rows.reshape(self.batch_size)
        for key, shared in self._masks:
            mask = data.get(key, None)
            if mask is not None:
                mask = specs.legal_choices(mask)
                data.set(key, mask)
                if rows is not None and shared.mask is not None:
                    mask = where_rows(rows, mask, shared.mask)
                shared.set(mask)
        return data

    def _restart_skipped(self, tensordict: TensorDictBase, skipped: torch.Tensor) -> TensorDictBase:
        """Reset the ended envs TorchRL did not mean to step (``skipped``; it keeps their data) and give them random
        valid actions: every env steps (a backend steps its envs together), a backend may refuse to step an ended
        episode (a PettingZoo game whose agents are all gone), and the policy's action was meant for that episode."""
        carried = tensordict.select(*self.env.observation_keys, *self.env.done_keys, strict=False)
        fresh = self.env.rand_action(self.env.reset(carried.set("_reset", skipped.unsqueeze(-1))))
        return merge_rows(tensordict, fresh.select(*self.env.action_keys, *self.env.observation_keys, strict=False),
                          skipped)

    def _reset(self, tensordict: TensorDictBase | None = None, *, seed: int | None = None, **kwargs) -> TensorDictBase:
        if kwargs:
            raise TypeError(f"reset() got keyword arguments {sorted(kwargs)}; marl-envs envs take only seed= (select "
                            f"envs with a '_reset' entry)")
        tensordict = self._into_env(tensordict)
        data = self._out_of_env(self._reset_env(tensordict, seed))
        return self._masked(data, self.env._reset_mask(tensordict))

    def _reset_env(self, tensordict: TensorDictBase | None, seed: int | None) -> TensorDictBase:
        """The wrapped env's reset, in its batch (a class of ``marl_envs.torchrl`` may reset otherwise: OpenSpiel's
        states)."""
        return self.env.reset(tensordict, seed=seed)

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self.env.set_seed(int(seed))

    def _assert_tensordict_shape(self, tensordict: TensorDictBase) -> None:
        """The wrapped env checks the batch size itself, with its own message."""

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Random actions from the wrapped env, honouring the ``action_mask`` entries of ``tensordict``, which the
        action specs then carry (the actions drawn lie in the specs)."""
        if tensordict is not None:
            self._masked(tensordict)
        if self._view is None:
            return self.env.rand_action(tensordict)
        drawn = self._out_of_env(self.env.rand_action(self._into_env(tensordict)), complete=False)
        drawn = drawn.select(*self.env.action_keys)
        return drawn if tensordict is None else tensordict.update(drawn)

    def close(self, *, raise_if_closed: bool = True) -> None:
        self.env.close()
        super().close(raise_if_closed=raise_if_closed)

    def to(self, device) -> TorchRLEnv:
        if torch.device(device) != self.device:
            raise ValueError(f"{self!r} lives on {self.device} and cannot move to {device}; build the marl-envs env "
                             f"with device={str(device)!r} and wrap that")
        return self

    def __repr__(self) -> str:
        return f"TorchRLEnv(env={self.env!r}, batch_size={tuple(self.batch_size)}, device={self.device})"


def check_batch_size(batch_size: Sequence[int] | torch.Size | None, num_envs: int, library: str) -> None:
    """Raise ``TypeError`` unless ``batch_size`` is None, ``()`` or ``(num_envs,)`` (TorchRL's VMAS wrapper's rule;
    the batch is ``(num_envs,)`` in every case). The messages begin as TorchRL's wrappers' (``library`` names the
    backend there), which code written for them may match."""
    if batch_size is None or len(batch_size) == 0:
        return
    if len(batch_size) > 1:
        raise TypeError(f"Batch size used in constructor is not compatible with {library}. batch_size="
                        f"{tuple(batch_size)}, but the env's batch is (num_envs,) = ({num_envs},): pass that or "
                        f"leave it out")
    if batch_size[0] != num_envs:
        raise TypeError(f"Batch size used in constructor does not match {library} batch size. batch_size="
                        f"{tuple(batch_size)} but num_envs={num_envs}: pass batch_size=({num_envs},) or leave it out")


def to_torchrl(env: EnvBase, *, batch_size: Sequence[int] | torch.Size | None = None) -> TorchRLEnv:
    """Wrap a marl-envs env as a ``torchrl.envs.EnvBase`` (see ``TorchRLEnv``).

    Args:
        env: any marl-envs env (``marl_envs.make(...)`` or a user env on the ``EnvBase`` hook).
        batch_size: as TorchRL's wrappers take it: None, ``()`` or ``(env.num_envs,)``.

    Returns:
        A ``TorchRLEnv`` with the env's keys, group map, batch size, device and converted specs.

    Raises:
        TypeError: ``env`` is not a ``marl_envs.EnvBase``; a ``batch_size`` other than ``(env.num_envs,)``.
    """
    adapter = TorchRLEnv(env)
    check_batch_size(batch_size, env.num_envs, "marl-envs")
    return adapter
