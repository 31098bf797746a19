import pytest
from envs import Drift, PredatorPreyCount

import marl_envs
from marl_envs import registry


@pytest.fixture(autouse=True)
def clean_user_registry(monkeypatch):
    monkeypatch.setattr(registry, "_USER_ENVS", {})


def test_register_and_make():
    marl_envs.register("test/drift", Drift)
    env = marl_envs.make("test/drift", num_envs=3, n_agents=4)
    assert isinstance(env, Drift) and env.group_map == {"agents": [f"agent_{i}" for i in range(4)]}
    assert "test/drift" in marl_envs.available_envs() and marl_envs.available_envs("user") == ["test/drift"]
    assert marl_envs.available_envs() == sorted(marl_envs.available_envs())


def test_unknown_name_suggests_close_matches():
    marl_envs.register("test/predator_prey", PredatorPreyCount)
    with pytest.raises(ValueError, match=r"unknown env 'test/predator_pray'; did you mean 'test/predator_prey'\? available: "):
        marl_envs.make("test/predator_pray", num_envs=1)


def test_unknown_keyword_is_type_error():
    marl_envs.register("test/drift", Drift)
    with pytest.raises(TypeError, match=r"'test/drift' got an unexpected keyword argument 'n_agent'; did you mean 'n_agents'\?"):
        marl_envs.make("test/drift", num_envs=1, n_agent=3)


def test_register_validation():
    marl_envs.register("test/drift", Drift)
    with pytest.raises(ValueError, match="env 'test/drift' is already registered; pass overwrite=True"):
        marl_envs.register("test/drift", Drift)
    marl_envs.register("test/drift", PredatorPreyCount, overwrite=True)
    with pytest.raises(ValueError, match="names starting with 'vmas/' belong to the vmas backend"):
        marl_envs.register("vmas/mine", Drift)
    with pytest.raises(TypeError, match="factory for 'x' must be callable"):
        marl_envs.register("x", 3)
    with pytest.raises(ValueError, match="env name must be a non-empty str"):
        marl_envs.register("", Drift)


def test_missing_backend_names_the_extra(monkeypatch):
    fake = registry._Backend("marl_envs.backends.vmas", ("surely_not_installed_pkg",), "vmas")
    monkeypatch.setitem(registry._BACKENDS, "vmas", fake)
    monkeypatch.setattr(registry, "_NAME_CACHE", {})
    assert not marl_envs.backend_installed("vmas")
    with pytest.raises(ImportError, match=r"the vmas backend needs surely_not_installed_pkg, which is not installed; install it with: pip install 'marl-envs\[vmas\]'"):
        marl_envs.make("vmas/balance", num_envs=2)
    with pytest.raises(ImportError, match=r"pip install 'marl-envs\[vmas\]'"):
        marl_envs.available_envs("vmas")
    assert all(not n.startswith("vmas/") for n in marl_envs.available_envs())


def test_unknown_backend():
    with pytest.raises(ValueError, match=r"unknown backend 'gym'; backends are \['brax', 'gymnax', 'jaxmarl', 'jumanji', 'lbforaging', 'magent2', 'mamujoco', 'openspiel', 'pettingzoo', 'playground', 'rware', 'vmas'\]"):
        marl_envs.available_envs("gym")
    with pytest.raises(TypeError, match="env name must be a str"):
        marl_envs.make(3)
