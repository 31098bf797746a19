"""Train any marl-envs env with BenchMARL: ``Experiment(task=task("vmas/balance", max_steps=100), ...)``.

``task(name, **env_kwargs)`` returns a BenchMARL ``TaskClass`` for any name ``marl_envs.make`` accepts. BenchMARL
builds the env through it with its own ``num_envs``, ``seed``, ``device`` and action type, and reads the group map,
the specs, ``max_steps``, rendering and infos from the env: no YAML to write.

Needs the ``benchmarl`` extra (``pip install 'marl-envs[benchmarl]'``: BenchMARL 1.5 and the TorchRL it pins,
0.11). ``import marl_envs`` never imports BenchMARL; importing this module does.

>>> from benchmarl.algorithms import MappoConfig
>>> from benchmarl.experiment import Experiment, ExperimentConfig
>>> from benchmarl.models import MlpConfig
>>> from marl_envs.benchmarl import task
>>> experiment = Experiment(task=task("vmas/balance", max_steps=100), algorithm_config=MappoConfig.get_from_yaml(),
...                         model_config=MlpConfig.get_from_yaml(), critic_model_config=MlpConfig.get_from_yaml(),
...                         seed=0, config=ExperimentConfig.get_from_yaml())  # doctest: +SKIP
>>> experiment.run()  # doctest: +SKIP

BenchMARL's own command line names every env as ``task=marl_envs/<name>``, the name with ``/`` as ``_``
(``python -m benchmarl.run algorithm=mappo task=marl_envs/vmas_balance``): Hydra imports our plugin
(``hydra_plugins.marl_envs_benchmarl``), which calls ``add_command_line_tasks`` in a BenchMARL run.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from typing import Any

import torch
from tensordict import TensorDictBase

from ._core.messages import missing_library

try:
    from benchmarl.environments import TaskClass
    from torchrl.data import Composite
    from torchrl.envs import EnvBase as _TorchRLEnvBase
    from torchrl.envs import DTypeCastTransform, FlattenObservation, Transform
except ImportError as err:  # pragma: no cover - exercised by the import test in the venvs without BenchMARL
    raise missing_library("marl_envs.benchmarl", "BenchMARL", err, "benchmarl", "BenchMARL 1.5 pins torchrl < 0.12: "
                          "TorchRL 0.11 and tensordict 0.11 replace newer ones") from err

from groupings import GroupMap

from . import specs
from ._core.env import EnvBase
from .registry import available_envs, make
from .torchrl import TorchRLEnv, to_torchrl

__all__ = ["COMMAND_LINE_GROUP", "CONTINUOUS", "DISCRETE", "MarlEnvsTask", "action_kind", "add_command_line_tasks",
           "benchmarl_defaults", "command_line_name", "task"]

CONTINUOUS, DISCRETE = "continuous", "discrete"
#: The keywords BenchMARL sets itself, each from its own configuration.
SET_BY_BENCHMARL = {
    "num_envs": "ExperimentConfig.n_envs_per_worker / evaluation_episodes",
    "seed": "Experiment(seed=...)",
    "device": "ExperimentConfig.sampling_device",
    "continuous_actions": "ExperimentConfig.prefer_continuous_actions and the algorithm's action types",
}
#: The dtypes cast to float32 for BenchMARL's models even where observations are not flattened (images, doubles).
_CAST = (torch.uint8, torch.float64)
#: The entries of a group that are not what its agents observe: what BenchMARL reads from its other specs.
NOT_OBSERVED = frozenset({"info", "action_mask", "mask"})


def action_kind(env: EnvBase) -> str:
    """``CONTINUOUS`` or ``DISCRETE``: the kind of every action of ``env``.

    Raises:
        ValueError: the env mixes both kinds (BenchMARL picks one per experiment).
    """
    kinds = {DISCRETE if isinstance(spec, (specs.Categorical, specs.OneHot, specs.MultiCategorical)) else CONTINUOUS
             for spec in (env.full_action_spec[key] for key in env.action_keys)}
    if len(kinds) != 1:
        raise ValueError(f"{env!r} has both continuous and discrete actions ({env.action_keys}); a BenchMARL "
                         f"experiment trains one kind: pass a keyword that makes them one kind")
    return kinds.pop()


def _build(name: str, kwargs: dict[str, Any], seed: int | None) -> TorchRLEnv:
    env = to_torchrl(make(name, **kwargs))
    if seed is not None:
        env.set_seed(seed)
    return env


class MarlEnvsTask(TaskClass):
    """A marl-envs env as a BenchMARL task; build it with ``task(name, **env_kwargs)``.

    ``name`` is the env's name as ``make`` takes it, with ``/`` replaced by ``_`` (BenchMARL names the experiment's
    folder after it); ``env_id`` is the name itself and ``config`` the env keywords.

    Attributes:
        env_id: the name ``make`` builds (``"vmas/balance"``).
        kinds: the action kinds the env offers (``{"continuous", "discrete"}`` where it takes ``continuous_actions``).
        eval_steps: the episode length of evaluation rollouts, the env's ``max_episode_length``.
        grids: the observed entries that are not flat (a board, an image), each with its shape per agent: an MLP
            takes them flattened (``flatten``), a CNN as they are.
    """

    def __init__(self, env_id: str, config: dict[str, Any], kinds: frozenset[str], eval_steps: int,
                 switchable: bool, flatten: bool = False, grids: dict[tuple[str, ...], tuple[int, ...]] | None = None):
        super().__init__(name=command_line_name(env_id), config=config)
        self.env_id = env_id
        self.kinds = kinds
        self.eval_steps = eval_steps
        self.flatten = flatten
        self.grids = grids or {}
        self._switchable = switchable  # the env takes continuous_actions=

    def get_env_fun(self, num_envs: int, continuous_actions: bool, seed: int | None, device: Any) -> functools.partial:
        """A zero-argument function building the env as a TorchRL env (``to_torchrl(make(...))``).

        Raises:
            ValueError: BenchMARL asks for an action kind the env does not have.
        """
        wanted = CONTINUOUS if continuous_actions else DISCRETE
        if wanted not in self.kinds:
            raise ValueError(f"BenchMARL asked {self.env_id!r} for {wanted} actions; it has {sorted(self.kinds)} "
                             f"actions only: pick an algorithm that takes those (BenchMARL's "
                             f"supports_{sorted(self.kinds)[0]}_actions())")
        kwargs = dict(self.config, num_envs=num_envs, device=device)
        if self._switchable:
            kwargs["continuous_actions"] = continuous_actions
        return functools.partial(_build, self.env_id, kwargs, seed)

    def get_env_transforms(self, env: _TorchRLEnvBase) -> list[Transform]:
        """With ``flatten``: each observed entry made an MLP's input, its feature dims flattened to one and its
        values cast to float32 (a board of int8 cells). Without: uint8 images and float64 values (Melting Pot's ``RGB``
        and scalars, a root ``state`` image) cast to float32, which BenchMARL's models take. BenchMARL reads the specs
        after these transforms."""
        spec, observed = env.full_observation_spec, self.observation_spec(env)
        transforms = []
        for group in env.group_map:
            for entry in observed[group].keys(True, True):
                key = (group, *entry) if isinstance(entry, tuple) else (group, entry)
                features = spec[key].ndim - 2  # less (num_envs, n_agents)
                if self.flatten and features > 1:
                    transforms.append(FlattenObservation(-features, -1, in_keys=[key]))
                if spec[key].dtype != torch.float32 and (self.flatten or spec[key].dtype in _CAST):
                    transforms.append(DTypeCastTransform(spec[key].dtype, torch.float32, in_keys=[key]))
        if "state" in spec.keys() and spec["state"].dtype in _CAST:
            transforms.append(DTypeCastTransform(spec["state"].dtype, torch.float32, in_keys=["state"]))
        return transforms

    def supports_continuous_actions(self) -> bool:
        return CONTINUOUS in self.kinds

    def supports_discrete_actions(self) -> bool:
        return DISCRETE in self.kinds

    def max_steps(self, env: _TorchRLEnvBase) -> int:
        return self.eval_steps

    def has_render(self, env: _TorchRLEnvBase) -> bool:
        return bool(env.renders)

    def group_map(self, env: _TorchRLEnvBase) -> GroupMap:
        return env.group_map

    def observation_spec(self, env: _TorchRLEnvBase) -> Composite:
        """The groups' entries less ``NOT_OBSERVED``: what BenchMARL's models read."""
        spec = env.full_observation_spec_unbatched
        observed = {}
        for group in env.group_map:
            observed[group] = spec[group].clone()
            for entry in NOT_OBSERVED.intersection(spec[group].keys()):
                del observed[group][entry]
        return Composite(observed)

    def info_spec(self, env: _TorchRLEnvBase) -> Composite | None:
        return self._group_entries(env, "info")

    def action_mask_spec(self, env: _TorchRLEnvBase) -> Composite | None:
        return self._group_entries(env, "action_mask")

    def state_spec(self, env: _TorchRLEnvBase) -> Composite | None:
        spec = env.full_observation_spec_unbatched
        return Composite({"state": spec["state"].clone()}) if "state" in spec.keys() else None

    def action_spec(self, env: _TorchRLEnvBase) -> Composite:
        return env.full_action_spec_unbatched

    @staticmethod
    def _group_entries(env: _TorchRLEnvBase, entry: str) -> Composite | None:
        """``Composite(group: Composite(entry: ...))`` for the groups that have ``entry``, None if none has."""
        spec = env.full_observation_spec_unbatched
        found = {group: Composite({entry: spec[group, entry].clone()}) for group in env.group_map
                 if entry in spec[group].keys()}
        return Composite(found) if found else None

    @staticmethod
    def env_name() -> str:
        return "marl_envs"

    @staticmethod
    def log_info(batch: TensorDictBase) -> dict[str, float]:
        """Each info's mean over the steps that end an episode (``collection/<group>/episode_end/<key>``): a win
        signal read there is a win rate. BenchMARL logs the mean over every step itself (``.../info/<key>``)."""
        done = batch.get(("next", "done"), None)
        if done is None or not done.any():
            return {}
        logged = {}
        for group, data in batch.get("next").items():
            infos = data.get("info", None) if isinstance(data, TensorDictBase) else None
            if not isinstance(infos, TensorDictBase):
                continue
            for key, value in infos.items(True, True):
                ended = done.reshape(*done.shape[:-1], *([1] * (value.ndim - done.ndim + 1))).expand_as(value)
                name = "/".join(key) if isinstance(key, tuple) else key
                logged[f"collection/{group}/episode_end/{name}"] = value[ended].float().mean().item()
        return logged

    @staticmethod
    def render_callback(experiment: Any, env: _TorchRLEnvBase, data: TensorDictBase) -> Any:
        """An ``(H, W, 3)`` uint8 frame of the first evaluation env, for BenchMARL's videos."""
        return env.render()


#: Our backends whose tasks BenchMARL configures too, and the folder of its task configurations.
_BENCHMARL_FOLDERS = {"vmas": "vmas", "pettingzoo": "pettingzoo", "magent2": "magent"}


def benchmarl_defaults(name: str) -> dict[str, Any]:
    """The keywords of BenchMARL's own configuration of the same task (``conf/task/vmas/balance.yaml`` for
    ``"vmas/balance"``, ``conf/task/pettingzoo/simple_spread.yaml`` for ``"pettingzoo/mpe/simple_spread_v3"``), as
    ``VmasTask.BALANCE.get_from_yaml()`` reads them; ``{}`` where BenchMARL has none."""
    backend, _, rest = name.partition("/")
    folder = _BENCHMARL_FOLDERS.get(backend)
    if folder is None:
        return {}
    task_name = rest.rpartition("/")[2]
    stem = re.sub(r"_v\d+$", "", task_name)
    path = importlib.resources.files("benchmarl") / "conf" / "task" / folder / f"{stem}.yaml"
    if not path.is_file():
        return {}
    import yaml  # BenchMARL's configuration library (hydra) depends on it

    config = yaml.safe_load(path.read_text()) or {}
    if config.get("task", task_name) != task_name:
        return {}  # another version of the task
    return {key: value for key, value in config.items() if key not in ("defaults", "task")}


def task(name: str, *, flatten_observations: bool = False, **env_kwargs: Any) -> MarlEnvsTask:
    """A BenchMARL ``TaskClass`` for ``marl_envs.make(name, **env_kwargs)``.

    Where BenchMARL ships a configuration of the same task (its VMAS, PettingZoo and MAgent2 tasks), its keywords
    (``max_steps``, ``max_cycles``, ``n_agents``, ...) are the defaults, as for a user of ``VmasTask``; the keywords
    given here replace them. The env is built once here, with one env, to check the name and keywords and to read
    its action kinds and episode length (``max_episode_length``: the time limit, or the bound of a game that ends
    itself): an error surfaces now, not inside BenchMARL's experiment.

    Args:
        name: any name ``marl_envs.make`` accepts (``"vmas/balance"``, ``"brax/ant_4x2"``, ...).
        flatten_observations: make each observation an MLP's input: its feature dims (a board, an image) flattened
            to one, its values cast to float32. BenchMARL's ``MlpConfig`` refuses other shapes (``CnnConfig``
            takes images as they are).
        **env_kwargs: the env's keywords (``max_steps``, ``n_agents``, ...), less those BenchMARL sets
            (``SET_BY_BENCHMARL``).

    Raises:
        ValueError: a keyword BenchMARL sets; a single-agent env (BenchMARL trains groups of agents); an env
            with no episode length (BenchMARL's evaluation rolls out that many steps: pass ``max_steps=N``).
        TypeError, ImportError: as ``marl_envs.make`` raises them (a keyword the env does not take, a backend not
            installed).
    """
    return _task(name, flatten_observations, env_kwargs, f"task({name!r}, max_steps=N)")


def _task(name: str, flatten_observations: bool, env_kwargs: dict[str, Any], pass_max_steps: str) -> MarlEnvsTask:
    """``task``'s work; ``pass_max_steps`` says how to pass ``max_steps`` where it is missing (Python or the
    command line)."""
    for key in SET_BY_BENCHMARL.keys() & env_kwargs.keys():
        raise ValueError(f"task({name!r}) got {key}={env_kwargs[key]!r}, which BenchMARL sets from "
                         f"{SET_BY_BENCHMARL[key]}: leave it out of the task's keywords")
    env_kwargs = {**benchmarl_defaults(name), **env_kwargs}
    probe = make(name, num_envs=1, **env_kwargs)
    try:
        if not probe.group_map:
            raise ValueError(f"{name!r} is a single-agent env (its data sit at the root, in no group) and BenchMARL "
                             f"trains groups of agents: pick a multi-agent env (marl-envs list)")
        if probe.max_episode_length is None:
            raise ValueError(f"{name!r} has no time limit of its own and BenchMARL's evaluation rolls episodes out for "
                             f"max_steps steps: pass it, {pass_max_steps} (episodes the env ends earlier still end "
                             f"there)")
        kinds, switchable = {action_kind(probe)}, False
        try:  # the other kind
            flipped = make(name, num_envs=1, continuous_actions=CONTINUOUS not in kinds, **env_kwargs)
        except TypeError as err:  # the env has one action kind
            if "continuous_actions" not in str(err):
                raise
        else:
            kinds.add(action_kind(flipped))
            switchable = True
            flipped.close()
        observed = probe.full_observation_spec
        grids = {(group, *key) if isinstance(key, tuple) else (group, key): tuple(observed[group][key].shape[2:])
                 for group in probe.group_map
                 for key in observed[group].keys(True, True)
                 if (key[0] if isinstance(key, tuple) else key) not in NOT_OBSERVED
                 and len(observed[group][key].shape) > 3}  # (num_envs, n_agents, *features)
        return MarlEnvsTask(name, dict(env_kwargs), frozenset(kinds), probe.max_episode_length, switchable,
                            flatten=flatten_observations, grids=grids)
    finally:
        probe.close()


#: The group of BenchMARL's command line that holds our tasks: ``task=marl_envs/<command_line_name(name)>``.
COMMAND_LINE_GROUP = "marl_envs"


def command_line_name(name: str) -> str:
    """Env ``name`` as BenchMARL's command line names it in ``COMMAND_LINE_GROUP`` (and as its experiment folders
    do): ``/`` as ``_``, since BenchMARL splits a task's name on exactly one ``/`` (``vmas_balance``)."""
    return name.replace("/", "_")


class _CommandLineTask:
    """The entry of BenchMARL's ``task_config_registry`` for ``task=marl_envs/<name>``: what a ``Task`` enum member
    is to BenchMARL's own tasks (``get_task(config)``)."""

    def __init__(self, env_id: str):
        self.env_id = env_id

    def get_task(self, config: dict[str, Any] | None = None) -> MarlEnvsTask:
        """``task(env_id, **config)`` (a ``max_steps`` of None left out), after checking that the models chosen on
        the command line take the env's observations."""
        config = dict(config or {})
        flatten = bool(config.pop("flatten_observations", False))
        if config.get("max_steps", 0) is None:
            del config["max_steps"]
        built = _task(self.env_id, flatten, config, "task.max_steps=N")
        if built.grids and not flatten:
            _check_models(built)
        return built


def _check_models(built: MarlEnvsTask) -> None:
    """A clear error, before BenchMARL builds anything, where an MLP was chosen for an env that observes grids."""
    from hydra.core.hydra_config import HydraConfig

    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    mlps = [f"{key}={choices[key]}" for key in ("model", "model@critic_model")
            if choices.get(key) is not None and choices[key].endswith("mlp")]
    if mlps:
        key, shape = next(iter(built.grids.items()))
        smallest = min(min(shape[:2]) for shape in built.grids.values())
        padding = (" (its 3x3 kernels without padding need at least 7x7: add model.cnn_paddings=1 "
                   "critic_model.cnn_paddings=1)" if smallest < 7 else "")
        raise ValueError(
            f"task=marl_envs/{built.name} observes {'/'.join(key)} as a grid of shape {shape} per agent, and "
            f"{' and '.join(mlps)} (BenchMARL's MLP) take{'s' if len(mlps) == 1 else ''} flat vectors: pick "
            f"BenchMARL's CNN, model=layers/cnn model@critic_model=layers/cnn{padding}, or flatten the grids for the "
            f"MLP with task.flatten_observations=true")


def add_command_line_tasks() -> None:
    """Name every env on BenchMARL's command line (``task=marl_envs/vmas_balance``): its configuration in Hydra's
    config store, as ``task/marl_envs/<name>``, and its entry in BenchMARL's ``task_config_registry``.

    A configuration holds BenchMARL's own keywords where it has the task (``benchmarl_defaults``), ``max_steps``
    (None: the env's own) and ``flatten_observations``; other keywords are added with Hydra's ``+``
    (``+task.n_agents=3``). Hydra calls this through our plugin when BenchMARL is imported."""
    from benchmarl.environments import task_config_registry
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name in available_envs():
        key = command_line_name(name)
        store.store(group=f"task/{COMMAND_LINE_GROUP}", name=key,
                    node={"max_steps": None, "flatten_observations": False, **benchmarl_defaults(name)})
        task_config_registry.setdefault(f"{COMMAND_LINE_GROUP}/{key}", _CommandLineTask(name))
