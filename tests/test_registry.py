import re

import pytest
from envs import Drift, PredatorPreyCount

import marl_envs
from marl_envs import cli, registry


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
    fake = registry.Backend("marl_envs.backends.vmas", ("surely_not_installed_pkg",), "vmas")
    monkeypatch.setitem(registry._BACKENDS, "vmas", fake)
    monkeypatch.setattr(registry, "_NAME_CACHE", {})
    assert not marl_envs.backend_installed("vmas")
    with pytest.raises(ImportError, match=r"the vmas backend needs surely_not_installed_pkg, which is not installed; install it with: pip install 'marl-envs\[vmas\]'"):
        marl_envs.make("vmas/balance", num_envs=2)
    with pytest.raises(ImportError, match=r"pip install 'marl-envs\[vmas\]'"):
        marl_envs.available_envs("vmas")
    assert all(not n.startswith("vmas/") for n in marl_envs.available_envs())


def test_unknown_backend():
    backends = re.escape(repr(sorted(marl_envs.registry.backends())))  # every registered backend, sorted
    with pytest.raises(ValueError, match=rf"unknown backend 'gym'; backends are {backends}"):
        marl_envs.available_envs("gym")
    with pytest.raises(TypeError, match="env name must be a str"):
        marl_envs.make(3)


def test_every_name_is_taken_unquoted_by_a_shell():
    """``marl-envs info NAME`` works for every registered name as typed (no quoting): letters, digits and
    ``_ . / -`` only; a split robot's joint counts are written ``9-8`` in every family."""
    import re
    import shlex

    names = marl_envs.available_envs()
    assert names and [n for n in names if not re.fullmatch(r"[A-Za-z0-9_./-]+", n)] == []
    assert all(shlex.quote(n) == n for n in names)
    for split in ("brax/humanoid_9-8", "jaxmarl/humanoid_9-8", "playground/HumanoidRun_9-12", "mamujoco/Humanoid_9-8"):
        assert split in names or not marl_envs.backend_installed(split.partition("/")[0])


def test_an_old_split_name_still_builds_and_names_the_new_one():
    """Through ``make`` (one path for every backend: JaxMARL's and Playground's old names too) and the env class."""
    if not marl_envs.backend_installed("brax"):
        pytest.skip("brax is not installed")
    from marl_envs.backends.brax import BraxEnv

    tail = r" is now 'brax/humanoid_9-8' \(a '\|' in a name is a pipe in a shell\); the old name will be removed"
    with pytest.warns(DeprecationWarning, match=r"the env name 'brax/humanoid_9\|8'" + tail):
        env = marl_envs.make("brax/humanoid_9|8", num_envs=1)
    assert env.env_name == "humanoid_9-8"
    with pytest.warns(DeprecationWarning, match=r"the Brax env name 'humanoid_9\|8' is now 'humanoid_9-8'"):
        assert BraxEnv("humanoid_9|8", num_envs=1).group_map == env.group_map


def _misspelled(name: str) -> str:
    """``name`` with a letter of its env part doubled (``vmas/balance`` -> ``vmas/balaance``)."""
    backend, _, env = name.partition("/")
    i = next(i for i in range(len(env) // 2, len(env)) if env[i].isalpha())
    return f"{backend}/{env[:i]}{env[i]}{env[i:]}"


@pytest.mark.parametrize("backend", marl_envs.available_backends())
def test_a_misspelled_name_is_answered_with_the_name_make_takes(backend):
    """Every backend's refusal of a name offers the full name ``make`` takes, from ``make`` and from ``marl-envs
    info`` alike; no keyword is needed for the name to be checked first."""
    name = registry.backend_record(backend).check_env[0]
    # (a short name, magent2/battle, is offered as its listed one, magent2/battle_v4)
    with pytest.raises(ValueError, match=rf"'{_misspelled(name)}'; did you mean '{re.escape(name)}(_v\d+)?'"):
        marl_envs.make(_misspelled(name))


def test_the_command_line_offers_the_full_name(capsys):
    assert cli.main(["info", "vmas/navigatoin"]) == 1
    assert "did you mean 'vmas/navigation'?" in capsys.readouterr().err
