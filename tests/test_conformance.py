"""One conformance sweep over every registered env, generated from ``marl_envs.available_envs()``, and guards
that compare our registered names with each library's own list, read independently of our backends."""

from __future__ import annotations

import importlib.util
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest
import torch

import marl_envs
from marl_envs.registry import backend_module
from envs import SMALL_KWARGS, cheapest_brax_kwargs  # small configurations; defaults run under --all

NAMES = marl_envs.available_envs()  # every installed backend's envs (user envs are registered per test)
MAX_STEPS = 3


pytestmark = [
    # cooperative_pong renders in every reset and warns that no render mode was set
    pytest.mark.filterwarnings("ignore:.*calling render method without specifying any render mode:UserWarning"),
    # texas_holdem_no_limit builds a float64 Box that gymnasium casts to float32 at construction
    pytest.mark.filterwarnings("ignore:.*precision lowered by casting to float32:UserWarning"),
    # vel_control's velocity controllers warn at construction (a VMAS notice, not ours)
    pytest.mark.filterwarnings("ignore:Force limits not specified:UserWarning"),
    # JaxMARL's MABrax builds Brax envs (Brax's unmaintained notice); JaxNav warns about its own map range and
    # scatters int into bool (JAX's FutureWarning): notices from the libraries, not ours
    pytest.mark.filterwarnings("ignore:Brax System, piplines and environments:UserWarning"),
    pytest.mark.filterwarnings("ignore:max_dist_to_goal:UserWarning"),
    pytest.mark.filterwarnings("ignore:scatter inputs have incompatible types:FutureWarning"),
]


def _kwargs(name: str) -> dict:
    """The sweep's keywords for ``name``: small configurations, and Brax's cheapest pipeline."""
    backend, _, env = name.partition("/")
    if backend == "brax":
        return cheapest_brax_kwargs(env)
    return dict(SMALL_KWARGS.get(name, {}))


# Envs whose episodes after the first do not follow from the seed (upstream), so that check_env_specs cannot
# compare two runs of the same actions (its determinism and step_and_maybe_reset checks); documented in the
# PettingZoo page's known limits.
NOT_DETERMINISTIC = {
    "pettingzoo/butterfly/knights_archers_zombies_v11": "the zombie spawn timer is made when the env is built and "
                                                        "never reset, so spawns depend on the steps run before",
    "pettingzoo/classic/hanabi_v5": "an unseeded reset loads OpenSpiel's game with a fresh random seed",
}
NOT_DETERMINISTIC.update({name: "two substrates built with one env_seed differ in one process (Melting Pot 2.4.1)"
                          for name in NAMES if name.startswith("meltingpot/")})


def _conforms(name: str, **kwargs) -> None:
    """check_env_specs, then an auto-resetting rollout past ``max_steps``: data in the specs, ``done`` =
    ``terminated | truncated``, every episode truncated when it reaches ``max_steps``."""
    env = marl_envs.make(name, num_envs=2, seed=0, max_steps=MAX_STEPS, **kwargs)
    marl_envs.check_env_specs(env, seed=None if name in NOT_DETERMINISTIC else 0)
    td, length = env.reset(), torch.zeros(2, dtype=torch.int64)
    for _ in range(2 * MAX_STEPS):
        td, td_next = env.step_and_maybe_reset(env.rand_action(td))
        nxt = td["next"]
        assert env.full_observation_spec.is_in(nxt) and env.full_reward_spec.is_in(nxt)
        assert torch.equal(nxt["done"], nxt["terminated"] | nxt["truncated"])
        length += 1
        assert nxt["done"].reshape(2)[length == MAX_STEPS].all()
        assert not td_next["done"].any()  # a done env starts its next episode
        length[nxt["done"].reshape(2)] = 0
        td = td_next
    masked = any(key[-1] == "action_mask" for key in env.observation_keys if isinstance(key, tuple))
    env.close()
    if masked:
        _plays_masked(name, **kwargs)


def _plays_masked(name: str, **kwargs) -> None:
    """An env with action masks plays 200 random steps (``rand_action`` honouring the masks) with no refusal: also
    through rows that allow no choice (an agent with no legal move takes any action; ``legal_choices``)."""
    env = marl_envs.make(name, num_envs=4, seed=0, **kwargs)
    assert env.rollout(200, break_when_any_done=False).batch_size == (4, 200)
    env.close()


# JAX families: each env compiles its own reset and step (2 s to 2 min here); a representative set runs by default
JAX_DEFAULT = {"jaxmarl/MPE_simple_spread_v3", "jaxmarl/MPE_simple_adversary_v3", "jaxmarl/SMAX",
               "jaxmarl/switch_riddle", "gymnax/CartPole-v1", "gymnax/Pendulum-v1", "gymnax/Breakout-MinAtar",
               "jumanji/LevelBasedForaging-v0",  # every Jumanji env runs check_env_specs in tests/backends/test_jumanji.py
               "playground/CartpoleBalance"}  # a robot's MJX compiles for a minute: the others with --all


# Melting Pot's substrates build and reset their Lua worlds in seconds each: one by default, the 48 others with --all
MELTINGPOT_DEFAULT = {"meltingpot/collaborative_cooking__asymmetric"}
# bridge computes its double-dummy result at every deal (~10 ms a chance node, OpenSpiel's default): 20 s here
HEAVY = {"openspiel/bridge"}


def _param(name: str):
    heavy = (name.partition("/")[0] in ("jaxmarl", "gymnax", "jumanji", "playground") and name not in JAX_DEFAULT
             or name in HEAVY or name.startswith("meltingpot/") and name not in MELTINGPOT_DEFAULT)
    return pytest.param(name, marks=pytest.mark.slow) if heavy else name


@pytest.mark.parametrize("name", [_param(n) for n in NAMES])
def test_every_registered_env_conforms(name):
    _conforms(name, **_kwargs(name))


# Brax's scenes on MJX, the pipeline MuJoCo Playground builds on (a minute of compiling each here): ant_4x2 by
# default, the others with --all
MJX_SCENES = ["brax/ant_4x2", "brax/halfcheetah_6x1", "brax/hopper_3x1", "brax/walker2d_2x3", "brax/humanoid_9-8"]


@pytest.mark.parametrize("name", [n if n == "brax/ant_4x2" else pytest.param(n, marks=pytest.mark.slow)
                                  for n in MJX_SCENES])
def test_brax_scenes_conform_on_mjx(name):
    if name not in NAMES:
        pytest.skip("brax is not installed")
    _conforms(name, backend="mjx")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL_KWARGS))
def test_in_its_default_configuration(name):
    if name not in NAMES:
        pytest.skip(f"{name.partition('/')[0]} is not installed")
    _conforms(name)


# ----------------------------------------------------------------------------------------------------
# Our names against each library's own list
# ----------------------------------------------------------------------------------------------------
def _ours(backend: str) -> set[str]:
    return {name.partition("/")[2] for name in marl_envs.available_envs(backend)}


def test_vmas_names_are_its_scenario_modules():
    vmas = pytest.importorskip("vmas")
    root = Path(vmas.__file__).parent / "scenarios"
    modules = {p.stem for folder in (root, root / "mpe", root / "debug") for p in folder.glob("*.py")
               if not p.stem.startswith("_")}
    assert modules and _ours("vmas") == modules


def test_brax_names_are_its_registry_and_our_scenes():
    brax_envs = pytest.importorskip("brax.envs")
    scenes = {"ant_4x2", "halfcheetah_6x1", "hopper_3x1", "walker2d_2x3", "humanoid_9-8"}
    assert _ours("brax") == set(brax_envs._envs) | scenes


def test_pettingzoo_names_are_its_env_modules():
    """Every versioned env module of PettingZoo's families and of mpe2 is registered, except the Atari family:
    its ROMs are downloaded at run time (AutoROM), which this library's install cannot do, so it is left out of
    the ``pettingzoo`` extra."""
    pytest.importorskip("pettingzoo")
    modules = set()
    for family, package in [(f, f"pettingzoo.{f}") for f in ("atari", "butterfly", "classic", "sisl")] + [
        ("mpe", "mpe2")
    ]:
        path = importlib.util.find_spec(package).submodule_search_locations
        modules |= {f"{family}/{m.name}" for m in pkgutil.iter_modules(path) if re.fullmatch(r".+_v\d+", m.name)}
    ours = _ours("pettingzoo")
    assert ours <= modules
    assert modules - ours == {m for m in modules if m.startswith("atari/")}


def test_openspiel_names_are_its_games_that_load_less_those_left_out():
    """Every game ``pyspiel.registered_games()`` lists that loads with its defaults, less mean-field games, games
    with no observation tensor and games with sampled chance (the reasons in the backend's docstring)."""
    if not marl_envs.backend_installed("openspiel"):
        pytest.skip("openspiel is not installed")
    import pyspiel

    loads, left_out = set(), set()
    for kind in pyspiel.registered_games():
        try:
            game = pyspiel.load_game(kind.short_name)
        except (pyspiel.SpielError, IndexError):
            continue
        loads.add(kind.short_name)
        if (kind.dynamics.name == "MEAN_FIELD" or kind.chance_mode.name == "SAMPLED_STOCHASTIC"
                or not (kind.provides_observation_tensor or kind.provides_information_state_tensor)
                or game.num_distinct_actions() < 1):
            left_out.add(kind.short_name)
    assert {"kuhn_poker", "leduc_poker", "goofspiel", "mfg_garnet", "negotiation", "coin_game"} <= loads
    assert {"mfg_garnet", "negotiation", "coin_game"} <= left_out
    assert _ours("openspiel") == loads - left_out


def test_magent2_and_mamujoco_names_are_their_envs():
    """MAgent2's versioned env modules; MaMuJoCo's robots and partitions less the three left out with the reason
    (``ManySegment*``: model files written into the installed package; ``CoupledHalfCheetah``: fails in MaMuJoCo
    1.4.2 with MuJoCo 4)."""
    if not (marl_envs.backend_installed("magent2") and marl_envs.backend_installed("mamujoco")):
        pytest.skip("magent2 or mamujoco is not installed")
    import magent2.environments

    modules = {m.name for m in pkgutil.iter_modules(magent2.environments.__path__) if re.fullmatch(r".+_v\d+", m.name)}
    assert _ours("magent2") == modules == {"battle_v4", "battlefield_v5", "adversarial_pursuit_v4",
                                           "combined_arms_v6", "gather_v5", "tiger_deer_v4"}
    assert _ours("mamujoco") == {"HalfCheetah_2x3", "HalfCheetah_6x1", "Ant_2x4", "Ant_2x4d", "Ant_4x2",
                                 "Hopper_3x1", "Humanoid_9-8", "HumanoidStandup_9-8", "Reacher_2x1", "Pusher_3p",
                                 "Swimmer_2x1", "Walker2d_2x3"}


def _registry(backend: str, module: str) -> tuple[ModuleType, set[str]]:
    """Our backend's module and the names in the library's registry ``module`` (its ``registered_envs``), read
    there after our backend has configured JAX and imported the library quietly, not through ``env_names()``."""
    if not marl_envs.backend_installed(backend):
        pytest.skip(f"{backend} is not installed")
    ours = backend_module(backend)
    ours.env_names()
    return ours, set(importlib.import_module(module).registered_envs)


def test_jaxmarl_names_are_its_registry():
    """JaxMARL's registry less the envs ``unavailable()`` lists with the reason: JaxRobotarium's (their package is
    not on PyPI) and the four pinned here, so that no env leaves the list unnoticed."""
    jm, registry = _registry("jaxmarl", "jaxmarl.registration")
    robotarium = {name for name in registry if name.startswith("JaxRobotarium_")}
    unbuildable = robotarium | {"LearnedPolicyEnemySMAX", "storm", "storm_2p", "storm_np"}
    assert registry and set(jm.unavailable()) == unbuildable
    assert _ours("jaxmarl") == {name.replace("|", "-") for name in registry - unbuildable}  # a shell-safe name


def test_gymnax_names_are_its_registry():
    """gymnax's registry less MNISTBandit (it downloads MNIST when built), pinned here."""
    gx, registry = _registry("gymnax", "gymnax.registration")
    assert registry and set(gx.UNAVAILABLE) == {"MNISTBandit-bsuite"}
    assert _ours("gymnax") == registry - {"MNISTBandit-bsuite"}
