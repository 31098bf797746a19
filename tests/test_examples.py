"""The training examples (mappo.py, mappo_rnn.py, mappo_torchrl.py) run end to end on a tiny budget and write their
files."""

import csv
import importlib
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from envs import Drift, Outlive, PredatorPreyCount

import marl_envs
from marl_envs import registry
from marl_envs.specs import Composite, Unbounded

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import _common  # noqa: E402
import mappo  # noqa: E402
import mappo_rnn  # noqa: E402

# TorchRL 0.11's MaskedCategorical.log_prob calls cross_entropy with reduce=False (torch's deprecation warning; TorchRL
# 0.14 does not): the TorchRL example's masked policies in .venv-benchmarl
pytestmark = pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated:UserWarning")

TINY = ["--num-envs", "6", "--frames", "240", "--epochs", "1", "--minibatch", "20", "--hidden", "16", "--quiet"]


@pytest.fixture(autouse=True)
def test_envs(monkeypatch):
    monkeypatch.setattr(registry, "_USER_ENVS", {})
    marl_envs.register("test/drift", Drift)
    marl_envs.register("test/predator_prey", PredatorPreyCount)
    marl_envs.register("test/outlive", Outlive)


def _check_outputs(out: Path, env: str, groups: list[str] | None = None) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env"] == env and summary["frames"] == 240
    for key in ("wall_s", "final_mean_episode_reward", "random_policy_reward"):
        assert isinstance(summary[key], float), key
    rows = list(csv.DictReader((out / "metrics.csv").read_text().splitlines()))
    assert [int(r["frames"]) for r in rows] == [60 * (i + 1) for i in range(len(rows))]
    for group in groups or []:
        assert f"reward_{group}" in rows[0]
    assert (out / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    return summary


@pytest.mark.parametrize("extra", [[], ["--ippo"]], ids=["mappo", "ippo"])
def test_continuous_multi_agent(tmp_path, extra):
    summary = _check_outputs(_run(tmp_path, "test/drift", ["--env-kwargs", "max_steps=10", *extra]), "test/drift")
    assert summary["algorithm"] == ("IPPO" if extra else "MAPPO")


def _run(out, env, extra, trainer=mappo) -> Path:
    trainer.main(["--env", env, "--out", str(out), "--steps-per-batch", "10", *TINY, *extra])
    return out


def test_two_groups_discrete_with_mask_and_state(tmp_path):
    _check_outputs(_run(tmp_path, "test/predator_prey", ["--env-kwargs", "max_steps=10"]), "test/predator_prey",
                   ["predator", "prey"])


def test_single_agent_root_keys(tmp_path):
    _check_outputs(_run(tmp_path, "test/drift", ["--env-kwargs", "single_agent=True", "max_steps=10"]), "test/drift")


@pytest.mark.parametrize("trainer", [mappo, mappo_rnn], ids=["mappo", "mappo_rnn"])
def test_the_random_baseline_runs_as_many_frames_as_asked_and_says_so(tmp_path, capsys, trainer):
    """By default the random policy runs as long as training; ``--random-frames`` sets it, in whole batches."""
    for out, extra, frames in [("same", [], 240), ("fewer", ["--random-frames", "100"], 60),
                               ("one_batch", ["--random-frames", "0"], 60)]:
        _run(tmp_path / out, "test/drift", ["--env-kwargs", "max_steps=10", *extra], trainer)
        summary = json.loads((tmp_path / out / "summary.json").read_text())
        assert summary["random_policy_frames"] == frames and summary["frames"] == 240
        assert f"then {frames:,} frames of random actions for the baseline (--random-frames)" in capsys.readouterr().out


@pytest.mark.parametrize("trainer", [mappo, mappo_rnn], ids=["mappo", "mappo_rnn"])
def test_a_negative_random_frames_is_refused(trainer, capsys):
    with pytest.raises(SystemExit):
        trainer.parse_args(["--env", "test/drift", "--random-frames", "-5"])
    assert "--random-frames must be 0 or more (one batch at least runs), got -5" in capsys.readouterr().err


def test_epymarl_presets_sum_the_team_return_and_standardise_advantages():
    args = mappo.parse_args(["--env", "lbforaging/Foraging-8x8-2p-2f-coop-v3"])
    assert args.team_return is True and args.normalize_advantage is True
    args = mappo.parse_args(["--env", "lbforaging/Foraging-8x8-2p-2f-coop-v3", "--no-normalize-advantage"])
    assert args.team_return is True and args.normalize_advantage is False
    args = mappo.parse_args(["--env", "vmas/navigation", "--team-return"])
    assert args.team_return is True and args.normalize_advantage is False


def test_team_return_sums_the_agents_rewards(tmp_path):
    """The same run, its episode returns summed over the group's agents rather than averaged: exactly the number
    of agents times as large (the run is the same: only the accounting differs)."""
    common = ["--env-kwargs", "max_steps=10", "--seed", "3"]
    mean = _check_outputs(_run(tmp_path / "mean", "test/drift", common), "test/drift")
    team = _check_outputs(_run(tmp_path / "team", "test/drift", [*common, "--team-return"]), "test/drift")
    n = len(marl_envs.make("test/drift", num_envs=1).group_map["agents"])
    assert n > 1
    assert team["final_mean_episode_reward"] == pytest.approx(n * mean["final_mean_episode_reward"], rel=1e-5)


def test_gae_ends_every_agent_where_the_env_episode_ends():
    """A group with its own done flags: an agent whose own flag stays False when the env's episode terminates
    (a SMAX unit alive when its side wins) is not bootstrapped and its chain does not run into the next
    episode."""
    from tensordict import TensorDict

    flags = lambda *v: torch.tensor(v).view(1, 2, 1)  # noqa: E731  (B=1, T=2, 1)
    agents = lambda *v: torch.tensor(v).view(1, 2, 1, 1).expand(1, 2, 2, 1).clone()  # noqa: E731  2 agents
    next_ = TensorDict({"done": flags(True, False), "terminated": flags(True, False),
                        "agents": TensorDict({"done": agents(False, False), "terminated": agents(False, False)},
                                             [1, 2, 2])}, [1, 2])
    group = mappo.Group.__new__(mappo.Group)  # the keys of a group with its own done flags
    group.prefix, group.done, group.terminated = ("agents",), ("agents", "done"), ("agents", "terminated")
    reward, value = agents(0.0, 5.0), torch.ones(1, 2, 2, 1)
    done, terminated = (group.ended(next_, name, reward) for name in ("done", "terminated"))
    advantage = _common.gae(reward, value, value, done, terminated, gamma=0.5, lmbda=1.0)
    # t=0: reward 0, no bootstrap (terminated), nothing from t=1's reward of 5: 0 - V = -1
    assert torch.equal(advantage[0, 0], torch.full((2, 1), -1.0))
    # t=1: 5 + 0.5 * V - V
    assert torch.equal(advantage[0, 1], torch.full((2, 1), 4.5))


def test_masked_policy_samples_and_scores_only_available_actions():
    import torch

    from marl_envs.specs import Categorical

    torch.manual_seed(0)
    policy = mappo.Policy(4, Categorical(6, (), dtype=torch.int64), hidden=8)
    obs, mask = torch.randn(500, 3, 4), torch.rand(500, 3, 6) < 0.4
    mask[..., 4] = True  # SMAX: stop is always available
    action, sample, log_prob = policy.sample(policy.dist(obs, mask))
    assert mask.gather(-1, action.unsqueeze(-1)).all()
    again, entropy = policy.score(policy.dist(obs, mask), sample)
    assert torch.allclose(again, log_prob)
    only_stop = torch.zeros(6, dtype=torch.bool)
    only_stop[4] = True
    _, sample, log_prob = policy.sample(policy.dist(obs[:1], only_stop.expand(1, 3, 6)))  # a dead unit: certain
    assert (sample == 4).all() and torch.allclose(log_prob, torch.zeros(1, 3, 1))
    assert torch.isfinite(entropy).all() and (entropy <= torch.log(mask.sum(-1, keepdim=True).float()) + 1e-5).all()


def _printed_summary(capsys) -> str:
    """The JSON summary ``mappo.main`` printed, as printed (the line before it gives the budget, the lines after it
    name the files)."""
    out = capsys.readouterr().out
    out = out[out.index("\n{") + 1:]
    return out[: json.JSONDecoder().raw_decode(out)[1]]


VMAS = pytest.mark.skipif(not marl_envs.backend_installed("vmas"), reason="needs the vmas extra")


@VMAS
def test_vmas_navigation_writes_gif(tmp_path, capsys):
    mappo.main(["--env", "vmas/navigation", "--env-kwargs", "n_agents=2", "max_steps=10", "--out", str(tmp_path),
                "--steps-per-batch", "10", *TINY, "--gif"])
    summary = _check_outputs(tmp_path, "vmas/navigation")
    assert (tmp_path / "policy.gif").read_bytes()[:3] == b"GIF" and summary["gif"] == str(tmp_path / "policy.gif")
    assert (tmp_path / "summary.json").read_text() == _printed_summary(capsys) + "\n"


@pytest.mark.parametrize("env", ["test/drift", pytest.param("vmas/navigation", marks=VMAS)])
def test_same_seed_writes_the_same_metrics(tmp_path, capsys, env):
    """Two runs of one seed write the same metrics.csv byte for byte (wall times go to timings.csv), and
    summary.json holds the summary printed."""
    for run in ("a", "b"):
        mappo.main(["--env", env, "--env-kwargs", "max_steps=10", "--out", str(tmp_path / run), "--steps-per-batch",
                    "10", "--no-gif", *TINY])
        assert (tmp_path / run / "summary.json").read_text() == _printed_summary(capsys) + "\n"
    metrics = [(tmp_path / run / "metrics.csv").read_text() for run in ("a", "b")]
    header = {"test/drift": "frames,mean_episode_reward",  # VMAS's infos, at episode ends, after the reward
              "vmas/navigation": "frames,mean_episode_reward,pos_rew,final_rew,agent_collisions"}[env]
    assert metrics[0] == metrics[1] and metrics[0].splitlines()[0] == header
    assert (tmp_path / "a" / "timings.csv").read_text().startswith("frames,wall_s\n")


# ----------------------------------------------------------------------------------------------------
# examples/mappo_torchrl.py (TorchRL's components only); runs in .venv-torchrl
# ----------------------------------------------------------------------------------------------------
@pytest.fixture
def mappo_torchrl():
    if os.environ.get("MARL_ENVS_REQUIRE_TORCHRL") != "1":
        pytest.importorskip("torchrl", reason="the TorchRL example is tested in .venv-torchrl (make test)")
    with warnings.catch_warnings():
        # torchrl 0.14.1 deprecates its own weight-updater classes while importing torchrl.collectors
        warnings.filterwarnings("ignore", message=".*inherits from WeightUpdaterBase is deprecated",
                                category=DeprecationWarning)
        return importlib.import_module("mappo_torchrl")


@pytest.mark.parametrize("env, extra, groups", [
    ("test/drift", ["--env-kwargs", "max_steps=10"], None),
    ("test/drift", ["--env-kwargs", "single_agent=True", "max_steps=10", "--ippo", "--random-frames", "100"], None),
    ("test/predator_prey", ["--env-kwargs", "max_steps=10"], ["predator", "prey"]),
], ids=["continuous", "single_agent", "two_groups_masked_discrete"])
def test_mappo_torchrl_runs_tiny(mappo_torchrl, tmp_path, env, extra, groups):
    mappo_torchrl.main(["--env", env, "--out", str(tmp_path), "--steps-per-batch", "10", *TINY, *extra])
    summary = _check_outputs(tmp_path, env, groups)
    assert summary["algorithm"] == ("IPPO" if "--ippo" in extra else "MAPPO")
    assert not any(value != value for value in (summary["final_mean_episode_reward"], summary["random_policy_reward"]))
    assert summary["random_policy_frames"] == (60 if "--random-frames" in extra else 240)  # whole batches of 60


def test_mappo_torchrl_refuses_a_negative_random_frames(mappo_torchrl, capsys):
    with pytest.raises(SystemExit):
        mappo_torchrl.parse_args(["--env", "test/drift", "--random-frames", "-5"])
    assert "--random-frames must be 0 or more (one batch at least runs), got -5" in capsys.readouterr().err


def test_mappo_torchrl_resumes_from_its_checkpoint_and_logs_infos(mappo_torchrl, tmp_path):
    """A 3-iteration run checkpoints at its end; resumed with a budget of 5 iterations, it trains iterations 4
    and 5 and the file keeps the first 3 rows. The prey's ``won`` info is logged at episode ends (1.0 by
    construction)."""
    marl_envs.register("test/prey_wins", PreyWins)
    argv = ["--env", "test/prey_wins", "--env-kwargs", "max_steps=10", "--out", str(tmp_path), "--steps-per-batch",
            "10", *TINY[:2], "--frames", "180", *TINY[4:], "--checkpoint-every", "2"]
    mappo_torchrl.main(argv)
    first = (tmp_path / "metrics.csv").read_text().splitlines()
    summary = mappo_torchrl.main(["--resume", str(tmp_path), "--quiet", "--frames", "300"])
    again = (tmp_path / "metrics.csv").read_text().splitlines()
    assert again[:4] == first and len(again) == 6 and summary["frames"] == 300
    rows = list(csv.DictReader(again))
    assert [int(r["frames"]) for r in rows] == [60, 120, 180, 240, 300]
    assert {r["won_prey"] for r in rows} == {"1.0"}


def test_mappo_torchrl_gae_flags_or_the_root_end_into_a_group_s_own(mappo_torchrl):
    from types import SimpleNamespace

    import torch
    from tensordict import TensorDict

    group = SimpleNamespace(prefix=("agents",), reward=("agents", "reward"), done=("agents", "done"),
                            terminated=("agents", "terminated"), own_done=True)
    own = torch.tensor([[True], [False], [False]]).expand(2, 3, 1).clone()  # agent 0 died; 1 and 2 alive
    root = torch.tensor([[True], [False]])  # env 0's battle is over
    data = TensorDict({"next": {"done": root, "terminated": root, "agents": TensorDict(
        {"done": own, "terminated": own.clone(), "reward": torch.zeros(2, 3, 1)}, [2, 3])}}, [2])
    mappo_torchrl.expand_done(data, [group])
    for name in ("done", "terminated"):
        assert data["next", "agents", name][0].all()  # every agent of env 0
        assert data["next", "agents", name][1].flatten().tolist() == [True, False, False]  # env 1: own flags


def test_mappo_torchrl_team_return_sums_the_agents_returns(mappo_torchrl, tmp_path):
    """``--team-return`` reports the agents' summed return (EPyMARL's tasks), by default their mean; a run with it
    and ``--normalize-advantage`` trains."""
    from types import SimpleNamespace

    import torch
    from tensordict import TensorDict

    group = SimpleNamespace(name="agents", prefix=("agents",), episode_reward=("agents", "episode_reward"))
    returns = torch.tensor([[1.0], [2.0], [6.0]]).expand(2, 3, 1).clone()  # (envs, agents, 1)
    done = torch.tensor([[True], [False]])  # only env 0's episode ended
    data = TensorDict({"next": {"done": done, "agents": TensorDict({"episode_reward": returns}, [2, 3])}}, [2])
    assert mappo_torchrl.episode_rewards(data, [group]) == {"agents": 3.0}
    assert mappo_torchrl.episode_rewards(data, [group], team=True) == {"agents": 9.0}
    mappo_torchrl.main(["--env", "test/drift", "--env-kwargs", "max_steps=10", "--out", str(tmp_path),
                        "--steps-per-batch", "10", "--team-return", "--normalize-advantage", *TINY])
    _check_outputs(tmp_path, "test/drift", None)


def test_mappo_torchrl_under_torchrun_two_ranks(mappo_torchrl, tmp_path):
    """Two CPU ranks (gloo): every rank starts from rank 0's parameters and averages its gradients with the
    other's; the example checks the ranks' parameters agree at the end (a failing check fails the run)."""
    import subprocess

    import torch

    if not torch.distributed.is_available() or not marl_envs.backend_installed("vmas"):
        pytest.skip("needs torch.distributed and the vmas extra")
    script = Path(__file__).parents[1] / "examples" / "mappo_torchrl.py"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
           "--env", "vmas/navigation", "--env-kwargs", "max_steps=10", "--steps-per-batch", "10", "--num-envs", "3",
           "--frames", "120", "--epochs", "1", "--minibatch", "20", "--hidden", "16", "--quiet", "--out", str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={"OMP_NUM_THREADS": "1", **env})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["frames"] == 120  # 2 iterations of 2 ranks x 3 envs x 10 steps
    rows = list(csv.DictReader((tmp_path / "metrics.csv").read_text().splitlines()))
    assert [row["frames"] for row in rows] == ["60", "120"]


class PreyWins(PredatorPreyCount):
    """``(prey, "info", "won")``: 1.0 on the step that ends the episode, 0.0 on every other step."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        B, device = self.num_envs, self.device
        spec = self.full_observation_spec
        spec["prey", "info"] = Composite(won=Unbounded((B, 1, 1), device=device), shape=(B, 1), device=device)
        self.full_observation_spec = spec

    def _observe(self):
        out = super()._observe()
        out["prey", "info", "won"] = (self.count >= self.threshold).float().view(self.num_envs, 1, 1)
        return out


def test_infos_are_logged_at_episode_ends(tmp_path, monkeypatch):
    """An info's column is its mean over the steps that end an episode: the win rate for a win signal (1.0 here,
    where the mean over every step would be far below)."""
    marl_envs.register("test/prey_wins", PreyWins)
    summary = mappo.main(["--env", "test/prey_wins", "--out", str(tmp_path), "--steps-per-batch", "10", *TINY,
                          "--env-kwargs", "max_steps=10"])
    rows = list(csv.DictReader((tmp_path / "metrics.csv").read_text().splitlines()))
    assert [row["won_prey"] for row in rows] == ["1.0"] * 4 and "won_predator" not in rows[0]
    assert summary["final_won_prey"] == summary["random_policy_won_prey"] == 1.0


class DriftThatCannotDraw(Drift):
    """Says it renders, then fails to, as a renderer without its display or mode does."""

    def _render(self, env_index, **kwargs):
        raise ValueError("no display here")


@pytest.mark.parametrize("env_class", [Drift, DriftThatCannotDraw], ids=["no_render_hook", "render_fails"])
def test_a_finished_run_without_a_gif_says_why_and_keeps_its_results(tmp_path, capsys, env_class):
    marl_envs.register("test/undrawn", env_class)
    summary = mappo.main(["--env", "test/undrawn", "--out", str(tmp_path), "--steps-per-batch", "10", *TINY,
                          "--env-kwargs", "max_steps=10", "--gif"])
    assert "gif" not in summary and not (tmp_path / "policy.gif").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["frames"] == 240
    why = ("env.render() raised ValueError: no display here" if env_class is DriftThatCannotDraw
           else "the env does not draw images (env.renders is False)")
    assert f"no policy.gif for test/undrawn: {why}" in capsys.readouterr().err


RESUMABLE = ["--env", "test/drift", "--env-kwargs", "max_steps=10", "--steps-per-batch", "10", "--num-envs", "6",
             "--frames", "1200", "--epochs", "1", "--minibatch", "20", "--hidden", "16", "--quiet", "--no-gif",
             "--checkpoint-every", "3"]


@pytest.mark.parametrize("trainer", ["mappo", "mappo_rnn"])
def test_a_run_killed_mid_way_resumes_from_its_checkpoint(tmp_path, trainer):
    """SIGKILL in the 8th of 20 iterations (the last checkpoint after the 6th); ``--resume`` continues the file:
    the rows written before the kill stay, the frame count goes on exactly, and the run ends at its budget. A
    recurrent run's checkpoint holds the states its collection carries."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(EXAMPLES)!r}]
        import marl_envs, {trainer} as trainer
        from envs import Drift
        marl_envs.register("test/drift", Drift)
        kill = lambda update, data, agents: update == 7 and os.kill(os.getpid(), signal.SIGKILL)
        trainer.train(trainer.parse_args(sys.argv[1:]), callback=kill)
    """)
    module = {"mappo": mappo, "mappo_rnn": mappo_rnn}[trainer]
    killed = subprocess.run([sys.executable, "-c", script, *RESUMABLE, "--out", str(tmp_path)],
                            capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    before = (tmp_path / "metrics.csv").read_text().splitlines()
    assert [int(row.split(",")[0]) for row in before[1:]] == [60, 120, 180, 240, 300, 360]
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert checkpoint["args"]["trainer"] == f"{trainer}.py"
    assert ("actor_state_0" in checkpoint["model"]) == (trainer == "mappo_rnn")
    summary = module.main(["--resume", str(tmp_path), "--quiet", "--no-gif"])
    after = (tmp_path / "metrics.csv").read_text().splitlines()
    assert after[:7] == before
    assert [int(row.split(",")[0]) for row in after[1:]] == [60 * (i + 1) for i in range(20)]
    assert summary["frames"] == 1200 and summary["env"] == "test/drift"
    longer = module.main(["--resume", str(tmp_path), "--quiet", "--no-gif", "--frames", "1500"])  # a new budget
    assert longer["frames"] == 1500 and len((tmp_path / "metrics.csv").read_text().splitlines()) == 26


def test_resume_without_a_checkpoint_says_what_to_pass(tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"--resume {tmp_path}: no checkpoint.pt there; pass the --out "
                                                r"folder of a run that wrote one"):
        mappo.main(["--resume", str(tmp_path)])


class _RunsCode:
    """Unpickling it would call ``os.mkdir`` on the path it carries (as a malicious checkpoint could call
    anything)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return os.mkdir, (str(self.path),)


def test_a_checkpoint_that_would_run_code_is_refused_and_names_the_file(tmp_path):
    ran = tmp_path / "ran"
    torch.save({"args": {}, "model": {}, "payload": _RunsCode(ran)}, tmp_path / "checkpoint.pt")
    with pytest.raises(ValueError, match=rf"--resume {tmp_path}: {tmp_path / 'checkpoint.pt'} holds objects other "
                                         r"than tensors and plain values, which this example does not write and will "
                                         r"not unpickle \(they could run code\): \w+\.mkdir; resume "
                                         r"from a checkpoint a run of this example wrote"):
        mappo.main(["--resume", str(tmp_path)])
    assert not ran.exists()


def test_checkpoint_random_states_round_trip_as_tensors_and_plain_values():
    """The states ``torch.load(weights_only=True)`` reads back restore every generator's next draws."""
    import io
    import random

    import numpy as np

    states = _common.rng_states()
    buffer = io.BytesIO()
    torch.save(states, buffer)
    draws = torch.rand(3), np.random.rand(3), random.random()
    buffer.seek(0)
    _common.set_rng_states(torch.load(buffer, weights_only=True))
    again = torch.rand(3), np.random.rand(3), random.random()
    assert torch.equal(draws[0], again[0]) and np.array_equal(draws[1], again[1]) and draws[2] == again[2]


def test_plot_runs_draws_the_mean_and_the_seed_band(tmp_path, capsys):
    import plot_runs

    for seed, (reward, won) in enumerate([(1.0, 0.5), (3.0, 0.9)]):
        run = tmp_path / f"s{seed}"
        run.mkdir()
        (run / "metrics.csv").write_text(f"frames,mean_episode_reward,won\n100,0.0,nan\n200,{reward},{won}\n")
        (run / "summary.json").write_text('{"env": "jaxmarl/HeuristicEnemySMAX", "algorithm": "MAPPO"}')
    finals = plot_runs.main([str(tmp_path / "s0"), str(tmp_path / "s1"), "--reference", "random policy=0.18",
                             "--out", str(tmp_path / "fig.png")])
    assert finals == {"MAPPO jaxmarl/HeuristicEnemySMAX": {"mean_episode_reward": (2.0, 1.0, 3.0),
                                                           "won": (0.7, 0.5, 0.9)}}
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"
    assert "final mean_episode_reward 2.000 [1.000, 3.000], won 0.700 [0.500, 0.900]" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        plot_runs.main([str(tmp_path / "s0"), "--label", "a", "b", "--out", str(tmp_path / "x.png")])
    assert "--label takes one label per run: 1 runs, 2 labels" in capsys.readouterr().err


def test_plot_runs_writes_the_reference_and_its_source_on_the_figure(tmp_path):
    import plot_runs

    run = tmp_path / "s0"
    run.mkdir()
    (run / "metrics.csv").write_text("frames,mean_episode_reward,won\n100,0.0,0.1\n200,1.0,0.6\n")
    note = "JaxMARL MAPPO: read off a plot, at 1e7 steps; these runs: 200 frames"
    plot_runs.main([str(run), "--reference", "won:JaxMARL MAPPO=1.0", "random policy=0.2", "--note", note,
                    "--out", str(tmp_path / "fig.svg")])
    svg = (tmp_path / "fig.svg").read_text()
    assert note in svg and "JaxMARL MAPPO" in svg


def test_plot_runs_draws_another_trainers_curve_per_step_and_per_second(tmp_path):
    import plot_runs

    run = tmp_path / "s0"
    run.mkdir()
    (run / "metrics.csv").write_text("frames,mean_episode_reward,won\n100,0.0,0.1\n200,1.0,0.6\n")
    (run / "timings.csv").write_text("frames,wall_s\n100,1.5\n200,3.0\n")
    (tmp_path / "ref.csv").write_text("frames,won,wall_s\n100,0.2,9.0\n200,0.7,18.0\n")
    plot_runs.main([str(run), "--reference-curve", f"Their MAPPO={tmp_path / 'ref.csv'}", "--per-second",
                    "--out", str(tmp_path / "fig.svg")])
    svg = (tmp_path / "fig.svg").read_text()
    assert svg.count("Their MAPPO") == 2 and "training time, s" in svg  # its legend on the win-rate panels
    with pytest.raises(SystemExit):
        plot_runs.main([str(run), "--reference-curve", "no-label.csv", "--out", str(tmp_path / "fig.png")])


# examples/mappo_rnn.py


def test_recurrent_states_start_afresh_exactly_where_episodes_end(tmp_path):
    """The state each GRU starts a step from is zero exactly at the steps whose previous step ended the agent's
    episode: the env's end (both agents) or ``agent_0``'s own, earlier one (it ends alone at the env's 2nd step);
    the first step of the run too; nowhere else. Across batches: a batch's first step follows the previous batch's
    last."""
    batches = []
    mappo_rnn.train(mappo_rnn.parse_args(["--env", "test/outlive", "--env-kwargs", "max_steps=6",
                                          "--steps-per-batch", "10", "--num-envs", "4", "--frames", "120", "--epochs",
                                          "1", "--minibatch", "20", "--bptt", "5", "--hidden", "8", "--quiet",
                                          "--out", str(tmp_path)]),
                    callback=lambda update, data, agents: batches.append(data.clone()))
    data = torch.cat(batches, dim=1)  # (envs, steps, agents, ...)
    ended = data["next", "agents", "done"][..., 0]
    assert ended[:, :, 0].any() and (ended[:, :, 0] & ~ended[:, :, 1]).any()  # agent_0 ends alone
    expected = torch.cat([torch.ones_like(ended[:, :1]), ended[:, :-1]], dim=1)
    assert torch.equal(data["agents", "rnn_start"][..., 0], expected)
    for name in ("actor_hidden", "critic_hidden"):
        zero = (data["agents", name] == 0).all(-1)
        assert torch.equal(zero, expected), name


def _next_values(data) -> torch.Tensor:
    """The next value each step of a batch was bootstrapped from, from its advantages: GAE (gamma 0.9, lambda 0.5)
    run backwards, ``advantage_t = r_t + 0.9 next_value_t - value_t + 0.9 * 0.5 * (1 - done_t) advantage_t+1``
    (0 past the batch's last step)."""
    value, advantage = data["agents", "state_value"], data["agents", "advantage"]
    reward, done = data["next", "agents", "reward"], data["next", "done"].unsqueeze(-2).float()
    later = torch.cat([advantage[:, 1:], torch.zeros_like(advantage[:, :1])], 1)
    return (advantage - reward + value - 0.45 * (1 - done) * later) / 0.9


@pytest.mark.parametrize("extra", [[], ["--ippo", "--shared"]], ids=["mappo", "ippo_shared"])
def test_recurrent_bootstrap_is_the_value_the_next_step_gets(tmp_path, extra):
    """GAE's next value at a step is the value the next step of the batch is given (and trained towards): where an
    agent's own episode ended first (``agent_0`` at the env's 2nd step, the env going on), from a fresh state, as
    the next step's GRU starts from one."""
    batches = []
    mappo_rnn.train(mappo_rnn.parse_args(["--env", "test/outlive", "--env-kwargs", "max_steps=6", "--steps-per-batch",
                                          "10", "--num-envs", "4", "--frames", "80", "--epochs", "1", "--minibatch",
                                          "20", "--hidden", "8", "--gamma", "0.9", "--lmbda", "0.5", "--quiet",
                                          "--out", str(tmp_path), *extra]),
                    callback=lambda update, data, agents: batches.append(data.clone()))
    for data in batches:
        value, next_value = data["agents", "state_value"], _next_values(data)[:, :-1]
        going_on = (data["next", "done"][:, :-1].unsqueeze(-2) == 0).expand_as(next_value)
        own_end = data["next", "agents", "done"][:, :-1] & going_on
        assert own_end.any()
        torch.testing.assert_close(next_value[going_on], value[:, 1:][going_on], rtol=0, atol=1e-5)


def test_recurrent_time_limit_bootstraps_from_the_carried_state(tmp_path):
    """Where ``max_steps`` cut an episode (``truncated``, not ``terminated``), the episode would have gone on: its
    bootstrap is the critic one step past the state carried, not from a fresh state as where an agent's own
    episode terminated. (A learning rate of 0 keeps the critic the one collection used.)"""
    seen = []
    mappo_rnn.train(mappo_rnn.parse_args(["--env", "test/outlive", "--env-kwargs", "max_steps=6", "--steps-per-batch",
                                          "12", "--num-envs", "8", "--frames", "96", "--epochs", "1", "--minibatch",
                                          "24", "--hidden", "8", "--gamma", "0.9", "--lmbda", "0.5", "--lr", "0",
                                          "--quiet", "--out", str(tmp_path)]),
                    callback=lambda update, data, agents: seen.append((data.clone(), agents)))
    (data, agents), = seen
    group = agents.groups[0]
    value, next_value = data["agents", "state_value"], _next_values(data)
    x = group.critic_in(data.get("next"), 2).transpose(0, 1).flatten(1, 2)
    with torch.no_grad():  # the states after each step, from the first step's (zeros: the run's first batch)
        _, states = group.values(data, data["agents", "critic_hidden"][:, 0])
        carried = group.batch(group.critic.after(x, states, torch.tensor(False)), 8)
        fresh = group.batch(group.critic.after(x, torch.zeros_like(states), torch.tensor(True)), 8)
    limit = (data["next", "truncated"] & ~data["next", "terminated"]).unsqueeze(-2).expand_as(value)
    limit = limit & ~data["next", "agents", "terminated"]  # agent_1, alive when the limit came
    assert limit.any()
    torch.testing.assert_close(next_value[limit], carried[limit], rtol=0, atol=1e-5)
    assert ((next_value - fresh)[limit].abs() > 1e-4).all()  # carried, not zeroed


def test_a_short_recurrent_run_beats_the_random_policy(tmp_path):
    """MAPPO with GRUs learns to take the rewarded action."""
    summary = mappo_rnn.main(["--env", "test/outlive", "--env-kwargs", "max_steps=6", "--num-envs", "16",
                              "--steps-per-batch", "12", "--frames", "5760", "--minibatch", "96", "--hidden", "16",
                              "--lr", "0.01", "--out", str(tmp_path), "--quiet"])
    assert summary["final_mean_episode_reward"] > summary["random_policy_reward"] + 1


@pytest.mark.parametrize("extra", [[], ["--ippo"], ["--ippo", "--shared"]], ids=["mappo", "ippo", "ippo_shared"])
def test_recurrent_runs_on_two_groups_with_a_state_and_on_a_single_agent(tmp_path, extra):
    _check_outputs(_run(tmp_path / "groups", "test/predator_prey", ["--env-kwargs", "max_steps=10", "--agent-ids",
                                                                    *extra], mappo_rnn),
                   "test/predator_prey", ["predator", "prey"])
    _check_outputs(_run(tmp_path / "single", "test/drift", ["--env-kwargs", "single_agent=True", "max_steps=10",
                                                            *extra], mappo_rnn), "test/drift")


def test_recurrent_on_mappo_py_names_the_recurrent_trainer(capsys):
    with pytest.raises(SystemExit):
        mappo.parse_args(["--env", "test/drift", "--recurrent"])
    assert ("--recurrent: the recurrent trainer is its own file; run examples/mappo_rnn.py with the other arguments"
            in capsys.readouterr().err)
    with pytest.raises(SystemExit):
        mappo.parse_args(["--env", "test/drift", "--bptt", "5"])
    assert "unrecognized arguments: --bptt 5" in capsys.readouterr().err


def test_a_checkpoint_resumes_under_the_trainer_that_wrote_it(tmp_path, capsys):
    _run(tmp_path, "test/drift", ["--env-kwargs", "max_steps=10"], mappo_rnn)
    with pytest.raises(SystemExit):
        mappo.main(["--resume", str(tmp_path)])
    assert f"--resume {tmp_path}: the run was trained by mappo_rnn.py; resume it with examples/mappo_rnn.py" in (
        capsys.readouterr().err)


def test_bptt_must_divide_the_batch(tmp_path):
    with pytest.raises(ValueError, match=r"--bptt 3 must divide the steps of a batch \(10\): .* pass a divisor of 10"):
        _run(tmp_path, "test/drift", ["--env-kwargs", "max_steps=10", "--bptt", "3"], mappo_rnn)


# ----------------------------------------------------------------------------------------------------
# What a new user sees: the budget, any working directory, a board game's columns, the kept runs
# ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("trainer", [mappo, mappo_rnn], ids=["mappo", "mappo_rnn"])
def test_the_start_prints_the_frames_the_run_takes(tmp_path, capsys, trainer):
    """``--frames`` rounded down to whole batches (updates x envs x steps), said before training."""
    trainer.main(["--env", "test/drift", "--env-kwargs", "max_steps=10", "--out", str(tmp_path), "--steps-per-batch",
                  "10", *TINY[:2], "--frames", "250", *TINY[4:]])
    assert capsys.readouterr().out.startswith(
        "test/drift: 240 frames = 4 updates x 6 envs x 10 steps (--frames 250 in whole batches); then 240 frames of "
        "random actions for the baseline (--random-frames)\n")


@VMAS
def test_the_trainers_run_from_any_directory(tmp_path):
    """Each trainer finds its helper module from its own folder: run by path from another working directory."""
    for script in ("mappo.py", "mappo_rnn.py"):
        run = subprocess.run([sys.executable, str(EXAMPLES / script), "--env", "vmas/navigation", "--env-kwargs",
                              "n_agents=2", "max_steps=10", "--num-envs", "4", "--frames", "40", "--epochs", "1",
                              "--minibatch", "20", "--hidden", "8", "--quiet", "--out", str(tmp_path / script)],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert run.returncode == 0, run.stderr[-3000:]
        assert json.loads((tmp_path / script / "summary.json").read_text())["frames"] == 40


OPENSPIEL = pytest.mark.skipif(not marl_envs.backend_installed("openspiel"), reason="needs the openspiel extra")


@OPENSPIEL
@pytest.mark.parametrize("trainer", [mappo, mappo_rnn], ids=["mappo", "mappo_rnn"])
def test_a_board_game_reports_each_player_and_no_chance_column(tmp_path, trainer):
    """Tic-tac-toe's players share a group and take turns: each gets its return and win rate (the group's mean
    is 0 by construction, the game being zero-sum); OpenSpiel's ``chance`` info is no metric."""
    summary = trainer.main(["--env", "openspiel/tic_tac_toe", "--num-envs", "4", "--steps-per-batch", "20",
                            "--frames", "160", "--epochs", "1", "--minibatch", "40", "--hidden", "8", "--quiet",
                            "--out", str(tmp_path)])
    rows = list(csv.DictReader((tmp_path / "metrics.csv").read_text().splitlines()))
    assert list(rows[0]) == ["frames", "mean_episode_reward", "reward_player_0", "won_player_0", "reward_player_1",
                             "won_player_1"]
    for row in rows:
        assert float(row["reward_player_0"]) == -float(row["reward_player_1"])
        assert 0 <= float(row["won_player_0"]) + float(row["won_player_1"]) <= 1 + 1e-6  # a draw: nobody's win
    assert "random_policy_won_player_0" in summary and not any("chance" in key for key in summary)


def _kept_rows(run: str, rows: int) -> list[str]:
    return (Path(__file__).parents[1] / "docs" / "runs" / run / "metrics.csv").read_text().splitlines()[: rows + 1]


@VMAS
@pytest.mark.slow
def test_mappo_reproduces_the_kept_navigation_run(tmp_path):
    """docs/runs/navigation_s0 (the preset, seed 0, 1 thread): the first 2 rows bit for bit."""
    mappo.main(["--env", "vmas/navigation", "--frames", "12000", "--quiet", "--out", str(tmp_path)])
    assert (tmp_path / "metrics.csv").read_text().splitlines() == _kept_rows("navigation_s0", 2)


@pytest.mark.skipif(not marl_envs.backend_installed("jaxmarl"), reason="needs the jaxmarl extra")
@pytest.mark.slow
def test_mappo_rnn_reproduces_the_kept_smax_run(tmp_path):
    """docs/runs/smax3m_rnn_s0 (the preset, seed 0, 2 threads): the first 2 rows bit for bit (the learning rate
    anneals over the budget, so rows past the 2nd need the run's full --frames)."""
    mappo_rnn.main(["--env", "jaxmarl/HeuristicEnemySMAX", "--threads", "2", "--frames", "32768", "--quiet",
                    "--out", str(tmp_path)])
    assert (tmp_path / "metrics.csv").read_text().splitlines() == _kept_rows("smax3m_rnn_s0", 2)


@pytest.mark.skipif(not marl_envs.backend_installed("jaxmarl"), reason="needs the jaxmarl extra")
@pytest.mark.slow
def test_mappo_rnn_reproduces_the_kept_smax_ippo_run(tmp_path):
    """docs/runs/smax3m_rnn_ippo_s0 (the IPPO preset: one shared network, whole sequences; seed 0, 1 thread): the
    first 2 rows bit for bit."""
    mappo_rnn.main(["--env", "jaxmarl/HeuristicEnemySMAX", "--ippo", "--frames", "32768", "--quiet",
                    "--out", str(tmp_path)])
    assert (tmp_path / "metrics.csv").read_text().splitlines() == _kept_rows("smax3m_rnn_ippo_s0", 2)


# backends whose envs compile their step with JAX (or MJX) first: their runs go with --all
_COMPILED = {name for name, record in registry.backends().items() if "jax" in record.builds_on}


def _every_backend():
    from test_render import ONE_PER_BACKEND

    for backend, (name, kwargs) in sorted(ONE_PER_BACKEND.items()):
        marks = [pytest.mark.slow] if backend in _COMPILED else []
        yield pytest.param(name, kwargs, marks=marks, id=backend)


@pytest.mark.parametrize("name, kwargs", [
    pytest.param("meltingpot/collaborative_cooking__asymmetric", [], id="meltingpot", marks=pytest.mark.skipif(
        not marl_envs.backend_installed("meltingpot"), reason="needs the meltingpot extra")),
    pytest.param("openspiel/tic_tac_toe", [], id="tic_tac_toe", marks=pytest.mark.skipif(
        not marl_envs.backend_installed("openspiel"), reason="needs the openspiel extra")),
])
def test_an_image_or_a_board_trains_through_the_convolutional_torso(tmp_path, name, kwargs):
    """Melting Pot's RGB view (40, 40, 3) and a tic-tac-toe board (3, 3, 3) pass the conv torso, actor and critic."""
    summary = mappo.main(["--env", name, "--num-envs", "2", "--steps-per-batch", "8", "--frames", "32", "--minibatch",
                          "16", "--epochs", "1", "--hidden", "16", "--quiet", "--out", str(tmp_path), *kwargs])
    assert summary["frames"] == 32
    model = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["model"]
    convs = {key.split(".")[0] for key in model if ".conv." in key}
    assert convs == {"policies", "critics"}, sorted(model)


# one update of 2 envs x 16 steps, 2 epochs of one minibatch, small networks: every backend trains end to end in
# seconds, and the GIF (16 frames) is drawn wherever the env renders
TINY_RUN = ["--num-envs", "2", "--steps-per-batch", "16", "--frames", "32", "--minibatch", "32", "--epochs", "2",
            "--hidden", "32", "--quiet", "--gif"]


@pytest.mark.parametrize("name, kwargs", list(_every_backend()))
def test_a_short_run_ends_normally_on_every_backend(tmp_path, name, kwargs):
    """``mappo.py --env NAME`` on a tiny budget with ``--gif``, in a fresh interpreter, exits 0 in every backend (the
    env built to draw where its family can): a GIF where the env renders, else the reason on stderr."""
    pairs = [f"{key}={value}" for key, value in kwargs.items()]
    run = subprocess.run([sys.executable, str(Path(mappo.__file__)), "--env", name, "--out", str(tmp_path), *TINY_RUN,
                          *(["--env-kwargs", *pairs] if pairs else [])],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads((tmp_path / "summary.json").read_text())["frames"] == 32  # the one update ran
    if (tmp_path / "policy.gif").exists():
        assert (tmp_path / "policy.gif").read_bytes()[:6] == b"GIF89a"
    else:
        assert f"no policy.gif for {name}: " in run.stderr, run.stderr[-2000:]


def test_recurrent_ippo_on_smax_takes_jaxmarls_ippo_settings():
    """``mappo_rnn.py --ippo`` on SMAX: JaxMARL's ippo_rnn_smax.yaml (Adam 4e-3, clip 0.05, entropy 0.01) and its
    network and minibatches (one trunk of two heads, whole 128-step sequences, single agents' sequences across
    envs) over the MAPPO preset (2e-3, 0.2, 0, apart, 16 steps, whole envs), whose other settings it shares."""
    mappo_preset = _common.presets("jaxmarl/HeuristicEnemySMAX", mappo_rnn.DEFAULTS, recurrent=True)
    ippo_preset = _common.presets("jaxmarl/HeuristicEnemySMAX", mappo_rnn.DEFAULTS, recurrent=True, ippo=True)
    own = ("lr", "clip", "entropy", "shared", "bptt", "shuffle")
    assert [mappo_preset[k] for k in own] == [2e-3, 0.2, 0.0, False, 16, "envs"]
    assert [ippo_preset[k] for k in own] == [4e-3, 0.05, 0.01, True, 128, "agents"]
    assert {k: v for k, v in ippo_preset.items() if k not in own} == \
        {k: v for k, v in mappo_preset.items() if k not in own}
    assert _common.presets("vmas/navigation", mappo_rnn.DEFAULTS, recurrent=True, ippo=True) == \
        _common.presets("vmas/navigation", mappo_rnn.DEFAULTS, recurrent=True)  # no IPPO preset: the MAPPO one


def test_recurrent_ippo_minibatches_of_agents_across_envs(tmp_path, capsys, monkeypatch):
    """``--shuffle agents`` (JaxMARL's minibatches): each agent of a group gets sequences of envs of its own, the
    agent staying in its slot; a MAPPO critic reads the state of each agent's env, and refuses where the env has no
    root state (it would read every agent of one env)."""
    from tensordict import TensorDict

    args = mappo_rnn.parse_args(["--env", "vmas/navigation", "--ippo", "--shuffle", "agents"])
    env = marl_envs.make("vmas/navigation", num_envs=5, n_agents=3)
    group = mappo_rnn.Group(env, "agents", env.reset(), args)
    flat = TensorDict({"agents": TensorDict({"x": torch.randn(5, 4, 3, 2), "h": torch.randn(5, 4, 3)}, [5, 4]),
                       "state": torch.zeros(5, 4, 7)}, [5, 4])
    rows = torch.tensor([[4, 0], [1, 3], [2, 2]])  # agent slot -> the env sequences it takes
    mb = group.across(flat, rows)
    assert mb.batch_size == (2, 4) and set(mb.keys(True, True)) == {("agents", "x"), ("agents", "h")}
    for a in range(3):
        for i in range(2):
            assert torch.equal(mb["agents", "x"][i, :, a], flat["agents", "x"][rows[a, i], :, a])
            assert torch.equal(mb["agents", "h"][i, :, a], flat["agents", "h"][rows[a, i], :, a])
    mappo = mappo_rnn.parse_args(["--env", "vmas/navigation", "--shuffle", "agents"])
    with pytest.raises(ValueError, match=r"^--shuffle agents puts an agent's sequences beside other envs' agents, "
                                         r"and this MAPPO critic reads every agent of its env \(the env has no root "
                                         r"\"state\"\): pass --ippo with it$"):
        mappo_rnn.Group(env, "agents", env.reset(), mappo)
    stateful = PredatorPreyCount(num_envs=5)
    predators = mappo_rnn.Group(stateful, "predator", stateful.reset(), mappo)
    flat = TensorDict({"predator": TensorDict({"x": torch.randn(5, 4, 2, 3)}, [5, 4]),
                       "state": torch.randn(5, 4, 4)}, [5, 4])
    rows = torch.tensor([[4, 0], [1, 3]])
    critic_in = predators.critic_in(predators.across(flat, rows), 2)  # (2 sequences, 4 steps, 2 agents, 4 + 2)
    for a in range(2):
        for i in range(2):
            assert torch.equal(critic_in[i, :, a, :4], flat["state"][rows[a, i]])
            assert torch.equal(critic_in[i, :, a, 4:], torch.eye(2)[a].expand(4, 2))
    summary = mappo_rnn.main(["--env", "vmas/navigation", "--ippo", "--shuffle", "agents", "--frames", "400",
                              "--num-envs", "4", "--steps-per-batch", "50", "--minibatch", "100", "--quiet",
                              "--out", str(tmp_path / "run")])
    assert summary["frames"] == 400 and math.isfinite(summary["final_mean_episode_reward"])
    monkeypatch.setattr(registry, "_USER_ENVS", {"test/predator_prey": PredatorPreyCount})
    summary = mappo_rnn.main(["--env", "test/predator_prey", "--shuffle", "agents", "--frames", "80",
                              "--num-envs", "4", "--steps-per-batch", "10", "--minibatch", "20", "--quiet",
                              "--out", str(tmp_path / "mappo")])  # MAPPO, its critics reading the world state
    assert summary["algorithm"] == "MAPPO" and math.isfinite(summary["final_mean_episode_reward"])


def test_recurrent_shared_critic_is_a_head_on_the_actors_gru():
    """``--shared``: IPPO's critic reads the actor's embedding and GRU (the same parameters, trained by both losses,
    counted once by the optimiser), with a head of its own; MAPPO's critic, which reads the world state, cannot."""
    import argparse

    env = marl_envs.make("vmas/navigation", num_envs=2, n_agents=2, max_steps=5)
    args = argparse.Namespace(**{**mappo_rnn.DEFAULTS, "ippo": True, "shared": True, "agent_ids": False})
    agents = mappo_rnn.Agents(env, args)
    group = agents.groups[0]
    assert group.critic.cell is group.policy.net.cell and group.critic.embed is group.policy.net.embed
    assert group.critic.head is not group.policy.net.head
    apart = mappo_rnn.Agents(env, argparse.Namespace(**{**vars(args), "shared": False}))
    shared_ids = {id(p) for p in agents.parameters()}
    assert len(shared_ids) == len(list(agents.parameters())) < len(list(apart.parameters()))
    with pytest.raises(ValueError, match=r"^--shared shares the actor's GRU with a critic that reads what the actor "
                                         r"reads: pass --ippo too \(MAPPO's critic reads the world state\)$"):
        mappo_rnn.Agents(env, argparse.Namespace(**{**vars(args), "ippo": False}))
