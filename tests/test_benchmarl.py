"""marl_envs.benchmarl: any env as a BenchMARL task, trained by BenchMARL's own ``Experiment``.

These run in .venv-benchmarl (BenchMARL 1.5.2, torchrl 0.11.1, tensordict 0.11.0), where `make test` sets
MARL_ENVS_REQUIRE_BENCHMARL=1 so that a missing BenchMARL fails instead of skipping. Elsewhere they skip.
Two iterations of each algorithm on every env of the matrix, the cells of docs/benchmarl.md's table, run by default.
"""

from __future__ import annotations

import itertools
import os
import re
import warnings
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import marl_envs

if os.environ.get("MARL_ENVS_REQUIRE_BENCHMARL") != "1":
    pytest.importorskip("benchmarl", reason="the BenchMARL tasks are tested in .venv-benchmarl (make test)")

with warnings.catch_warnings():  # TorchRL deprecates its own weight updaters while BenchMARL imports its collectors
    warnings.filterwarnings("ignore", message=".*inherits from WeightUpdaterBase is deprecated",
                            category=DeprecationWarning)
    from benchmarl.algorithms import IppoConfig, IqlConfig, MaddpgConfig, MappoConfig, MasacConfig, QmixConfig
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models import MlpConfig

from marl_envs.benchmarl import MarlEnvsTask, benchmarl_defaults, task  # noqa: E402

pytestmark = [
    # BenchMARL 1.5.2 on TorchRL 0.11 warns about its own choices: the collector it uses, frames and iterations
    # both set (the test sets both on purpose), task configs without a dataclass
    pytest.mark.filterwarnings("ignore:SyncDataCollector has been deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:max_n_frames and max_n_iters have both been set:UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:benchmarl"),
    # TorchRL 0.11's masked categorical distribution calls a torch loss with its legacy arguments
    pytest.mark.filterwarnings("ignore:size_average and reduce args will be deprecated:UserWarning"),
]
HAS = {backend: marl_envs.backend_installed(backend) for backend in marl_envs.available_backends()}
ALGORITHMS = {"mappo": MappoConfig, "ippo": IppoConfig, "masac": MasacConfig, "maddpg": MaddpgConfig,
              "qmix": QmixConfig, "iql": IqlConfig}
#: The matrix of docs/benchmarl.md's table: each env with the keywords it is trained with (evaluation episodes of
#: max_steps). Every cell runs by default (two small iterations each); a test checks the table against it.
ENVS = {
    "vmas/balance": {"max_steps": 50},
    "brax/ant_4x2": {"max_steps": 50},
    "jaxmarl/MPE_simple_spread_v3": {"max_steps": 25},
    "pettingzoo/mpe/simple_spread_v3": {"max_steps": 25},
    "pettingzoo/classic/leduc_holdem_v4": {"max_steps": 10},  # turn-based, with action masks
    "jaxmarl/SMAX": {"scenario": "3m", "max_steps": 20},  # two teams, with action masks
    "openspiel/tic_tac_toe": {"flatten_observations": True},  # a board, turn-based, with action masks
}
DOCS = Path(__file__).parents[1] / "docs" / "benchmarl.md"


def _needs(name: str):
    backend = name.partition("/")[0]
    return pytest.mark.skipif(not HAS[backend], reason=f"the {backend} backend is not installed")


def small_config(folder) -> ExperimentConfig:
    """BenchMARL's default experiment made small: 2 iterations of 200 frames over 4 envs, one evaluation."""
    cfg = ExperimentConfig.get_from_yaml()
    cfg.sampling_device = cfg.train_device = cfg.buffer_device = "cpu"
    cfg.max_n_iters = 2
    cfg.on_policy_collected_frames_per_batch = cfg.off_policy_collected_frames_per_batch = 200
    cfg.on_policy_n_envs_per_worker = cfg.off_policy_n_envs_per_worker = 4
    cfg.on_policy_n_minibatch_iters = cfg.off_policy_n_optimizer_steps = 1
    cfg.on_policy_minibatch_size = cfg.off_policy_train_batch_size = 100
    cfg.evaluation, cfg.evaluation_interval, cfg.evaluation_episodes = True, 200, 2
    cfg.render = False  # BenchMARL writes videos with torchvision, which does not import beside a CPU torch wheel
    cfg.loggers, cfg.create_json, cfg.checkpoint_interval = ["csv"], False, 0
    cfg.save_folder = str(folder)
    return cfg


@pytest.fixture(scope="module")
def tasks():
    return {}


def _task(tasks: dict, name: str) -> MarlEnvsTask:
    if name not in tasks:
        tasks[name] = task(name, **ENVS[name])
    return tasks[name]


MATRIX = [pytest.param(env, algo, marks=[_needs(env)], id=f"{env}-{algo}") for env in ENVS for algo in ALGORITHMS]


@pytest.mark.parametrize("name, algorithm", MATRIX)
def test_experiment_runs_two_iterations(name, algorithm, tasks, tmp_path):
    chosen = _task(tasks, name)
    config = ALGORITHMS[algorithm].get_from_yaml()
    if not _compatible(chosen, algorithm):
        with pytest.raises(ValueError, match="is not compatible with the action space"):
            Experiment(task=chosen, algorithm_config=config, model_config=MlpConfig.get_from_yaml(),
                       critic_model_config=MlpConfig.get_from_yaml(), seed=0, config=small_config(tmp_path))
        return
    experiment = Experiment(task=chosen, algorithm_config=config, model_config=MlpConfig.get_from_yaml(),
                            critic_model_config=MlpConfig.get_from_yaml(), seed=0, config=small_config(tmp_path))
    experiment.run()
    assert experiment.n_iters_performed == 2
    assert experiment.total_frames == 400
    logged = {p.stem for p in (tmp_path / experiment.name / experiment.name / "scalars").iterdir()}
    assert {"collection_reward_episode_reward_mean", "eval_reward_episode_reward_mean"} <= logged
    if chosen.action_mask_spec(experiment.test_env) is not None:  # the trained policy picks legal moves only
        rollout = experiment.test_env.rollout(20, policy=experiment.policy, break_when_any_done=False)
        for group in experiment.group_map:
            legal = rollout[group, "action_mask"].gather(-1, rollout[group, "action"].unsqueeze(-1)).squeeze(-1)
            acting = rollout.get((group, "mask"), torch.ones_like(legal.unsqueeze(-1))).squeeze(-1)  # whose count
            assert acting.any() and legal[acting].all()


def _compatible(chosen: MarlEnvsTask, algorithm: str) -> bool:
    config = ALGORITHMS[algorithm].get_from_yaml()
    return any(getattr(chosen, f"supports_{kind}_actions")() and getattr(config, f"supports_{kind}_actions")()
               for kind in ("continuous", "discrete"))


def test_the_docs_table_states_what_the_matrix_runs(tasks):
    """Each row of docs/benchmarl.md's table is an env of the matrix, each column an algorithm; a cell says "ok"
    exactly where BenchMARL takes the pair (trained by test_experiment_runs_two_iterations), "-" where it refuses
    it (the refusal checked there)."""
    lines = DOCS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| env | MAPPO"))
    columns = [cell.strip().lower() for cell in lines[start].strip("|").split("|")[1:]]
    assert columns == list(ALGORITHMS)
    stated = {}
    for row in itertools.takewhile(lambda line: line.startswith("|"), lines[start + 2:]):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        stated[re.match(r"`([^`]+)`", cells[0]).group(1)] = dict(zip(columns, cells[1:], strict=True))
    assert set(stated) == set(ENVS)
    for name, cells in stated.items():
        if not HAS[name.partition("/")[0]]:
            continue
        for algorithm, cell in cells.items():
            assert cell.startswith("ok") == _compatible(_task(tasks, name), algorithm), (name, algorithm, cell)
            assert cell.startswith("ok") or cell == "-", (name, algorithm, cell)


@_needs("vmas/balance")
def test_task_reads_the_env():
    # BenchMARL's own balance.yaml gives the defaults; the keywords given replace them
    assert benchmarl_defaults("vmas/balance") == {"max_steps": 100, "n_agents": 4, "random_package_pos_on_line": True,
                                                  "package_mass": 5}
    balance = task("vmas/balance", max_steps=50, n_agents=3)
    assert (balance.name, balance.env_id, balance.config) == (
        "vmas_balance", "vmas/balance",
        {"max_steps": 50, "n_agents": 3, "random_package_pos_on_line": True, "package_mass": 5})
    assert balance.supports_continuous_actions() and balance.supports_discrete_actions()
    assert balance.env_name() == "marl_envs"
    env = balance.get_env_fun(num_envs=3, continuous_actions=False, seed=1, device="cpu")()
    assert env.batch_size == (3,) and env.env.max_steps == 50
    assert balance.group_map(env) == {"agents": ["agent_0", "agent_1", "agent_2"]}
    assert balance.max_steps(env) == 50 and balance.has_render(env)
    action = balance.action_spec(env)["agents", "action"]
    assert action.dtype == torch.int64 and action.n == 9 and action.shape == (3,)  # Categorical, (n_agents,)
    assert list(balance.observation_spec(env)["agents"].keys()) == ["observation"]
    assert set(balance.info_spec(env)["agents", "info"].keys()) == {"pos_rew", "ground_rew"}
    assert balance.action_mask_spec(env) is None and balance.state_spec(env) is None
    env.reset()  # BenchMARL renders in its evaluation rollouts, after their reset (ours refuse a render before one)
    frame = balance.render_callback(None, env, None)
    assert frame.shape[-1] == 3 and frame.dtype.name == "uint8" and torch.as_tensor(frame).ndim == 3
    continuous = balance.get_env_fun(num_envs=2, continuous_actions=True, seed=1, device="cpu")()
    assert balance.action_spec(continuous)["agents", "action"].dtype == torch.float32


@_needs("pettingzoo/classic/leduc_holdem_v4")
def test_masked_turn_based_task():
    leduc = task("pettingzoo/classic/leduc_holdem_v4", max_steps=10)
    assert leduc.supports_discrete_actions() and not leduc.supports_continuous_actions()
    env = leduc.get_env_fun(num_envs=2, continuous_actions=False, seed=0, device="cpu")()
    assert set(leduc.action_mask_spec(env)["agents"].keys()) == {"action_mask"}
    assert list(leduc.observation_spec(env)["agents"].keys()) == ["observation"]  # not the masks
    with pytest.raises(ValueError, match=r"asked 'pettingzoo/classic/leduc_holdem_v4' for continuous actions; it "
                                         r"has \['discrete'\] actions only"):
        leduc.get_env_fun(num_envs=2, continuous_actions=True, seed=0, device="cpu")


@_needs("pettingzoo/classic/tictactoe_v3")
def test_boards_flattened_for_an_mlp(tmp_path):
    """tictactoe's (3, 3, 2) int8 board: BenchMARL's MLP refuses it as it is, takes it flattened to 18 floats."""
    board = task("pettingzoo/classic/tictactoe_v3", max_steps=9)

    def experiment(chosen):
        return Experiment(task=chosen, algorithm_config=MappoConfig.get_from_yaml(),
                          model_config=MlpConfig.get_from_yaml(), critic_model_config=MlpConfig.get_from_yaml(),
                          seed=0, config=small_config(tmp_path))

    with pytest.raises(ValueError, match=r"MLP input value \('agents', 'observation'\)"):
        experiment(board)
    flat = task("pettingzoo/classic/tictactoe_v3", max_steps=9, flatten_observations=True)
    assert flat.config == board.config == {"max_steps": 9}  # not an env keyword
    trained = experiment(flat)
    observed = trained.observation_spec["agents", "observation"]
    assert observed.shape == (2, 18) and observed.dtype == torch.float32
    trained.run()
    assert trained.total_frames == 400


@_needs("brax/ant_4x2")
def test_state_for_a_centralised_critic():
    ant = task("brax/ant_4x2", max_steps=20)
    assert ant.supports_continuous_actions() and not ant.supports_discrete_actions()
    env = ant.get_env_fun(num_envs=2, continuous_actions=True, seed=0, device="cpu")()
    assert list(ant.state_spec(env).keys()) == ["state"]
    assert not ant.has_render(env) or env.renders


@_needs("vmas/balance")
def test_refusals_name_the_fix():
    # waterfall has no BenchMARL configuration and no time limit of its own
    with pytest.raises(ValueError, match=r"'vmas/waterfall' has no time limit of its own .* "
                                         r"task\('vmas/waterfall', max_steps=N\)"):
        task("vmas/waterfall")
    with pytest.raises(ValueError, match=r"got num_envs=8, which BenchMARL sets from ExperimentConfig"):
        task("vmas/balance", num_envs=8, max_steps=10)
    with pytest.raises(ValueError, match="which BenchMARL sets from ExperimentConfig.prefer_continuous_actions"):
        task("vmas/balance", continuous_actions=False, max_steps=10)
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_agent'; did you mean 'n_agents'"):
        task("vmas/balance", n_agent=3, max_steps=10)
    with pytest.raises(ValueError, match="unknown VMAS scenario 'vmas/balanse'; did you mean 'vmas/balance'"):
        task("vmas/balanse", max_steps=10)


#: Tasks built with no max_steps: each env's own time limit, BenchMARL's configuration of the same task, or the
#: bound of a game that ends itself (tic-tac-toe: 9 moves).
UNTIMED = {"jaxmarl/MPE_simple_spread_v3": ({}, 26), "pettingzoo/mpe/simple_spread_v3": ({}, 100),
           "pettingzoo/classic/tictactoe_v3": ({"flatten_observations": True}, 9), "vmas/simple_adversary": ({}, 100)}


# episodes of 100 steps outlast an iteration of 200 frames over 4 envs: BenchMARL says so, as it should
@pytest.mark.filterwarnings("ignore:No episode terminated this iteration:UserWarning")
@pytest.mark.parametrize("name", [pytest.param(name, marks=_needs(name)) for name in UNTIMED])
def test_experiment_runs_without_max_steps(name, tmp_path):
    keywords, length = UNTIMED[name]
    chosen = task(name, **keywords)
    assert "max_steps" not in keywords and chosen.eval_steps == length
    experiment = Experiment(task=chosen, algorithm_config=MappoConfig.get_from_yaml(),
                            model_config=MlpConfig.get_from_yaml(), critic_model_config=MlpConfig.get_from_yaml(),
                            seed=0, config=small_config(tmp_path))
    experiment.run()
    assert experiment.n_iters_performed == 2 and experiment.total_frames == 400


def test_benchmarl_defaults_match_its_task_configs():
    assert benchmarl_defaults("pettingzoo/mpe/simple_spread_v3") == {"max_cycles": 100, "N": 3, "local_ratio": 0.5}
    assert benchmarl_defaults("magent2/adversarial_pursuit_v4")["max_cycles"] == 500
    assert benchmarl_defaults("pettingzoo/mpe/simple_v3") == {}  # BenchMARL has no simple.yaml
    assert benchmarl_defaults("jaxmarl/MPE_simple_spread_v3") == {}  # nor JaxMARL tasks


@pytest.mark.skipif(not HAS["gymnax"], reason="the gymnax backend is not installed")
def test_single_agent_env_refused():
    with pytest.raises(ValueError, match=r"'gymnax/CartPole-v1' is a single-agent env .* BenchMARL trains groups"):
        task("gymnax/CartPole-v1", max_steps=10)


def test_log_info_reads_infos_where_episodes_end():
    done = torch.tensor([[False, True, False, True]]).unsqueeze(-1)  # (B=1, T=4, 1)
    win = torch.tensor([[0.0, 1.0, 0.0, 0.0]]).reshape(1, 4, 1, 1).expand(1, 4, 2, 1)  # (B, T, n_agents=2, 1)
    batch = TensorDict({"next": {"done": done, "agents": TensorDict({"info": {"won": win}}, [1, 4, 2])}}, [1, 4])
    assert MarlEnvsTask.log_info(batch) == {"collection/agents/episode_end/won": 0.5}
    assert MarlEnvsTask.log_info(batch.set(("next", "done"), torch.zeros_like(done))) == {}
