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


FAMILIES = re.escape(", ".join(marl_envs.available_backends()))
LISTED = r" \(marl_envs.available_backends\(\); marl-envs list FAMILY lists a family's envs\)$"


@pytest.mark.parametrize("name", ["gfootball/academy_3_vs_1", "unity/3DBall"])
def test_a_name_of_no_family_names_the_families(name):
    family = name.partition("/")[0]
    with pytest.raises(ValueError, match=rf"^unknown env family '{family}' in '{name}': marl_envs has no {family} "
                                         rf"family; the families are {FAMILIES}{LISTED}"):
        marl_envs.make(name, num_envs=1)


NEAREST = {  # a name of a library that is no family here -> the env the message names, and what it says of it
    "smac/3m": ("jaxmarl/HeuristicEnemySMAX", {"scenario": "3m"},
                r"JaxMARL's SMAX plays SMAC's maps in JAX, HeuristicEnemySMAX against a scripted enemy as SMAC's "
                r"built-in AI: "),
    "smac/3mm": ("jaxmarl/HeuristicEnemySMAX", {"scenario": "3m"}, r"; the nearest map to '3mm' is '3m': "),
    "smacv2/protoss_5_vs_5": ("jaxmarl/HeuristicEnemySMAX", {"scenario": "smacv2_5_units"},
                              r"JaxMARL's SMAX has SMACv2's maps in JAX, drawing the units' start positions and types "
                              r"as SMACv2 does \(their types from SMAX's six, of every race\): "),
    "overcooked/cramped_room": ("jaxmarl/overcooked_v2", {"layout": "cramped_room"},
                                r"JaxMARL's Overcooked has Overcooked-AI's layouts in JAX: "),
    "overcooked/coordination_ring": ("jaxmarl/overcooked_v2", {"layout": "coord_ring"},
                                     r"; the nearest layout to 'coordination_ring' is 'coord_ring': "),
}


@pytest.mark.parametrize("name", list(NEAREST))
def test_a_library_that_is_no_family_is_answered_with_the_nearest_env(name):
    family = name.partition("/")[0]
    env_name, kwargs, said = NEAREST[name]
    (keyword, value), = kwargs.items()
    call = re.escape(f"marl_envs.make('{env_name}', {keyword}={value!r})")
    with pytest.raises(ValueError, match=rf"^unknown env family '{family}' in '{name}': marl_envs has no {family} "
                                         rf"family; .*{said}{call} \(.*marl-envs info {env_name} {keyword}={value}"
                                         rf"[;)].*; the families are {FAMILIES}{LISTED}"):
        marl_envs.make(name, num_envs=1)


def test_the_nearest_env_a_message_names_builds():
    if not marl_envs.backend_installed("jaxmarl"):
        pytest.skip("jaxmarl is not installed")
    for name in ("smac/3m", "smacv2/protoss_5_vs_5", "overcooked/cramped_room", "overcooked/coordination_ring"):
        with pytest.raises(ValueError) as err:
            marl_envs.make(name)
        env_name, keyword, value = re.search(r"marl_envs.make\('([^']+)', (\w+)='([^']+)'\)", str(err.value)).groups()
        assert (env_name, {keyword: value}) == NEAREST[name][:2]
        marl_envs.make(env_name, num_envs=1, **{keyword: value}).close()


@pytest.mark.parametrize("name, meant", [("vmass/balance", "vmas/balance"), ("VMAS/balance", "vmas/balance"),
                                         ("jax_marl/SMAX", "jaxmarl/SMAX")])
def test_a_misspelled_family_is_answered_with_the_family(name, meant):
    with pytest.raises(ValueError, match=rf"^unknown env family '{name.partition('/')[0]}' in '{name}'; did you mean "
                                         rf"'{meant}'\? the families are {FAMILIES}{LISTED}"):
        marl_envs.make(name)


def test_a_name_of_a_family_in_the_wrong_case_is_offered_first():
    if not marl_envs.backend_installed("jaxmarl"):
        pytest.skip("jaxmarl is not installed")
    # among the family's own names (not the registry's first twelve), the name but for case before any other
    with pytest.raises(ValueError, match=r"^unknown JaxMARL env 'jaxmarl/smax'; did you mean 'jaxmarl/SMAX'\? "
                                         r"available: jaxmarl/HeuristicEnemySMAX, "):
        marl_envs.make("jaxmarl/smax", num_envs=1)


def test_a_registered_family_and_a_name_of_no_family_are_looked_up_among_the_names():
    marl_envs.register("test/predator_prey", PredatorPreyCount)
    with pytest.raises(ValueError, match=r"^unknown env 'test/predator_pray'; did you mean 'test/predator_prey'\? "
                                         r"available: test/predator_prey \(marl_envs.available_envs\(\) lists them"):
        marl_envs.make("test/predator_pray")
    with pytest.raises(ValueError, match=r"^unknown env 'predator_prey'; did you mean 'test/predator_prey'( or "
                                         r"'meltingpot/predator_prey__open')?\? "):
        marl_envs.make("predator_prey")


def _typed(*, num_envs: int = 1, scale: float = 1.0, steps: int | None = None, rounds=3, rate=0.5, flag=False,
           anything=None, **_):
    return Drift(num_envs=num_envs)


def _plain(*, num_envs=1, rounds=3, rate=0.5, flag=False, anything=None, label="a", steps: "int | None" = None):
    return Drift(num_envs=num_envs)


@pytest.mark.parametrize("keyword, value, message", [
    ("rounds", "3", r"got rounds='3' \(a str\); rounds takes an int, like its default 3: pass rounds=3, without the "
                    r"quotes$"),
    ("rounds", True, r"got rounds=True \(a bool\); rounds takes an int, like its default 3: pass e.g. rounds=3$"),
    ("rate", "fast", r"got rate='fast' \(a str\); rate takes a float \(or an int\), like its default 0.5: pass e.g. "
                     r"rate=0.5$"),
    ("rate", False, r"got rate=False \(a bool\); rate takes a float \(or an int\)"),
    ("flag", 1, r"got flag=1 \(an int\); flag takes a bool \(True or False\), like its default False: pass flag=True$"),
    ("flag", "no", r"got flag='no' \(a str\); flag takes a bool \(True or False\), like its default False"),
    ("rounds", None, r"got rounds=None; rounds takes an int, like its default 3: pass e.g. rounds=3$"),
    ("steps", 2.5, r"got steps=2.5 \(a float\); steps takes an int or None: pass an int or None$"),  # annotated
])
def test_a_value_of_the_wrong_type_names_the_keyword_the_type_taken_and_the_fix(keyword, value, message):
    marl_envs.register("test/plain", _plain)
    with pytest.raises(TypeError, match=rf"^'test/plain' {message}"):
        marl_envs.make("test/plain", **{keyword: value})


def test_every_value_of_the_type_a_keyword_takes_is_taken():
    """An int default takes an int (a float too: libraries write ``5`` for a mass of 5.0), a float default an int
    or a float, a bool default a bool; NumPy scalars and 0-d arrays count as what they hold; a None, str or absent
    default anything."""
    import numpy as np
    import torch

    marl_envs.register("test/plain", _plain)
    for kwargs in [dict(rounds=4), dict(rounds=4.5), dict(rounds=np.int64(4)), dict(rounds=torch.tensor(4)),
                   dict(rate=1), dict(rate=np.float32(0.25)), dict(flag=True), dict(flag=np.bool_(True)),
                   dict(anything="x"), dict(anything=[1]), dict(label=3), dict(steps=None), dict(steps=2)]:
        marl_envs.make("test/plain", **kwargs).close()


def test_annotations_say_what_a_keyword_takes_where_they_are_int_float_or_bool():
    marl_envs.register("test/typed", _typed)
    marl_envs.make("test/typed", scale=2, steps=None, rounds=2.5, other="x").close()  # **_: other may be right
    with pytest.raises(TypeError, match=r"^'test/typed' got scale='2' \(a str\); scale takes a float \(or an int\), "
                                        r"like its default 1.0: pass scale=2, without the quotes$"):
        marl_envs.make("test/typed", scale="2")
    with pytest.raises(TypeError, match=r"^'test/typed' got num_envs=2.0 \(a float\); num_envs takes an int, like its "
                                        r"default 1: pass e.g. num_envs=1$"):
        marl_envs.make("test/typed", num_envs=2.0)
