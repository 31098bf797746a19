"""One keyword check for every way an env is built: typos of env-level and backend keywords, library values and
devices get the same kind of message from every backend."""

import importlib
import re

import pytest
import torch

import marl_envs
from marl_envs._core.validate import env_keywords

# name, the backend class its keywords are read from, one of the backend's own keywords (and a value for it)
BACKENDS = {
    "vmas": ("vmas/balance", "VmasEnv", ("n_agents", 2)),
    "brax": ("brax/ant", "BraxEnv", ("ctrl_cost_weight", 0.5)),
    "pettingzoo": ("pettingzoo/mpe/simple_spread_v3", "PettingZooEnv", ("max_cycles", 10)),
    "jaxmarl": ("jaxmarl/SMAX", "JaxMarlEnv", ("scenario", "3m")),
    "gymnax": ("gymnax/CartPole-v1", "GymnaxEnv", ("env_params", {})),
}
# a value each env-level keyword accepts, so that only its misspelled name is wrong
VALUES = {"num_envs": 2, "device": "cpu", "max_steps": 5, "seed": 0, "group_map": None, "num_workers": 0,
          "backend": "spring", "frame_skip": 1, "parallel": True, "mapping": None}


def _typo(keyword: str) -> str:
    return keyword[:-1] if len(keyword) > 3 else keyword + keyword[-1]


def _class(backend: str):
    if not marl_envs.backend_installed(backend):
        pytest.skip(f"{backend} is not installed")
    return getattr(marl_envs.registry.backend_module(backend), BACKENDS[backend][1])


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_typo_of_every_env_keyword_names_it(backend):
    cls = _class(backend)
    name = BACKENDS[backend][0]
    keywords = env_keywords(cls)
    assert {"num_envs", "device", "max_steps", "seed"} <= set(keywords)
    for keyword in keywords:
        kwargs = {"num_envs": 2, _typo(keyword): VALUES.get(keyword, True)}
        if keyword == "num_envs":
            kwargs.pop("num_envs")
        with pytest.raises(TypeError, match=rf"unexpected keyword argument '{re.escape(_typo(keyword))}'; "
                                            rf"did you mean '{keyword}'\? it accepts "):
            marl_envs.make(name, **kwargs)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_typo_of_a_backend_keyword_names_it_and_lists_both_kinds(backend):
    cls = _class(backend)
    name, _, (keyword, value) = BACKENDS[backend]
    marl_envs.make(name, num_envs=2, **{keyword: value}).close()  # the keyword itself is accepted
    typo = _typo(keyword)
    with pytest.raises(TypeError, match=rf"unexpected keyword argument '{typo}'; did you mean '{keyword}'\?") as err:
        marl_envs.make(name, num_envs=2, **{typo: value})
    message = str(err.value)
    if backend != "gymnax":  # gymnax's own values are one keyword (env_params), checked as a field name below
        assert "it accepts the env keywords ['" in message and "keywords [" in message.split("and", 1)[1]
    assert all(repr(k) in message for k in env_keywords(cls))


def test_gymnax_env_params_field_typo():
    _class("gymnax")
    with pytest.raises(ValueError, match=r"gymnax CartPole-v1 has no parameter 'max_steps_in_episod'; did you mean "
                                         r"'max_steps_in_episode'\? its parameters are \["):
        marl_envs.make("gymnax/CartPole-v1", num_envs=2, env_params={"max_steps_in_episod": 10})


def test_jaxmarl_keywords_the_library_would_ignore_are_refused():
    """JaxMARL's MPE envs take ``**kwargs`` and read the keys they know: a typo would be dropped silently."""
    _class("jaxmarl")
    marl_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=2, local_ratio=0.3).close()  # read by MPE
    with pytest.raises(TypeError, match=r"JaxMARL env 'MPE_simple_spread_v3' got an unexpected keyword argument "
                                        r"'local_raito'; did you mean 'local_ratio'\?"):
        marl_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=2, local_raito=0.3)
    with pytest.raises(TypeError, match=r"'HeuristicEnemySMAX' got an unexpected keyword argument 'num_ally'; did "
                                        r"you mean 'num_allies'\?"):  # SMAX's keywords, through the wrapper
        marl_envs.make("jaxmarl/HeuristicEnemySMAX", num_envs=2, num_ally=3)


def test_smax_map_lists_the_maps():
    _class("jaxmarl")
    with pytest.raises(ValueError, match=r"unknown SMAX map '3mm'; did you mean '3m'\? available: 3m, 2s3z, "):
        marl_envs.make("jaxmarl/SMAX", num_envs=2, scenario="3mm")


def test_brax_physics_backend_lists_the_backends():
    _class("brax")
    from marl_envs.backends.brax import PHYSICS_BACKENDS, import_brax, quiet_brax_build

    with pytest.raises(ValueError, match=r"unknown Brax physics backend 'sprng'; did you mean 'spring'\? available: "
                                         r"generalized, positional, spring, mjx"):
        marl_envs.make("brax/ant", num_envs=2, backend="sprng")
    with pytest.raises(ValueError) as err, quiet_brax_build():  # Brax's own list, to keep ours in step with it
        import_brax().get_environment("ant", backend="not_a_backend")
    assert sorted(re.findall(r"'(\w+)'", str(err.value))) == sorted(PHYSICS_BACKENDS)


def test_the_envs_own_keywords_checked_before_import_are_their_signatures():
    """The JaxMARL and Brax checks run before any import tell the env's own keywords from the library env's by
    a declared list: it is the env class's signature."""
    for backend, declared in [("jaxmarl", "marl_envs.backends.jaxmarl._library"),
                              ("brax", "marl_envs.backends.brax._library")]:
        _class(backend)
        cls = marl_envs.registry.backend_module(backend)
        env_class = getattr(cls, marl_envs.registry.backend_record(backend).env_class)
        assert importlib.import_module(declared).ENV_KEYWORDS == tuple(env_keywords(env_class)), backend


def test_pettingzoo_render_mode_lists_the_modes():
    _class("pettingzoo")
    with pytest.raises(ValueError, match=r"pettingzoo task 'mpe/simple_spread_v3' has no render_mode 'rgb'; did you "
                                         r"mean 'rgb_array'\? its render modes are \['human', 'rgb_array'\]"):
        marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, render_mode="rgb")


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_unavailable_device_is_one_error(backend):
    _class(backend)
    name = BACKENDS[backend][0]
    if torch.version.cuda is None:
        bad, why = "cuda", r"this torch \(.*\) is a CPU build; install a CUDA build of torch"
    else:
        bad, why = f"cuda:{torch.cuda.device_count()}", r"torch sees \d+ CUDA device\(s\); this machine has \['cpu', "
    with pytest.raises(ValueError, match=rf"device '{bad}' is not available: {why}"):
        marl_envs.make(name, num_envs=2, device=bad)
    with pytest.raises(ValueError, match=r"device 'cdua' is not a device; expected 'cpu', 'cuda' or 'cuda:<index>' "
                                         r"\(or a torch.device\); this machine has \['cpu'"):
        marl_envs.make(name, num_envs=2, device="cdua")


def test_a_missing_required_argument_is_not_blamed_on_a_backend_keyword():
    _class("vmas")
    from marl_envs.backends.vmas import VmasEnv

    with pytest.raises(TypeError, match="VmasEnv: missing a required argument: 'scenario'"):
        VmasEnv(num_envs=2, n_agents=3)  # n_agents is the scenario's: fine; the scenario is missing


def test_a_physics_backend_for_a_brax_env_without_one():
    _class("brax")
    with pytest.raises(ValueError, match=r"the Brax env 'fast' has no physics pipeline to choose \(backend="
                                         r"'spring'\): leave backend out"):
        marl_envs.make("brax/fast", num_envs=2, backend="spring")


def test_a_keyword_the_scenario_does_not_read_is_not_taken_for_an_env_keyword():
    _class("vmas")
    with pytest.raises(TypeError, match=r"VMAS scenario 'simple_reference' got an unexpected keyword argument "
                                        r"'n_agents'; it accepts the env keywords"):
        marl_envs.make("vmas/simple_reference", num_envs=2, n_agents=3)  # no 'did you mean num_envs'


def _snapshot_script():
    """``scripts/snapshot_keywords.py`` as a module: what reads the libraries' source (the package never does)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "snapshot_keywords.py"
    spec = importlib.util.spec_from_file_location("snapshot_keywords", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SNAPSHOT_SCRIPT = _snapshot_script()


def test_keyword_snapshot_declares_the_backends_the_script_reads():
    from marl_envs._core import keywords

    assert sorted(keywords.snapshot()) == sorted(SNAPSHOT_SCRIPT.READERS)


@pytest.mark.parametrize("backend", sorted(SNAPSHOT_SCRIPT.READERS))
def test_keyword_snapshot_is_what_the_installed_versions_declare(backend):
    """The declaration read again from the installed library's source (imports it) equals the shipped one, keyword
    order included (the messages list them in it)."""
    from marl_envs._core import keywords

    if not marl_envs.backend_installed(backend):
        pytest.skip(f"{backend} is not installed")
    script = SNAPSHOT_SCRIPT
    if script.names.stamp(marl_envs.registry.backend_record(backend).extra) is None:
        pytest.skip("marl-envs is not installed (no metadata to stamp the keywords with)")
    live, shipped = script.live(backend), keywords.snapshot().get(backend)
    stale = "stale keyword snapshot: run python scripts/snapshot_keywords.py"
    assert live == shipped, stale
    assert [(env, list(kw or ())) for env, kw in live["envs"].items()] == \
           [(env, list(kw or ())) for env, kw in shipped["envs"].items()], stale


def test_keyword_defaults_are_read_from_the_source():
    _class("vmas")
    from marl_envs._core import keywords

    assert keywords.declared("vmas", "balance") == {"n_agents": "3", "package_mass": "5",
                                                    "random_package_pos_on_line": "True"}
    football = keywords.declared("vmas", "football")  # read in init_params, which make_world passes **kwargs to
    assert football["n_blue_agents"] == "3" and football["viewer_size"] == "(1200, 800)"
    assert football["shooting_angle"] is None  # torch.pi / 2: not a constant


@pytest.fixture
def other_vmas(monkeypatch):
    """The installed VMAS stamped as a version the keyword snapshot does not declare, in a fresh process's state."""
    _class("vmas")
    from marl_envs._core import keywords, names

    monkeypatch.setattr(keywords, "_INSTALLED", {})
    monkeypatch.setattr(names, "stamp", lambda extra: {"vmas": "0.0.1"})
    return keywords


def test_an_undeclared_version_is_said_once_and_the_env_still_builds(other_vmas):
    import warnings

    with pytest.warns(UserWarning, match=r"no keyword declaration for the installed vmas \(\{'vmas': '0\.0\.1'\}; it "
                                         r"ships one for \{'vmas': '.*'\}\): the keywords given to vmas's envs are "
                                         r"not checked against a declaration .* python scripts/snapshot_keywords\.py"
                        ) as caught:
        assert other_vmas.declared("vmas", "balance") is None
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per backend and process: no second warning
        assert other_vmas.declared("vmas", "balance") is None
        env = marl_envs.make("vmas/balance", num_envs=2, n_agents=2)
        assert env.library_keywords is None
        env.close()
        # VMAS itself says which keyword a scenario leaves unread: still an error, listing the keywords it used
        with pytest.raises(TypeError, match=r"VMAS scenario 'balance' got an unexpected keyword argument 'n_agent'; "
                                            r".* and the scenario's keywords \['package_mass'\]"):
            marl_envs.make("vmas/balance", num_envs=2, n_agent=2, package_mass=4)


# backend, name, a keyword given a value of the wrong type, and what the message says of it (no num_envs: the value
# is refused before anything is imported or bound, where the backend checks its keywords before the build)
WRONG_TYPES = [
    ("vmas", "vmas/balance", {"n_agents": "3"}, r"VMAS scenario 'balance' got n_agents='3' \(a str\); n_agents takes "
                                                r"an int, like its default 3: pass n_agents=3, without the quotes$"),
    ("vmas", "vmas/balance", {"random_package_pos_on_line": 1},
     r"VMAS scenario 'balance' got random_package_pos_on_line=1 \(an int\); random_package_pos_on_line takes a bool "
     r"\(True or False\), like its default True: pass random_package_pos_on_line=True$"),
    ("brax", "brax/ant", {"ctrl_cost_weight": "0.5"},
     r"the Brax env 'ant' got ctrl_cost_weight='0.5' \(a str\); ctrl_cost_weight takes a float \(or an int\), like its "
     r"default 0.5: pass ctrl_cost_weight=0.5, without the quotes$"),
    ("jaxmarl", "jaxmarl/SMAX", {"walls_cause_death": "yes"},
     r"JaxMARL env 'SMAX' got walls_cause_death='yes' \(a str\); walls_cause_death takes a bool \(True or False\), "
     r"like its default True: pass e.g. walls_cause_death=True$"),
    ("jaxmarl", "jaxmarl/MPE_simple_spread_v3", {"env_kwargs": {"local_ratio": "0.3"}},  # env_kwargs' too
     r"JaxMARL env 'MPE_simple_spread_v3' got local_ratio='0.3' \(a str\); local_ratio takes a float \(or an int\), "
     r"like its default 0.5: pass local_ratio=0.3, without the quotes$"),
    ("jumanji", "jumanji/Connector-v3", {"time_limit": "50"},
     r"Jumanji env 'Connector-v3' got time_limit='50' \(a str\); time_limit takes an int, like its default 50: pass "
     r"time_limit=50, without the quotes$"),
    ("pettingzoo", "pettingzoo/mpe/simple_spread_v3", {"N": "3"},
     r"pettingzoo task 'mpe/simple_spread_v3' got N='3' \(a str\); N takes an int, like its default 3: pass N=3, "
     r"without the quotes$"),
    ("openspiel", "openspiel/kuhn_poker", {"players": "3"},
     r"openspiel task 'kuhn_poker' got players='3' \(a str\); players takes an int, like its default 2: pass "
     r"players=3, without the quotes$"),
]


@pytest.mark.parametrize("backend, name, kwargs, message", WRONG_TYPES, ids=[f"{n}-{next(iter(k))}" for _, n, k, _ in
                                                                             WRONG_TYPES])
def test_a_value_of_the_wrong_type_is_refused_by_us_naming_the_keyword_the_type_taken_and_the_fix(backend, name, kwargs,
                                                                                               message):
    if not marl_envs.backend_installed(backend):
        pytest.skip(f"{backend} is not installed")
    with pytest.raises(TypeError, match=rf"^{message}"):
        marl_envs.make(name, **kwargs)


def test_a_vmas_scenario_built_directly_checks_its_values_too():
    _class("vmas")
    from marl_envs.backends.vmas import VmasEnv

    with pytest.raises(TypeError, match=r"^VMAS scenario 'balance' got package_mass='heavy' \(a str\); package_mass "
                                        r"takes an int, like its default 5: pass e.g. package_mass=5$"):
        VmasEnv("balance", num_envs=2, package_mass="heavy")


def test_values_of_the_type_a_keyword_takes_are_taken_by_every_backend():
    """What the library takes is not refused: a float for an int default (VMAS writes ``package_mass=5`` for a
    mass), an int for a float default, NumPy scalars; a keyword whose default is not a constant takes anything."""
    import numpy as np

    _class("vmas")
    marl_envs.make("vmas/balance", num_envs=2, n_agents=np.int64(2), package_mass=4.5,
                   random_package_pos_on_line=np.bool_(False)).close()
    if marl_envs.backend_installed("brax"):
        marl_envs.make("brax/ant", num_envs=1, ctrl_cost_weight=1, healthy_z_range=[0.2, 1.0]).close()
