"""TorchRL's class names in ``marl_envs.torchrl`` (OpenSpiel, Level-Based Foraging, Brax, Jumanji, MuJoCo
Playground), each built with the keywords of TorchRL's own docstring example and compared, key by key, with
TorchRL's class on the same library: every key TorchRL's class writes is there with the same per-env shape and
dtype, but for the differences named in ``DIFFERENT`` (listed in docs/torchrl.md too).

These run in .venv-torchrl (TorchRL 0.14, ``make test``); elsewhere they skip.
"""

from __future__ import annotations

import importlib.metadata
import os
import warnings

import pytest
import torch

import marl_envs

if os.environ.get("MARL_ENVS_REQUIRE_TORCHRL") != "1":
    pytest.importorskip("torchrl", reason="the TorchRL interop is tested in .venv-torchrl (make test)")
if tuple(int(part) for part in importlib.metadata.version("torchrl").split(".")[:2]) < (0, 14):
    pytest.skip("compared with TorchRL 0.14's classes (.venv-torchrl); the TorchRL 0.11 of .venv-benchmarl is there "
                "for BenchMARL", allow_module_level=True)

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*inherits from WeightUpdaterBase is deprecated",
                            category=DeprecationWarning)
    import torchrl.envs as torchrl_envs
    from torchrl.envs.utils import check_env_specs as torchrl_check_env_specs

import marl_envs.torchrl as ours  # noqa: E402

HAS = {backend: marl_envs.backend_installed(backend) for backend in marl_envs.available_backends()}

#: Our class -> (backend, TorchRL's docstring example: args and keywords, the keywords TorchRL's class is given here).
#: Without a batch_size, ours is one env of batch (), as TorchRL's; the Brax example's
#: keywords on Brax's test env "fast" (its "ant" takes minutes to compile on a CPU in TorchRL's default pipeline).
EXAMPLES = {
    "OpenSpielEnv": ("openspiel", ("chess",), {}, {}),
    "LBForagingEnv": ("lbforaging", ("Foraging-8x8-2p-3f-v3",), {"categorical_actions": False},
                      {"categorical_actions": False}),
    "BraxEnv": ("brax", ("fast",), {"batch_size": [10], "requires_grad": True, "cache_clear_frequency": 100},
                {"batch_size": [10], "requires_grad": True, "cache_clear_frequency": 100}),
    "MujocoPlaygroundEnv": ("playground", ("CartpoleBalance",), {"batch_size": [4], "device": "cpu"},
                            {"batch_size": [4], "device": "cpu"}),
}
#: Keys TorchRL's class writes that ours does not, and why.
DIFFERENT = {
    # the Brax pipeline state stays in JAX (docs/torchrl.md, "Brax: state")
    "BraxEnv": {"state"},
}


def _layout(env, steps: int = 3) -> dict:
    """Each key of a rollout (TorchRL's rollout, random actions) -> (per-env shape, dtype)."""
    with warnings.catch_warnings():  # Brax's generalized pipeline reads a field MuJoCo deprecates
        warnings.simplefilter("ignore", DeprecationWarning)
        data = env.rollout(steps, break_when_any_done=False)
    out = {}
    for key in data.keys(True, True):
        value = data.get(key)
        if isinstance(value, torch.Tensor):
            out[key] = (tuple(value.shape[env.batch_dims + 1:]), value.dtype)
    return out


def _skipped(key, names: set) -> bool:
    key = key[1:] if isinstance(key, tuple) and key[0] == "next" else key
    return (key if isinstance(key, str) else key[0]) in names


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_each_class_takes_torchrls_example_keywords_and_writes_torchrls_keys(name):
    backend, args, kwargs, theirs_kwargs = EXAMPLES[name]
    if not HAS[backend]:
        pytest.skip(f"the {backend} backend is not installed")
    env = getattr(ours, name)(*args, **kwargs)
    assert isinstance(env, ours.TorchRLEnv) and env.batch_size == torch.Size(kwargs.get("batch_size") or [])
    torchrl_check_env_specs(env)
    if not hasattr(torchrl_envs, name):  # LBForagingEnv is new in TorchRL 0.14.1, MujocoPlaygroundEnv in 0.12
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = getattr(torchrl_envs, name)(*args, **theirs_kwargs)
    mine = _layout(env)
    assert env.batch_size == theirs.batch_size
    expected = {key: layout for key, layout in _layout(theirs).items() if not _skipped(key, DIFFERENT.get(name, set()))}
    assert expected and {key: layout for key, layout in expected.items() if mine.get(key) != layout} == {}


def _needs(backend: str) -> None:
    if not HAS[backend]:
        pytest.skip(f"the {backend} backend is not installed")


def test_the_wrappers_take_the_library_env_torchrls_wrappers_take():
    _needs("openspiel")
    import pyspiel

    game = pyspiel.load_game("tic_tac_toe")
    wrapped = ours.OpenSpielWrapper(game.new_initial_state(), batch_size=[3], categorical_actions=True)
    assert _layout(wrapped) == _layout(ours.OpenSpielEnv("tic_tac_toe", batch_size=[3], categorical_actions=True))
    state = game.new_initial_state()
    state.apply_action(4)
    with pytest.raises(ValueError, match="OpenSpielWrapper starts every env at the game's initial state; this state "
                                         "is 1 moves in: pass game.new_initial_state()"):
        ours.OpenSpielWrapper(state)
    with pytest.raises(TypeError, match=r"OpenSpielWrapper takes a pyspiel.State \(pyspiel.load_game\(name\)"):
        ours.OpenSpielWrapper(game)


def test_the_lbforaging_and_brax_wrappers():
    _needs("lbforaging")
    import gymnasium
    import lbforaging  # noqa: F401 - registers the Foraging ids

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = gymnasium.make("Foraging-8x8-2p-3f-v3")
    wrapped = ours.LBForagingWrapper(raw, categorical_actions=False, batch_size=[2])
    assert _layout(wrapped) == _layout(ours.LBForagingEnv("Foraging-8x8-2p-3f-v3", categorical_actions=False,
                                                          batch_size=[2]))
    _needs("brax")
    import brax.envs

    mine = ours.BraxWrapper(brax.envs.get_environment("fast"), batch_size=[4])
    theirs = torchrl_envs.BraxWrapper(brax.envs.get_environment("fast"), batch_size=[4], device="cpu")
    reference = {key: layout for key, layout in _layout(theirs).items() if not _skipped(key, {"state"})}
    assert {key: layout for key, layout in reference.items() if _layout(mine).get(key) != layout} == {}
    # TorchRL's _env: the Brax env inside, which BraxWrapper takes back (the same rollout from the same seed)
    made = ours.BraxEnv("fast", batch_size=[2], seed=3)
    assert isinstance(made._env, brax.envs.Env)
    again = ours.BraxWrapper(made._env, batch_size=[2], seed=3)
    torch.manual_seed(0)
    first = made.rollout(3)
    torch.manual_seed(0)
    assert (again.rollout(3) == first).all()
    made.clear_cache()  # jax.clear_caches(): the env compiles again and steps on
    assert made.rollout(2).shape == (2, 2)


def test_a_differentiable_brax_env_cuts_its_history_where_the_data_handed_in_are_detached():
    """TorchRL's Brax class carries the simulator state in the data, so ``next_td.detach()`` (truncated backprop
    through time) starts a new gradient history; ours, whose state stays in the env, does the same."""
    _needs("brax")
    env = ours.BraxEnv("fast", batch_size=[2], requires_grad=True, seed=0)
    action = torch.ones(env.action_spec.shape, requires_grad=True)
    td = env.reset()
    for _ in range(3):  # each backward frees its step's graph; the detached data do not lead back to it
        out, td = env.step_and_maybe_reset(td.set("action", action))
        out["next", "observation"].sum().backward()
        td = td.detach()
    out, td = env.step_and_maybe_reset(td.set("action", action))
    out["next", "observation"].sum().backward()
    out, _ = env.step_and_maybe_reset(td.set("action", action))  # attached data: the history goes on through
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):  # the step freed above
        out["next", "observation"].sum().backward()


def test_jumanji_and_playground_splits_by_torchrls_keywords():
    _needs("jumanji")
    warehouse = ours.JumanjiEnv("RobotWarehouse-v0", batch_size=[2])
    assert warehouse.batch_size == (2,) and "agents" in warehouse.group_map
    with pytest.raises(ValueError, match=r"JumanjiEnv\(categorical_action_encoding=False\): our Jumanji envs take "
                                         r"categorical actions"):
        ours.JumanjiEnv("RobotWarehouse-v0", categorical_action_encoding=False)
    _needs("playground")
    # a name takes our split of the robot, not MABrax's tables as TorchRL's does, and says so
    with pytest.warns(UserWarning, match=r"^agent_mapping='halfcheetah_6x1' names one of JaxMARL's MABrax splits, "
                                         r"whose index tables TorchRL's MujocoPlaygroundEnv applies to Playground's "
                                         r"observation; marl-envs splits 'CheetahRun' from its own model instead"):
        cheetah = ours.MujocoPlaygroundEnv("CheetahRun", agent_mapping="halfcheetah_6x1", batch_size=[2])
    assert cheetah.env.env_name == "CheetahRun_6x1" and cheetah.n_agents == 6
    assert sorted(cheetah.reset().keys()) == [*(f"agent_{i}" for i in range(6)), "done", "terminated", "truncated"]
    # TorchRL's record of the split in use: ours, in TorchRL's type
    split = {a.name: list(a.action_indices) for a in cheetah._agent_mapping.agents}
    assert split == {a: list(i) for a, i in cheetah.env.action_indices.items()} and len(split) == 6
    with pytest.warns(UserWarning, match="MABrax"), pytest.raises(
            ValueError, match=r"Unknown agent_mapping='hopper_3x1' on 'HopperHop': no env 'HopperHop_3x1'; "
                              r"the splits of 'HopperHop' here: \['HopperHop_4x1'\]"):
        ours.MujocoPlaygroundEnv("HopperHop", agent_mapping="hopper_3x1")


def test_a_batch_of_one_dim_none_or_two_as_torchrls_classes_take_it():
    """``batch_size=()`` (or none): one env, batch ``()``; ``(a, b)``: ``a * b`` envs seen as that batch. The specs,
    the masks TorchRL's random draws read, the resets of ended games and TorchRL's checks all follow."""
    _needs("openspiel")
    from torchrl.envs.utils import RandomPolicy

    one = ours.OpenSpielEnv("tic_tac_toe", categorical_actions=True, seed=0)
    assert one.batch_size == () and one.num_envs == 1 and one.full_action_spec["agents", "action"].shape == (2,)
    torchrl_check_env_specs(one)
    data = one.rollout(12, RandomPolicy(one.full_action_spec), break_when_any_done=False)
    assert data.batch_size == (12,) and data["next", "done"].any()  # a game ended and the next one started
    board = one.reset()
    for _ in range(12):  # every move drawn from the action spec is legal: its mask follows the games
        _, board = one.step_and_maybe_reset(board.update(one.full_action_spec.rand()))
    grid = ours.OpenSpielEnv("tic_tac_toe", batch_size=(2, 3), seed=0)
    assert grid.num_envs == 6 and grid.full_action_spec["agents", "action"].shape == (2, 3, 2, 9)
    torchrl_check_env_specs(grid)
    data = grid.rollout(4, RandomPolicy(grid.full_action_spec), break_when_any_done=False)
    assert data.batch_size == (2, 3, 4) and data["current_player"].shape == (2, 3, 4)
    again = grid.reset(data[..., -1]["next"].set("_reset", torch.tensor([[True], [False], [False]] * 2).reshape(2, 3, 1)))
    assert again.batch_size == (2, 3) and (again["current_player"][:, 0] == 0).all()
    with pytest.raises(ValueError, match=r"^batch_size=\(2, 3\) holds 6 envs; the env has 4$"):
        ours.TorchRLEnv(marl_envs.make("openspiel/tic_tac_toe", num_envs=4), batch_size=(2, 3))


def test_openspiel_return_state_resets_to_the_saved_games():
    """TorchRL's ``return_state=True``: ``"state"`` holds each game serialized, and ``reset(data)`` of data holding
    it resets to those games (the rows a ``_reset`` entry selects), batched."""
    _needs("openspiel")
    from tensordict import NonTensorStack

    env = ours.OpenSpielEnv("tic_tac_toe", return_state=True, batch_size=(3,), seed=0)
    torchrl_check_env_specs(env)
    td = env.step(env.rand_action(env.reset()))
    saved = td["next"].clone()
    assert isinstance(saved.get("state"), NonTensorStack) and saved.get("state").tolist() == env.env.game_states()
    moved = env.step(env.rand_action(saved))["next"]
    back = env.reset(saved)
    assert back.get("state").tolist() == saved.get("state").tolist() != moved.get("state").tolist()
    assert (back.exclude("state") == saved.exclude("state")).all()
    env.step(env.rand_action(back))
    kept = env.env.game_states()[1]
    env.reset(saved.clone().set("_reset", torch.tensor([[True], [False], [True]])))
    assert env.env.game_states() == [saved.get("state").tolist()[0], kept, saved.get("state").tolist()[2]]


def test_openspiel_steps_ended_games_as_torchrls_does():
    """Once every game has ended, a step changes nothing (TorchRL's ``OpenSpielEnv``): the same data, rewards of 0,
    until a reset; a batch of simultaneous-move games where only some have ended is refused, naming the env."""
    _needs("openspiel")
    env = ours.OpenSpielEnv("matrix_pd", return_state=True)  # one simultaneous move ends the game
    env.reset()
    ended = env.step(env.full_action_spec.rand())["next"]
    assert ended["done"].all() and ended["agents", "reward"].abs().sum() > 0
    again = env.step(env.full_action_spec.rand())["next"]
    assert (again.exclude(("agents", "reward")) == ended.exclude(("agents", "reward"))).all()
    assert (again["agents", "reward"] == 0).all()
    assert (env.reset(ended.exclude(("agents", "reward")))["done"]).all()  # to an ended game, as TorchRL's allows
    assert (env.step(env.full_action_spec.rand())["next", "agents", "reward"] == 0).all()  # and a step of it: none
    assert not env.reset()["done"].any()
    assert env.step(env.full_action_spec.rand())["next", "agents", "reward"].abs().sum() > 0  # a real move again

    env = ours.OpenSpielEnv("matrix_pd", batch_size=(2,), seed=0)
    td = env.step(env.rand_action(env.reset()))["next"]
    td = env.reset(td.set("_reset", torch.tensor([[False], [True]])))  # env 0 still ended, env 1 a new game
    with pytest.raises(ValueError, match=r"^env 0 has no agents left: its episode is over \(done\); reset it before "
                                         r"stepping again \(rollout and step_and_maybe_reset do\)$"):
        env.step(env.rand_action(td))


def test_what_our_classes_refuse_names_the_reason():
    _needs("openspiel")
    with pytest.raises(TypeError, match=r"^Batch size used in constructor does not match openspiel batch size. "
                                        r"batch_size=\(2,\) but num_envs=3: pass one of them$"):
        ours.OpenSpielEnv("tic_tac_toe", batch_size=[2], num_envs=3)
    assert "tic_tac_toe" in ours.OpenSpielEnv.available_envs


def test_playground_takes_torchrls_agent_mapping_and_writes_its_keys():
    """TorchRL's ``MujocoPlaygroundAgentMapping`` (its docstring's two halves of a robot): each agent its own group
    without an agent dim, the same keys, shapes and dtypes as TorchRL's class, a truncated flag beside them."""
    _needs("playground")
    playground = pytest.importorskip("torchrl.envs.libs.mujoco_playground")
    Mapping, Agent = playground.MujocoPlaygroundAgentMapping, playground.MujocoPlaygroundAgentSpec
    obs, act = 17, 6  # CheetahRun's
    halves = Mapping(agents=[Agent(name="agent_0", action_indices=[0, 1, 2], observation_indices=list(range(8))),
                             Agent(name="agent_1", action_indices=[3, 4, 5], observation_indices=list(range(8, obs)))])
    env = ours.MujocoPlaygroundEnv("CheetahRun", agent_mapping=halves, batch_size=[2])
    torchrl_check_env_specs(env)
    assert env.group_map == {"agent_0": ["agent_0"], "agent_1": ["agent_1"]} and "state" not in env.reset().keys()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = playground.MujocoPlaygroundEnv("CheetahRun", agent_mapping=halves, batch_size=[2])
    mine = _layout(env)
    assert mine[("agent_0", "observation")] == ((8,), torch.float32) and mine[("agent_1", "action")][0] == (3,)
    assert {key: layout for key, layout in _layout(theirs).items() if mine.get(key) != layout} == {}
    assert set(mine) - set(_layout(theirs)) == {"truncated", ("next", "truncated")}
    for agents, match in [([Agent(name="a", action_indices=[0, 1, 2, 3], observation_indices=[0]),
                            Agent(name="b", action_indices=[3, 4, 5], observation_indices=[1])], "overlap"),
                          ([Agent(name="a", action_indices=[0, 1], observation_indices=[0])], "Missing indices"),
                          ([Agent(name="a", action_indices=[*range(act), 99], observation_indices=[0])],
                           "out of range")]:
        with pytest.raises(ValueError, match=match):
            ours.MujocoPlaygroundEnv("CheetahRun", agent_mapping=Mapping(agents=agents))
    # TorchRL's "max" layout: [one-hot index | own observation | zeros], actions of the largest size (first ones used)
    unequal = Mapping(agents=[Agent(name="agent_0", action_indices=[0, 1], observation_indices=list(range(8))),
                              Agent(name="agent_1", action_indices=[2, 3, 4, 5], observation_indices=list(range(8, obs)))],
                      homogenization_mode="max")
    padded = ours.MujocoPlaygroundEnv("CheetahRun", agent_mapping=unequal, batch_size=[2])
    torchrl_check_env_specs(padded)
    data = padded.rollout(2)
    assert data["agent_0", "observation"].shape == (2, 2, 11) and data["agent_0", "action"].shape == (2, 2, 4)
    assert (data["agent_1", "observation"][..., :2] == torch.tensor([0.0, 1.0])).all()
    assert (data["agent_0", "observation"][..., 10] == 0).all()  # agent_0 observes 8 entries of the 9 kept
