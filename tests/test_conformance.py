"""One conformance sweep over every registered env, generated from ``marl_envs.available_envs()``, and guards
that compare our registered names with each library's own list, read independently of our backends."""

from __future__ import annotations

import importlib.util
import pkgutil
import re
import warnings
from pathlib import Path

import pytest
import torch

import marl_envs
from envs import SMALL_KWARGS  # small configurations of the slowest envs; their defaults run under --all

NAMES = marl_envs.available_envs()  # every installed backend's envs (user envs are registered per test)
MAX_STEPS = 3


pytestmark = [
    # cooperative_pong renders in every reset and warns that no render mode was set
    pytest.mark.filterwarnings("ignore:.*calling render method without specifying any render mode:UserWarning"),
    # texas_holdem_no_limit builds a float64 Box that gymnasium casts to float32 at construction
    pytest.mark.filterwarnings("ignore:.*precision lowered by casting to float32:UserWarning"),
    # vel_control's velocity controllers warn at construction (a VMAS notice, not ours)
    pytest.mark.filterwarnings("ignore:Force limits not specified:UserWarning"),
]


def _kwargs(name: str) -> dict:
    """The sweep's keywords for ``name``: small configurations, and Brax's spring pipeline where the env takes it
    (its fastest on CPU)."""
    backend, _, env = name.partition("/")
    if backend != "brax":
        return dict(SMALL_KWARGS.get(name, {}))
    brax_envs = pytest.importorskip("brax.envs")
    from marl_envs.backends._brax_scenes import SCENES

    robot = SCENES[env].robot if env in SCENES else env
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            brax_envs.get_environment(robot, backend="spring")
        except ValueError:
            return {}
    return {"backend": "spring"}


def _conforms(name: str, **kwargs) -> None:
    """check_env_specs, then an auto-resetting rollout past ``max_steps``: data in the specs, ``done`` =
    ``terminated | truncated``, every episode truncated when it reaches ``max_steps``."""
    env = marl_envs.make(name, num_envs=2, seed=0, max_steps=MAX_STEPS, **kwargs)
    marl_envs.check_env_specs(env, seed=0)
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
    env.close()


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_env_conforms(name):
    _conforms(name, **_kwargs(name))


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
    scenes = {"ant_4x2", "halfcheetah_6x1", "hopper_3x1", "walker2d_2x3", "humanoid_9|8"}
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
