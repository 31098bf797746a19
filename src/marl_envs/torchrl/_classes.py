"""TorchRL's wrapper classes by name, our batched envs inside: change the import, keep the code.

Each class takes the constructor keywords of TorchRL's class of the same name (``batch_size=``,
``categorical_actions=``, ``group_map=``, ``return_state=``, ``seed=``, ``device=`` as that class has them) and
builds the marl-envs env of that library, adapted (a ``TorchRLEnv``), with TorchRL's batch: no ``batch_size``
(or ``()``) gives one env, batch ``()``; ``batch_size=(N,)`` (or ``num_envs=N``) N envs, batched where TorchRL's
class is not (OpenSpiel, Level-Based Foraging, PettingZoo, Melting Pot); ``batch_size=(a, b)`` ``a * b`` envs seen
as that batch. VMAS keeps its ``(num_envs,)``. ``docs/torchrl_classes.md`` lists what differs from TorchRL's.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDictBase

from groupings import MarlGroupMapType

from .._core.env import EnvBase
from ..registry import available_envs, backend_module
from ._adapter import TorchRLEnv, check_batch_size, rl_specs

__all__ = ["BatchSize", "BraxEnv", "BraxWrapper", "EnvNames", "JaxLibraryEnv", "JumanjiEnv", "LBForagingEnv",
           "LBForagingWrapper", "LibraryModule", "MeltingpotEnv", "MeltingpotWrapper", "OpenSpielEnv",
           "OpenSpielWrapper", "PettingZooEnv", "PettingZooWrapper", "VmasEnv", "VmasWrapper", "build_env",
           "torchrl_batch"]

BatchSize = Sequence[int] | torch.Size | None
Device = torch.device | str | None


def torchrl_batch(batch_size: BatchSize, num_envs: int | None, library: str) -> tuple[int, torch.Size]:
    """The number of envs a TorchRL-style constructor asks for and the batch TorchRL sees: ``batch_size=(N,)`` or
    ``num_envs=N``: N envs, batch ``(N,)``; ``batch_size=(a, b)``: ``a * b`` envs seen as ``(a, b)``; neither: one
    env, batch ``()``, as TorchRL's classes."""
    if batch_size is None or len(batch_size) == 0:
        return (1, torch.Size(())) if num_envs is None else (num_envs, torch.Size((num_envs,)))
    batch = torch.Size(batch_size)
    if num_envs is not None and num_envs != batch.numel():
        raise TypeError(f"Batch size used in constructor does not match {library} batch size. batch_size="
                        f"{tuple(batch)} but num_envs={num_envs}: pass one of them")
    return batch.numel(), batch


def build_env(backend: str, cls: str, batch_size: BatchSize, num_envs: int | None, library: str, /, *args,
              **kwargs) -> tuple[EnvBase, torch.Size]:
    """Our ``backend``'s class ``cls`` of the envs ``torchrl_batch`` counts, and the batch TorchRL sees."""
    count, batch = torchrl_batch(batch_size, num_envs, library)
    return getattr(backend_module(backend), cls)(*args, num_envs=count, **kwargs), batch


class LibraryModule:
    """A class attribute giving the wrapped library's module, imported when read (TorchRL's ``Wrapper.lib``)."""

    def __init__(self, module: str):
        self.module = module

    def __get__(self, obj, cls=None):
        return importlib.import_module(self.module)


class EnvNames:
    """A class attribute listing a backend's env names (without the ``backend/`` prefix), read when asked."""

    def __init__(self, backend: str):
        self.backend = backend

    def __get__(self, obj, cls=None) -> list[str]:
        return [name.removeprefix(f"{self.backend}/") for name in available_envs(self.backend)]


class VmasWrapper(TorchRLEnv):
    """``torchrl.envs.VmasWrapper``'s arguments, our ``VmasWrapper`` inside: ``VmasWrapper(vmas.make_env(...))``.

    Keywords are ``marl_envs.backends.vmas.VmasWrapper``'s (``group_map`` may be TorchRL's ``MarlGroupMapType``);
    ``batch_size`` as ``to_torchrl``'s. The differences from TorchRL's class are listed in ``docs/torchrl.md``.
    """

    available_envs = EnvNames("vmas")

    def __init__(self, env=None, *, batch_size: BatchSize = None, **kwargs):
        check_batch_size(batch_size, getattr(env, "num_envs", 0), "vmas")
        super().__init__(backend_module("vmas").VmasWrapper(env, **kwargs))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_envs={self.num_envs}, n_agents={self.n_agents}, "
                f"batch_size={self.batch_size}, device={self.device})")


class VmasEnv(VmasWrapper):
    """``torchrl.envs.VmasEnv``'s arguments, our VMAS env inside: ``VmasEnv(scenario="balance", num_envs=32)``
    is ``to_torchrl(marl_envs.make("vmas/balance", num_envs=32))``."""

    def __init__(self, scenario, num_envs: int, continuous_actions: bool = True, max_steps: int | None = None,
                 categorical_actions: bool = True, seed: int | None = None, group_map=None, *,
                 batch_size: BatchSize = None, **kwargs):
        check_batch_size(batch_size, num_envs, "vmas")
        env = backend_module("vmas").VmasEnv(scenario, num_envs=num_envs, continuous_actions=continuous_actions,
                                             max_steps=max_steps, categorical_actions=categorical_actions,
                                             seed=seed, group_map=group_map, **kwargs)
        TorchRLEnv.__init__(self, env)

    def __repr__(self) -> str:
        return f"{super().__repr__()} (scenario={self.scenario_name})"


class PettingZooWrapper(TorchRLEnv):
    """``torchrl.envs.PettingZooWrapper``'s arguments, our ``PettingZooWrapper`` inside (one env of batch ``()``
    by default, as TorchRL's; ``batch_size=(N,)`` or ``num_envs=N`` for N)."""

    def __init__(self, env=None, return_state: bool = False, group_map=None, use_mask: bool = False,
                 categorical_actions: bool = True, seed: int | None = None, done_on_any: bool | None = None, *,
                 batch_size: BatchSize = None, **kwargs):
        num_envs = kwargs.pop("num_envs", None)
        super().__init__(*build_env("pettingzoo", "PettingZooWrapper", batch_size, num_envs, "pettingzoo", env,
                                    return_state=return_state, group_map=group_map, use_mask=use_mask,
                                    categorical_actions=categorical_actions, seed=seed, done_on_any=done_on_any,
                                    **kwargs))


class PettingZooEnv(TorchRLEnv):
    """``torchrl.envs.PettingZooEnv``'s arguments, our PettingZoo env inside: ``PettingZooEnv(task="pistonball_v6",
    parallel=True)`` is ``to_torchrl(marl_envs.make("pettingzoo/butterfly/pistonball_v6", parallel=True))``."""

    available_envs = EnvNames("pettingzoo")

    def __init__(self, task: str, parallel: bool | None = None, return_state: bool = False, group_map=None,
                 use_mask: bool | None = None, categorical_actions: bool = True, seed: int | None = None,
                 done_on_any: bool | None = None, *, batch_size: BatchSize = None, **kwargs):
        num_envs = kwargs.pop("num_envs", None)
        super().__init__(*build_env("pettingzoo", "PettingZooEnv", batch_size, num_envs, "pettingzoo", task,
                                    parallel=parallel, return_state=return_state, group_map=group_map,
                                    use_mask=use_mask, categorical_actions=categorical_actions, seed=seed,
                                    done_on_any=done_on_any, **kwargs))


class OpenSpielEnv(TorchRLEnv):
    """``torchrl.envs.OpenSpielEnv``'s arguments, our OpenSpiel env inside, batched:
    ``OpenSpielEnv("tic_tac_toe", batch_size=(8,))`` is ``to_torchrl(marl_envs.make("openspiel/tic_tac_toe",
    num_envs=8, categorical_actions=False))``. One-hot actions by default, as TorchRL's; ``parameters`` are the
    game's (``{"players": 3}``). With ``return_state=True``, as TorchRL's, the data hold ``"state"``: each game
    serialized (a str per env), and ``reset(data)`` of data holding ``"state"`` resets the envs it selects (all,
    or a ``_reset`` entry's) to those games instead of new ones (``reset_to`` of our env). A step once every game
    has ended changes nothing, as TorchRL's: the same data, with rewards of 0 (in a batch of simultaneous-move
    games where only some have ended, it is refused: reset those first, as ``rollout`` and ``step_and_maybe_reset``
    do)."""

    available_envs = EnvNames("openspiel")
    lib = LibraryModule("pyspiel")

    def __init__(self, game_string: str, *, group_map=MarlGroupMapType.ALL_IN_ONE_GROUP,
                 categorical_actions: bool = False, return_state: bool = False, parameters: dict | None = None,
                 batch_size: BatchSize = None, num_envs: int | None = None, seed: int | None = None,
                 device: Device = None, **kwargs):
        env, batch = build_env("openspiel", "OpenSpielEnv", batch_size, num_envs, "openspiel", game_string,
                               group_map=group_map, categorical_actions=categorical_actions, seed=seed,
                               device=device or "cpu", **(parameters or {}), **kwargs)
        super().__init__(env, batch)
        # TorchRL's root "current_player": the player whose turn it is, read off the groups' "mask" (one acting
        # player), else pyspiel's ids for a simultaneous move (-2) and an ended game (-4, where "done" is set)
        groups = [group for group in env.group_map if (group, "mask") in env.observation_keys]
        players = [int(name.rpartition("_")[2]) for group in groups for name in env.group_map[group]]
        self._turns = (groups, torch.tensor(players, dtype=torch.int32, device=self.device))
        observations = self.full_observation_spec.clone()
        observations["current_player"] = rl_specs.Unbounded(self.batch_size, device=self.device, dtype=torch.int32)
        if return_state:
            observations["state"] = rl_specs.NonTensor(shape=self.batch_size, device=self.device)
        self.full_observation_spec = observations
        self.return_state = return_state
        self._ended: TensorDictBase | None = None  # the data of a step that ended every game: what a step repeats
        self._allow_done_after_reset = True  # as TorchRL's: reset(data) may put back a game that had ended

    def _step(self, tensordict):
        if self._ended is None:
            return super()._step(tensordict)
        data = self._ended.clone()  # saved by a step or by a reset to ended games (which has no rewards)
        for key in self.env.reward_keys:
            data.set(key, self.env.full_reward_spec[key].zero())
        return self._masked(self._out_of_env(data, complete=False))

    def _completed(self, data):
        groups, players = self._turns
        ended = data["done"].reshape(self.num_envs)
        if groups:
            acting = torch.cat([data[group, "mask"].reshape(self.num_envs, -1) for group in groups], -1)
            count = acting.sum(-1)
            turn = torch.where(count == 1, players[acting.int().argmax(-1)], -2)
            ended = ended | (count == 0)
        else:  # every player acts at every step: one player, or simultaneous moves
            turn = torch.full_like(ended, 0 if self.n_agents == 1 else -2, dtype=torch.int32)
        data.set("current_player", torch.where(ended, -4, turn).int())
        if self.return_state:
            data.set("state", NonTensorStack(*(NonTensorData(state) for state in self.env.game_states())))
        self._ended = data.clone() if bool(data["done"].all()) else None  # a CPU library: no device to wait on
        return data

    def _reset_env(self, tensordict, seed):
        if not self.return_state or tensordict is None or "state" not in tensordict.keys():
            return super()._reset_env(tensordict, seed)
        states = tensordict.get("state")
        states = states.tolist() if isinstance(states, NonTensorStack) else [states.data] * self.num_envs
        if seed is not None:
            self.env.set_seed(seed)
        return self.env.reset_to(states, tensordict.exclude("state"))


class OpenSpielWrapper(OpenSpielEnv):
    """``torchrl.envs.OpenSpielWrapper``'s arguments: ``OpenSpielWrapper(pyspiel.load_game("chess")
    .new_initial_state())`` builds our OpenSpiel env of that game, with its parameters, batched as
    ``OpenSpielEnv``.

    Raises:
        TypeError: ``env`` is not a ``pyspiel.State``.
        ValueError: the state is not the game's initial one (every env starts there and resets there).
    """

    def __init__(self, env=None, **kwargs):
        if not (hasattr(env, "get_game") and hasattr(env, "history")):
            raise TypeError(f"OpenSpielWrapper takes a pyspiel.State (pyspiel.load_game(name).new_initial_state()), "
                            f"got {type(env).__name__}")
        if env.history():
            raise ValueError(f"OpenSpielWrapper starts every env at the game's initial state; this state is "
                             f"{len(env.history())} moves in: pass game.new_initial_state()")
        game = env.get_game()
        parameters = {**game.get_parameters(), **kwargs.pop("parameters", {})}
        super().__init__(game.get_type().short_name, parameters=parameters, **kwargs)


class LBForagingEnv(TorchRLEnv):
    """``torchrl.envs.LBForagingEnv``'s arguments, our Level-Based Foraging env inside, batched:
    ``LBForagingEnv("Foraging-8x8-2p-2f-coop-v3", batch_size=(8,))``; other keywords are the task's."""

    available_envs = EnvNames("lbforaging")
    lib = LibraryModule("lbforaging")

    def __init__(self, env_name: str, *, categorical_actions: bool = True, seed: int | None = None,
                 batch_size: BatchSize = None, num_envs: int | None = None, device: Device = None, **kwargs):
        super().__init__(*build_env("lbforaging", "LBForagingEnv", batch_size, num_envs, "lbforaging", env_name,
                                    categorical_actions=categorical_actions, seed=seed, device=device or "cpu",
                                    **kwargs))


class LBForagingWrapper(LBForagingEnv):
    """``torchrl.envs.LBForagingWrapper``'s arguments: ``LBForagingWrapper(gymnasium.make(
    "Foraging-8x8-2p-2f-coop-v3"))`` builds our env of that registered id, batched as ``LBForagingEnv``.

    Raises:
        TypeError: ``env`` is not a Gymnasium env made from a registered id (it has no ``spec.id``).
    """

    def __init__(self, env=None, **kwargs):
        env_id = getattr(getattr(env, "spec", None), "id", None)
        if env_id is None:
            raise TypeError(f"LBForagingWrapper takes an env made by gymnasium.make('Foraging-...'), got "
                            f"{type(env).__name__} with no spec.id")
        super().__init__(env_id, **kwargs)


class JaxLibraryEnv(TorchRLEnv):
    """What TorchRL's Brax and Playground classes also have: ``_env``, the library's env inside (a Brax env is what
    ``BraxWrapper`` takes), and ``clear_cache()``."""

    @property
    def _env(self):
        return self.env.brax_env

    def clear_cache(self) -> None:
        """``jax.clear_caches()``, as TorchRL's: frees what JAX compiled (the env's programs compile again on use)."""
        import jax

        jax.clear_caches()

    def _step(self, tensordict):
        # TorchRL's classes carry the simulator state in the data, so data detached from the graph (truncated
        # backprop through time: `next_td = next_td.detach()`) start a new gradient history. Ours keeps the state in
        # the env: a differentiable env cuts its history where the observations handed in are detached.
        if getattr(self.env, "requires_grad", False):
            carried = [tensordict.get(key, None) for key in self.observation_keys]
            carried = [value for value in carried if value is not None and value.is_floating_point()]
            if carried and not any(value.requires_grad for value in carried):
                self.env.detach_state()
        return super()._step(tensordict)


class BraxEnv(JaxLibraryEnv):
    """``torchrl.envs.BraxEnv``'s arguments, our Brax env inside: ``BraxEnv("ant", batch_size=(128,))``; a single
    robot keeps TorchRL's single-agent keys, a split (``"ant_4x2"``) has its agents' group."""

    available_envs = EnvNames("brax")
    lib = LibraryModule("brax")

    def __init__(self, env_name: str, *, categorical_action_encoding: bool = False, requires_grad: bool = False,
                 cache_clear_frequency: int | None = None, batch_size: BatchSize = None, num_envs: int | None = None,
                 device: Device = None, seed: int | None = None, **kwargs):
        super().__init__(*build_env("brax", "BraxEnv", batch_size, num_envs, "brax", env_name, device=device or "cpu",
                                    requires_grad=requires_grad, cache_clear_frequency=cache_clear_frequency,
                                    seed=0 if seed is None else seed, **kwargs))


class BraxWrapper(JaxLibraryEnv):
    """``torchrl.envs.BraxWrapper``'s arguments, our ``BraxWrapper`` inside: ``BraxWrapper(brax.envs.get_environment(
    "ant"), batch_size=(128,))``."""

    def __init__(self, env=None, *, categorical_action_encoding: bool = False, requires_grad: bool = False,
                 cache_clear_frequency: int | None = None, batch_size: BatchSize = None, num_envs: int | None = None,
                 device: Device = None, seed: int | None = None, **kwargs):
        super().__init__(*build_env("brax", "BraxWrapper", batch_size, num_envs, "brax", env, device=device or "cpu",
                                    requires_grad=requires_grad, cache_clear_frequency=cache_clear_frequency,
                                    seed=0 if seed is None else seed, **kwargs))


class JumanjiEnv(TorchRLEnv):
    """``torchrl.envs.JumanjiEnv``'s arguments, our Jumanji env inside: ``JumanjiEnv("RobotWarehouse-v0",
    batch_size=(8,))``; the agents in their group, the shared fields at the root. ``jit`` is taken for TorchRL's
    signature; the step is compiled whatever its value.

    Raises:
        ValueError: ``categorical_action_encoding=False``: our Jumanji actions are categorical (one per agent).
    """

    available_envs = EnvNames("jumanji")
    lib = LibraryModule("jumanji")

    def __init__(self, env_name: str, *, categorical_action_encoding: bool = True, jit: bool = True,
                 batch_size: BatchSize = None, num_envs: int | None = None, device: Device = None,
                 seed: int | None = None, **kwargs):
        if not categorical_action_encoding:
            raise ValueError("JumanjiEnv(categorical_action_encoding=False): our Jumanji envs take categorical "
                             "actions (one choice per agent); leave it True and one-hot encode in the policy")
        super().__init__(*build_env("jumanji", "JumanjiEnv", batch_size, num_envs, "jumanji", env_name,
                                    device=device or "cpu", seed=0 if seed is None else seed, **kwargs))


class MeltingpotEnv(TorchRLEnv):
    """``torchrl.envs.MeltingpotEnv``'s arguments, our Melting Pot env inside, batched: ``MeltingpotEnv(
    "commons_harvest__open", batch_size=(8,))``; every player in one ``agents`` group (TorchRL's default), the
    world view at the root as ``"RGB"`` (our ``"state"``). Other keywords are ours (``num_workers``, ``roles``).

    Raises:
        TypeError: ``substrate`` is a config (each env builds its substrate by name, in its own process).
    """

    available_envs = EnvNames("meltingpot")
    lib = LibraryModule("meltingpot")

    def __init__(self, substrate: str, *, max_steps: int | None = None, categorical_actions: bool = True,
                 group_map=MarlGroupMapType.ALL_IN_ONE_GROUP, batch_size: BatchSize = None,
                 num_envs: int | None = None, device: Device = None, seed: int | None = None, **kwargs):
        if not isinstance(substrate, str):
            raise TypeError(f"MeltingpotEnv takes a substrate's name ('commons_harvest__open'), got "
                            f"{type(substrate).__name__}: each env builds its substrate by name, in its own process")
        super().__init__(*build_env("meltingpot", "MeltingpotEnv", batch_size, num_envs, "meltingpot", substrate,
                                    max_steps=max_steps, categorical_actions=categorical_actions, group_map=group_map,
                                    device=device or "cpu", seed=seed, **kwargs))
        observations = self.full_observation_spec.clone()
        observations["RGB"] = observations.pop("state")
        self.full_observation_spec = observations

    def _completed(self, data):
        return data.rename_key_("state", "RGB")

    def _reset(self, tensordict=None, **kwargs):
        if tensordict is not None and "RGB" in tensordict.keys():
            tensordict = tensordict.clone(False).rename_key_("RGB", "state")
        return super()._reset(tensordict, **kwargs)

    def get_rgb_image(self):
        """``WORLD.RGB`` of the first env, as TorchRL's ``get_rgb_image``."""
        return torch.from_numpy(self.env.render(0))


class MeltingpotWrapper(MeltingpotEnv):
    """``torchrl.envs.MeltingpotWrapper``'s arguments, with the substrate named: ``MeltingpotWrapper(env=
    "clean_up")``. A built ``Substrate`` is refused: it cannot be copied into a batch or sent to a worker process.

    Raises:
        TypeError: ``env`` is a built substrate.
    """

    def __init__(self, env=None, **kwargs):
        if not isinstance(env, str):
            raise TypeError(f"MeltingpotWrapper takes the substrate's name here (env='clean_up'), got "
                            f"{type(env).__name__}: a built substrate cannot be pickled into worker processes nor "
                            f"copied into a batch; each env builds its own")
        super().__init__(env, **kwargs)
