import importlib.metadata

import pytest
from envs import Drift, PredatorPreyCount

import marl_envs
from marl_envs import cli, registry
from marl_envs.specs import Binary, Composite, Unbounded

BACKENDS = sorted(registry.backends())  # every registered backend: the messages list them in this order


@pytest.fixture(autouse=True)
def user_env(monkeypatch):
    monkeypatch.setattr(registry, "_USER_ENVS", {})
    marl_envs.register("test/predator_prey", PredatorPreyCount)


def test_list_user(capsys):
    assert cli.main(["list", "user"]) == 0
    assert capsys.readouterr().out.split() == ["test/predator_prey"]


def test_info_prints_groups_and_every_key(capsys):
    assert cli.main(["info", "test/predator_prey", "n_predators=3"]) == 0
    out = capsys.readouterr().out
    assert "predator  predator_0, predator_1, predator_2  3" in out
    assert "predator.action       action       (1, 3, 2)  float32  Bounded[-1, 1]" in out
    assert "prey.action           action       (1, 1)     int64    Categorical(n=5)" in out
    assert "next.prey.reward      reward       (1, 1, 1)  float32  Unbounded" in out
    assert "prey.truncated        done         (1, 1, 1)  bool     Binary" in out


def test_library_errors_are_one_line_with_exit_code_1(capsys):
    assert cli.main(["info", "test/predator_pray"]) == cli.EXIT_ERROR == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("error: unknown env 'test/predator_pray'; did you mean 'test/predator_prey'?")
    assert cli.main(["info", "test/predator_prey", "n_predator=3"]) == 1
    assert "unexpected keyword argument 'n_predator'; did you mean 'n_predators'?" in capsys.readouterr().err
    assert cli.main(["bench", "test/predator_prey"]) == 1
    assert capsys.readouterr().err == (
        "error: bench times a backend's env against the backend's raw library; 'test/predator_prey' is not a "
        f"backend's env (backends: {', '.join(BACKENDS)})\n")


def test_missing_backend_is_exit_code_1(capsys, monkeypatch):
    missing = registry.Backend("marl_envs.backends.vmas", ("surely_not_installed_pkg",), "vmas")
    monkeypatch.setitem(registry._BACKENDS, "vmas", missing)
    monkeypatch.setattr(registry, "_NAME_CACHE", {})
    assert cli.main(["list", "vmas"]) == 1
    assert capsys.readouterr().err == ("error: the vmas backend needs surely_not_installed_pkg, which is not "
                                       "installed; install it with: pip install 'marl-envs[vmas]'\n")


def test_keywords_may_follow_the_options(monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "_cmd_bench", seen.append)
    assert cli.main(["bench", "brax/ant_4x2", "--num-envs", "8", "backend=spring", "--steps", "5", "n=3"]) == 0
    assert seen[0].kwargs == [("backend", "spring"), ("n", 3)] and (seen[0].num_envs, seen[0].steps) == (8, 5)


@pytest.mark.parametrize("argv, message", [
    (["info", "test/predator_prey", "n_predators"],
     "marl-envs info: error: argument KEY=VALUE: expected KEY=VALUE, got 'n_predators' (e.g. n_agents=3)"),
    (["info"], "marl-envs info: error: the following arguments are required: name"),
    (["lst"], "marl-envs: error: argument command: invalid choice: 'lst'"),
    (["list", "--verbose"], "marl-envs: error: unrecognized arguments: --verbose"),
    (["list", "vmas", "n=3"], "marl-envs: error: unrecognized arguments: n=3"),
    (["bench", "vmas/balance", "--steps", "5", "3=n"],
     "marl-envs: error: expected KEY=VALUE, got '3=n' (e.g. n_agents=3)"),
    ([], "marl-envs: error: the following arguments are required: command"),
])
def test_usage_errors_are_exit_code_2(capsys, argv, message):
    assert cli.main(argv) == cli.EXIT_USAGE == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: marl-envs") and message in err


def test_help_documents_the_exit_codes(capsys):
    assert cli.main(["--help"]) == cli.EXIT_OK == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: marl-envs") and cli.EPILOG in out
    for code in "012":
        assert f"\n  {code}  " in cli.EPILOG


def test_version_is_the_package_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"marl-envs {marl_envs.__version__}\n"
    assert importlib.metadata.version("marl-envs") == marl_envs.__version__  # pyproject reads it (dynamic version)


def test_list_user_without_registrations_says_how_to_register(capsys, monkeypatch):
    monkeypatch.setattr(registry, "_USER_ENVS", {})
    assert cli.main(["list", "user"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "no envs registered with marl_envs.register(name, factory): a registration lasts for the Python process "
        "that makes it, so a new `marl-envs` process has none; in your own code, marl_envs.register(name, factory) "
        "adds one and marl_envs.available_envs('user') lists them\n")


def test_list_without_backends_says_what_to_install(capsys, monkeypatch):
    for name, backend in registry._BACKENDS.items():
        missing = registry.Backend(backend.module, ("surely_not_installed_pkg",), backend.extra)
        monkeypatch.setitem(registry._BACKENDS, name, missing)
    assert cli.main(["list"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "test/predator_prey\n"
    assert captured.err == (f"not installed, so not listed: {', '.join(BACKENDS)} (pip install "
                            f"'marl-envs[{','.join(BACKENDS)}]')\n")
    monkeypatch.setattr(registry, "_USER_ENVS", {})
    assert cli.main(["list"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("no envs: no backend is installed; install one with: "
                            f"pip install 'marl-envs[{'|'.join(BACKENDS)}|all]'\n")


def test_list_unknown_backend_suggests_a_close_one(capsys):
    assert cli.main(["list", "vmass"]) == 1
    assert capsys.readouterr().err == ("error: unknown backend 'vmass'; did you mean 'vmas'? available: "
                                       f"{', '.join(BACKENDS)}, user\n")


def test_info_of_a_single_agent_env_says_so(capsys):
    marl_envs.register("test/drift_single", lambda **kw: Drift(single_agent=True, **kw))
    assert cli.main(["info", "test/drift_single"]) == 0
    out = capsys.readouterr().out
    assert "single-agent env: no groups, its keys are at the root (observation, action, reward, ...)" in out
    assert "group  agents" not in out
    assert "observation  observation  (1, 1)  float32  Unbounded       the observation" in out
    assert "next.reward  reward       (1, 1)  float32  Unbounded       the reward for the step" in out


class _WithAgentMask(PredatorPreyCount):
    """``PredatorPreyCount`` declaring PettingZoo's ``(group, "mask")`` (its specs only: ``info`` steps nothing)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        spec = self.full_observation_spec.clone()
        spec["prey", "mask"] = Binary((self.num_envs, 1, 1))
        self.full_observation_spec = spec


def test_info_says_what_each_key_means(capsys):
    marl_envs.register("test/masked", _WithAgentMask)
    assert cli.main(["info", "test/masked"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert rows["key"].split() == ["key", "role", "shape", "dtype", "spec", "meaning"]
    meanings = {
        "predator.observation": "each agent's observation",
        "prey.action_mask": "the actions each agent may take now (True: allowed)",
        "prey.mask": "True for the agents that act this step: alive (parallel env) or whose turn it is "
                     "(turn-based env)",
        "state": "the global state (e.g. for a centralised critic)",
        "prey.action": "each agent's action, written by the policy before step()",
        "next.prey.reward": "each agent's reward for the step",
        "done": "the episode is over: terminated or truncated",
        "terminated": "the episode reached a terminal state",
        "truncated": "the episode was cut off by a time limit",
        "prey.done": "the agent is done: terminated or truncated",
        "prey.terminated": "the agent reached a terminal state (e.g. it died)",
        "prey.truncated": "the agent was cut off by a time limit",
    }
    for key, meaning in meanings.items():
        assert rows[key].endswith(meaning), rows[key]


class _ManyWithInfo(Drift):
    """``Drift`` with 9 agents declaring an info entry (its specs only)."""

    def __init__(self, **kwargs):
        super().__init__(n_agents=9, **kwargs)
        spec = self.full_observation_spec.clone()
        spec["agents", "info"] = Composite(speed=Unbounded((self.num_envs, 9, 1)), shape=(self.num_envs, 9))
        self.full_observation_spec = spec


def test_info_shortens_a_long_group_and_gives_infos_their_role(capsys):
    marl_envs.register("test/many", _ManyWithInfo)
    assert cli.main(["info", "test/many"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert " ".join(rows["agents"]) == "agents agent_0, agent_1, agent_2, agent_3, ... (4 more), agent_8 9"
    assert rows["agents.info.speed"][:2] == ["agents.info.speed", "info"]
    assert rows["agents.observation"][1] == "observation"


def test_parse_kwargs_literals():
    assert cli.parse_kwargs(["a=3", "b=0.5", "c=cpu", "d=True", "e=[1, 2]"]) == {"a": 3, "b": 0.5, "c": "cpu", "d": True, "e": [1, 2]}


def test_parse_kwargs_malformed_exits_with_the_usage_code(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.parse_kwargs(["a=3", "n_agents"])
    assert exit.value.code == 2
    assert capsys.readouterr().err == "error: expected KEY=VALUE, got 'n_agents' (e.g. n_agents=3)\n"


def test_demo_rollout_writes_no_progress_bar_into_a_file(capsys):
    """Progress bars only on a terminal: ``marl-envs demo > log 2>&1`` gets the result line, not the bar's
    updates (pytest's captured streams are not terminals)."""
    from marl_envs.cli.demo import random_rollout

    rate = random_rollout("test/predator_prey", num_envs=3, steps=4)
    captured = capsys.readouterr()
    assert rate > 0 and captured.err == ""
    assert captured.out.startswith("test/predator_prey: 12 env-steps in ")


def test_info_lists_every_keyword_with_its_default(capsys):
    """The env class's own keywords (its signature) and its library's (the backend's declaration)."""
    if not marl_envs.backend_installed("vmas"):
        pytest.skip("vmas is not installed")
    assert cli.main(["info", "vmas/balance"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.split("keyword ", 1)[1].splitlines()[2:] if line.strip()}
    assert rows["num_envs"] == ["num_envs", "required", "VmasEnv"]
    assert rows["device"] == ["device", "'cpu'", "VmasEnv"]
    assert rows["max_steps"] == ["max_steps", "None", "VmasEnv"]
    assert rows["n_agents"] == ["n_agents", "3", "vmas"]  # balance's kwargs.pop("n_agents", 3)
    assert rows["package_mass"] == ["package_mass", "5", "vmas"]
    assert "scenario" not in rows  # the name fills it


def test_info_of_a_user_env_lists_its_class_keywords(capsys):
    assert cli.main(["info", "test/predator_prey"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1].split() == ["n_predators", "2", "PredatorPreyCount"]
    assert "not declared" not in out


@pytest.mark.parametrize("argv", [["info", "gfootball/academy_3_vs_1"], ["info", "smac/3m"], ["info", "jaxmarl/smax"],
                                  ["info", "vmas/balance", "n_agents='3'"]])
def test_info_refuses_what_make_refuses_in_its_words(capsys, argv):
    name, kwargs = argv[1], cli.parse_kwargs(argv[2:])
    if "/" in name and name.partition("/")[0] in BACKENDS and not registry.backend_installed(name.partition("/")[0]):
        pytest.skip(f"{name.partition('/')[0]} is not installed")
    with pytest.raises((ValueError, TypeError)) as err:
        marl_envs.make(name, num_envs=1, **kwargs)
    assert cli.main(argv) == 1
    assert capsys.readouterr().err == f"error: {err.value}\n"


def test_info_refuses_a_name_before_importing_torch_or_a_backend():
    """``marl-envs info`` on a name of no family, or one its family's check refuses (a name, a value), answers as
    ``marl-envs list`` does: nothing heavy imported."""
    import subprocess
    import sys

    argvs = [["info", "gfootball/academy_3_vs_1"], ["info", "smac/3m"], ["info", "vmass/balance"]]
    if registry.backend_installed("jaxmarl"):
        argvs += [["info", "jaxmarl/smax"]]
    if registry.backend_installed("vmas"):
        argvs += [["info", "vmas/balanse"], ["info", "vmas/balance", "n_agents='3'"]]
    code = (
        "import contextlib, io, sys\n"
        "from marl_envs import cli\n"
        f"for argv in {argvs!r}:\n"
        "    with contextlib.redirect_stderr(io.StringIO()) as err:\n"
        "        assert cli.main(argv) == 1, argv\n"
        "    assert err.getvalue().startswith('error: unknown') or 'takes an int' in err.getvalue(), err.getvalue()\n"
        "heavy = {'torch', 'tensordict', 'numpy', 'jax', 'vmas', 'jaxmarl'} & {m.split('.')[0] for m in sys.modules}\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
