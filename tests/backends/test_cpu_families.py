"""The CPU families batched by the PettingZoo machinery (Level-Based Foraging, RWARE, MAgent2, MaMuJoCo, OpenSpiel):
exactness against each raw library over episode boundaries, their end flags, dead agents, chance and keywords."""

from __future__ import annotations

import functools
import resource

import numpy as np
import pytest
import torch

from envs import play_to_max_steps
import marl_envs
from marl_envs import registry

STEPS = 40


def _installed(backend: str):
    if not marl_envs.backend_installed(backend):
        pytest.skip(f"{backend} is not installed")


# ------------------------------------------------------------------------------------------------------
# Gymnasium envs with per-agent tuples: Level-Based Foraging and RWARE
# ------------------------------------------------------------------------------------------------------
def _gymnasium_raw(env_id: str, n: int, **kwargs):
    """The library's env class with its registered keywords and ``kwargs`` (``gymnasium.make`` would take
    ``max_episode_steps`` as its own)."""
    import gymnasium

    spec = gymnasium.spec(env_id)
    module, _, attr = spec.entry_point.partition(":")
    cls = getattr(__import__(module, fromlist=[attr]), attr)
    return [cls(**{**spec.kwargs, **kwargs}) for _ in range(n)]


@pytest.mark.parametrize("name, kwargs", [
    ("lbforaging/Foraging-5x5-2p-1f-coop-v3", {"max_episode_steps": 7}),
    ("rware/rware-tiny-2ag-v2", {"max_steps": 6}),
])
def test_tuple_agent_envs_equal_the_library_across_episodes(name, kwargs):
    """Our batch against the library's own envs stepped with the same actions: a raw loop resets an instance
    when its step says ``done``, unseeded, as ours does."""
    _installed(name.partition("/")[0])
    B = 3
    env = marl_envs.make(name, num_envs=B, seed=5, **kwargs)
    raw = _gymnasium_raw(name.partition("/")[2], B, **kwargs)
    obs = [instance.reset(seed=5 + i)[0] for i, instance in enumerate(raw)]
    td = env.reset()
    ends = 0
    for _ in range(STEPS):
        np.testing.assert_array_equal(td["agents", "observation"].numpy(), np.asarray(obs, np.float32))
        td = env.rand_action(td)
        actions = td["agents", "action"].tolist()
        td, td_next = env.step_and_maybe_reset(td)
        for i, instance in enumerate(raw):
            o, reward, done, _, _ = instance.step(actions[i])
            np.testing.assert_array_equal(td["next", "agents", "reward"][i, :, 0].numpy(),
                                          np.asarray(reward, np.float32))
            assert bool(td["next", "done"][i]) == done
            if done:
                ends += 1
                o, _ = instance.reset()
            obs[i] = o
        td = td_next
    assert ends >= B  # every instance crossed an episode boundary


def _same_rollouts(direct, generic, steps: int):
    """``direct`` (a family's own shard) and ``generic`` (the generic PettingZoo path over the same instances) roll out
    ``steps`` auto-reset steps with the same random actions: their data must be equal. Returns ``direct``'s."""
    assert type(direct._runner) is not type(generic._runner)  # the two paths under test
    torch.manual_seed(0)
    a = direct.rollout(steps, break_when_any_done=False)
    torch.manual_seed(0)
    b = generic.rollout(steps, break_when_any_done=False)
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    assert (a == b).all()
    return a


@pytest.mark.parametrize("name, task, ours, group_map", [
    ("lbforaging/Foraging-5x5-2p-1f-coop-v3", {"max_episode_steps": 7}, {}, None),  # the library's end
    ("rware/rware-tiny-2ag-v2", {}, {"max_steps": 6}, "ONE_GROUP_PER_AGENT"),  # our step limit
])
def test_tuple_agent_direct_steps_equal_the_generic_pettingzoo_path(name, task, ours, group_map):
    """A step of Level-Based Foraging and RWARE writes the envs' tuples straight into the frames; the generic
    PettingZoo wrapper over the same views, reading their dicts, gives the same data: with auto-reset across
    episode ends, and a plain ``step`` past the library's end refused alike."""
    _installed(name.partition("/")[0])
    from groupings import MarlGroupMapType
    from marl_envs.backends.pettingzoo import PettingZooWrapper

    groups = None if group_map is None else MarlGroupMapType[group_map]
    direct = marl_envs.make(name, num_envs=3, seed=5, group_map=groups, **task, **ours)
    generic = PettingZooWrapper(functools.partial(direct.task_spec.parallel, **task), num_envs=3, seed=5,
                                group_map=groups, **ours)
    a = _same_rollouts(direct, generic, 20)
    assert a["next", "done"].sum() >= 3
    if ours:
        return
    for env in (direct, generic):
        td = env.reset()
        for _ in range(10):
            td = env.step_mdp(env.rand_step(td))
            if td["done"].any():
                break
        with pytest.raises(ValueError, match="has no agents left"):
            env.rand_step(td)


@pytest.mark.parametrize("name, library_class", [
    ("lbforaging/Foraging-5x5-2p-1f-coop-v3", "lbforaging.foraging.environment:ForagingEnv"),
    ("rware/rware-tiny-2ag-v2", "rware.warehouse:Warehouse"),
])
def test_tuple_agent_envs_close_the_library_envs(name, library_class, monkeypatch):
    _installed(name.partition("/")[0])
    module, _, attr = library_class.partition(":")
    cls = getattr(__import__(module, fromlist=[attr]), attr)
    closed = []
    monkeypatch.setattr(cls, "close", lambda self: closed.append(self))
    env = marl_envs.make(name, num_envs=3, seed=0)
    env.rollout(2)
    env.close()
    assert len(closed) == 3 and len({id(instance) for instance in closed}) == 3


def test_lbforaging_terminates_when_cleared_and_truncates_at_its_step_limit():
    """The library says ``done`` for both; a cleared field (the last food loaded: a reward) terminates, the
    step limit truncates (both where the field is cleared on the limit's step)."""
    _installed("lbforaging")
    env = marl_envs.make("lbforaging/Foraging-5x5-2p-1f-v3", num_envs=16, seed=0, max_episode_steps=25)
    data = env.rollout(200, break_when_any_done=False)
    nxt = data["next"]
    term, trunc = nxt["terminated"][..., 0], nxt["truncated"][..., 0]
    team_reward = nxt["agents", "reward"].sum((-2, -1))
    assert term.any() and (trunc & ~term).any()
    assert (team_reward[term] > 0).all()  # the last food was loaded on that step
    assert torch.equal(nxt["agents", "terminated"][..., 0, 0], term)


def test_lbforaging_seeded_reset_is_a_function_of_the_seed():
    """The library's own ``reset(seed=0)`` also depends on where the players stood when the last episode ended;
    ours gives what a freshly built env gives with that seed."""
    _installed("lbforaging")
    env = marl_envs.make("lbforaging/Foraging-2s-8x8-2p-2f-coop-v3", num_envs=2)
    fresh = _gymnasium_raw("Foraging-2s-8x8-2p-2f-coop-v3", 1)[0].reset(seed=0)[0]
    for _ in range(3):
        env.set_seed(0)
        td = env.reset()
        np.testing.assert_array_equal(td["agents", "observation"][0].numpy(), np.asarray(fresh, np.float32))
        env.rollout(30, break_when_any_done=False, auto_reset=False, tensordict=td)


def test_registry_ids_beyond_the_listed_tasks_build_by_name():
    _installed("lbforaging")
    assert "lbforaging/Foraging-5x5-3p-1f-v3" not in marl_envs.available_envs("lbforaging")
    env = marl_envs.make("lbforaging/Foraging-5x5-3p-1f-v3", num_envs=2)
    assert env.group_map == {"agents": ["agent_0", "agent_1", "agent_2"]}
    with pytest.raises(ValueError, match=r"unknown lbforaging task 'lbforaging/Foraging-8x8-2p-2f-cop-v3'; did you "
                                         r"mean 'lbforaging/Foraging-8x8-2p-2f-coop-v3'"):
        marl_envs.make("lbforaging/Foraging-8x8-2p-2f-cop-v3")
    with pytest.raises(TypeError, match=r"lbforaging task 'Foraging-8x8-2p-2f-coop-v3' got an unexpected keyword "
                                        r"argument 'max_episode_step'; did you mean 'max_episode_steps'\?"):
        marl_envs.make("lbforaging/Foraging-8x8-2p-2f-coop-v3", max_episode_step=5)


# ------------------------------------------------------------------------------------------------------
# Time limits: each library's own as max_steps
# ------------------------------------------------------------------------------------------------------
def _ends_at_the_limit(env, nxt, going, true_end):
    """At the step reaching ``max_steps``, in the envs not ended earlier: truncated at the root and for every agent,
    terminated exactly where the library's own end (``true_end``, ``(B,)``) came on that step."""
    assert going.any()
    assert nxt["truncated"].reshape(-1)[going].all()
    assert torch.equal(nxt["terminated"].reshape(-1)[going], true_end[going])
    for group in env.group_map:
        assert nxt[group, "truncated"][going].all()
        terminated = nxt[group, "terminated"][going]
        assert torch.equal(terminated, true_end[going, None, None].expand_as(terminated))


def test_lbforaging_max_episode_steps_is_max_steps_and_truncates():
    _installed("lbforaging")
    env = marl_envs.make("lbforaging/Foraging-5x5-2p-1f-v3", num_envs=2, seed=0, max_episode_steps=6)
    assert env.max_steps == env.envs[0].env._max_episode_steps == 6
    nxt, going, _ = play_to_max_steps(env)
    cleared = torch.tensor([not view.env.field.any() for view in env.envs])  # the task's own end, on that step
    _ends_at_the_limit(env, nxt, going, cleared)
    with pytest.raises(ValueError, match=r"max_steps=51 is beyond the library's own time limit: its episodes end after "
                                         r"50 steps; .*\(max_episode_steps=N\)"):
        marl_envs.make("lbforaging/Foraging-5x5-2p-1f-v3", num_envs=2, max_steps=51)


def test_rware_max_steps_is_its_own_step_limit():
    """RWARE's step limit is its keyword ``max_steps``, ours too: one keyword sets both."""
    _installed("rware")
    env = marl_envs.make("rware/rware-tiny-2ag-v2", num_envs=2, seed=0, max_steps=5)
    assert env.max_steps == env.envs[0].env.max_steps == 5
    nxt, going, _ = play_to_max_steps(env)
    _ends_at_the_limit(env, nxt, going, torch.zeros(2, dtype=torch.bool))  # no goal state
    env = marl_envs.make("rware/rware-tiny-2ag-v2", num_envs=2)
    assert env.max_steps == env.envs[0].env.max_steps == 500
    with pytest.raises(ValueError, match=r"max_steps=501 .*\(max_steps=N\) when building the env"):
        env.max_steps = 501


@pytest.mark.parametrize("name, steps", [("pig", 6), ("coop_box_pushing", 6),
                                         ("markov_soccer", 5)])  # its horizon counts its opening chance move
def test_openspiel_horizon_is_max_steps_and_truncates(name, steps):
    """A game's ``horizon`` parameter is a time limit: the library's game ends at ``max_steps``, truncated."""
    _installed("openspiel")
    env = marl_envs.make(f"openspiel/{name}", num_envs=2, seed=0, horizon=6)
    assert env.envs[0].core.game.get_parameters()["horizon"] == 6 and env.max_steps == steps
    assert env.max_episode_length == steps
    nxt, going, _ = play_to_max_steps(env)
    assert all(view.core.state.is_terminal() for view in env.envs)  # the library's games ended on that step
    _ends_at_the_limit(env, nxt, going, torch.zeros(2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"max_steps=1001 .*\(horizon=N\) when building the env"):
        marl_envs.make(f"openspiel/{name}", num_envs=2, max_steps=1001)


def test_openspiel_horizon_and_a_true_end_on_its_step():
    """Cliff walking ends at its horizon and where the walker falls off the cliff (a reward of -100): a fall on the
    horizon's step is terminated (and truncated), the others only truncated."""
    _installed("openspiel")
    env = marl_envs.make("openspiel/cliff_walking", num_envs=16, seed=0, horizon=3)
    assert env.max_steps == 3
    nxt, going, _ = play_to_max_steps(env)
    fell = nxt["agents", "reward"].reshape(16) <= -100
    assert (fell & going).any() and (~fell & going).any()
    _ends_at_the_limit(env, nxt, going, fell)


def test_games_that_end_themselves_report_their_bound_and_no_time_limit():
    _installed("openspiel")
    env = marl_envs.make("openspiel/kuhn_poker", num_envs=2, seed=0)
    assert env.max_steps is None and env.max_episode_length == env.envs[0].core.game.max_game_length() == 3
    data = env.rollout(3, break_when_any_done=False)
    assert data["next", "done"].any(1).all()  # every game ends within its bound


@pytest.mark.parametrize("num_workers", [0, 2])
def test_openspiel_games_reset_to_their_serialized_states(num_workers):
    """``game_states()`` serializes each game as it stands; ``reset_to`` puts them back (the rows a ``_reset``
    entry selects): the same data as when they were saved, and the same games as pyspiel deserializes."""
    _installed("openspiel")
    import pyspiel

    env = marl_envs.make("openspiel/backgammon", num_envs=3, seed=0, num_workers=num_workers)
    td = env.step(env.rand_action(env.reset()))
    saved = env.game_states()
    game = pyspiel.load_game("backgammon")
    assert all(str(game.deserialize_state(state)) for state in saved)
    env.step(env.rand_action(td["next"]))
    assert env.game_states() != saved
    back = env.reset_to(saved)
    assert env.game_states() == saved
    compared = [key for key in back.keys(True, True) if key[-1] in ("observation", "action_mask", "mask")]
    assert len(compared) >= 3 and all((back[key] == td["next"][key]).all() for key in compared), compared
    env.step(env.rand_action(back))
    rows = torch.tensor([[True], [False], [True]])
    kept = env.game_states()[1]
    env.reset_to(saved, back.set("_reset", rows))
    assert env.game_states() == [saved[0], kept, saved[2]]
    with pytest.raises(ValueError, match=r"^reset_to takes one serialized game state \(a str, env.game_states\(\)'s\) "
                                         r"per env: 3 here, got 2 \(str\)$"):
        env.reset_to(saved[:2])
    env.close()


def test_openspiel_reset_to_names_every_type_it_was_given():
    """``reset_to``'s refusal names the types of the states given: a non-str among strs, not the first one's."""
    _installed("openspiel")
    env = marl_envs.make("openspiel/tic_tac_toe", num_envs=2, seed=0)
    with pytest.raises(ValueError, match=r"per env: 2 here, got 2 \(int, str\)$"):
        env.reset_to([env.game_states()[0], 0])
    env.close()


def test_openspiel_a_game_reset_to_its_end_stays_ended():
    """A saved game that had ended is done from ``reset_to`` on: a step leaves it ended, with rewards of 0, as
    stepping a game played to its end does."""
    _installed("openspiel")
    import pyspiel

    state = pyspiel.load_game("tic_tac_toe").new_initial_state()
    for move in (0, 3, 1, 4, 2):  # the first player wins
        state.apply_action(move)
    env = marl_envs.make("openspiel/tic_tac_toe", num_envs=2, seed=0)
    td = env.reset_to([state.serialize(), env.game_states()[1]])
    assert td["done"].flatten().tolist() == [True, False]
    out = env.step(env.rand_action(td))["next"]
    assert out["done"].flatten().tolist() == [True, False] and out["terminated"][0].all()
    assert (out["agents", "reward"][0] == 0).all()


def test_mamujoco_max_episode_steps_is_max_steps_and_truncates():
    """Gymnasium's time limit of the robot (Reacher's: 50), a move of each agent per step in the AEC API."""
    _installed("mamujoco")
    env = marl_envs.make("mamujoco/Reacher_2x1", num_envs=2)
    assert env.max_steps == env.envs[0].unwrapped.single_agent_env.spec.max_episode_steps == 50
    for parallel, steps in ((True, 4), (False, 8)):
        env = marl_envs.make("mamujoco/Reacher_2x1", num_envs=2, seed=0, max_episode_steps=4, parallel=parallel)
        assert env.max_steps == steps
        nxt, going, _ = play_to_max_steps(env)
        _ends_at_the_limit(env, nxt, going, torch.zeros(2, dtype=torch.bool))  # Reacher never terminates


def test_magent2_max_cycles_is_max_steps_and_truncates():
    _installed("magent2")
    env = marl_envs.make("magent2/battle", num_envs=2, seed=0, map_size=12, max_cycles=5)
    assert env.max_steps == env.envs[0].unwrapped.max_cycles == 5
    nxt, going, _ = play_to_max_steps(env)
    assert going.all() and nxt["truncated"].all() and not nxt["terminated"].any()
    for group in env.group_map:
        assert nxt[group, "truncated"].all()


# ------------------------------------------------------------------------------------------------------
# MAgent2: teams, dead agents
# ------------------------------------------------------------------------------------------------------
def test_magent2_equals_the_raw_parallel_loop_with_agents_dying():
    """combined_arms (four groups, 162 agents that die from the first steps on) against raw PettingZoo instances:
    every agent's observation, mask and reward, over an episode boundary (``max_cycles``)."""
    _installed("magent2")
    from magent2.environments import combined_arms_v6

    B, kwargs = 2, {"max_cycles": 12}
    env = marl_envs.make("magent2/combined_arms", num_envs=B, seed=3, **kwargs)
    assert list(env.group_map) == ["redmelee", "redranged", "bluemelee", "blueranged"]
    raw = [combined_arms_v6.parallel_env(**kwargs) for _ in range(B)]
    obs = [instance.reset(seed=3 + i)[0] for i, instance in enumerate(raw)]
    td = env.reset()
    died = ends = 0
    for _ in range(16):
        for i, instance in enumerate(raw):
            for group, members in env.group_map.items():
                for j, agent in enumerate(members):
                    alive = agent in instance.agents
                    assert bool(td[group, "mask"][i, j]) == alive
                    # an agent's last step still brings its observation; after that, zeros
                    want = obs[i].get(agent, np.zeros_like(td[group, "observation"][i, j].numpy()))
                    np.testing.assert_array_equal(td[group, "observation"][i, j].numpy(), want)
        td = env.rand_action(td)
        actions = {group: td[group, "action"].tolist() for group in env.group_map}
        td, td_next = env.step_and_maybe_reset(td)
        for i, instance in enumerate(raw):
            step = {agent: actions[g][i][j] for g, members in env.group_map.items()
                    for j, agent in enumerate(members) if agent in instance.agents}
            o, reward, _, _, _ = instance.step(step)
            for group, members in env.group_map.items():
                got = td["next", group, "reward"][i, :, 0].numpy()
                np.testing.assert_array_equal(got, np.asarray([reward.get(a, 0.0) for a in members], np.float32))
            died += len(step) - len(instance.agents) if instance.agents else 0
            if not instance.agents:
                ends += 1
                o, _ = instance.reset()
            obs[i] = o
        td = td_next
    assert died > 0 and ends == B


@pytest.mark.parametrize("group_map, extra_features", [("teams", True), ("ALL_IN_ONE_GROUP", False)])
def test_magent2_direct_steps_equal_the_generic_pettingzoo_path(group_map, extra_features):
    """``MAgent2Env`` steps its instances itself and copies each team's observations from the grid into the batch;
    the generic PettingZoo wrapper over the same instances, reading MAgent2's dicts, gives the same data: agents
    dying, episodes ending, observations with the minimap and extra features."""
    _installed("magent2")
    from magent2.environments import battle_v4

    from groupings import MarlGroupMapType
    from marl_envs.backends.magent2 import MAgent2Env
    from marl_envs.backends.pettingzoo import PettingZooWrapper

    task = {"map_size": 12, "max_cycles": 25, "minimap_mode": True, "extra_features": extra_features}
    groups = None if group_map == "teams" else MarlGroupMapType[group_map]
    direct = MAgent2Env("battle_v4", num_envs=3, seed=5, group_map=groups, **task)
    generic = PettingZooWrapper(functools.partial(battle_v4.parallel_env, **task), num_envs=3, seed=5, use_mask=True,
                                done_on_any=False, group_map=dict(direct.group_map))
    a = _same_rollouts(direct, generic, 60)
    group = next(iter(direct.group_map))
    assert not a["next", group, "mask"].all()  # agents died
    assert a["next", "done"].sum() >= 3  # every env ended an episode (max_cycles)
    assert a[group, "observation"][..., -1].abs().sum() > 0  # the minimap's (and extra features') channels


def test_magent2_battle_at_its_default_size_runs_1000_steps_with_dead_agents_masked():
    """162 agents: agents die, their entries are zeros and their masks False; memory stays flat."""
    _installed("magent2")
    env = marl_envs.make("magent2/battle", num_envs=1, seed=0)
    assert {g: len(m) for g, m in env.group_map.items()} == {"red": 81, "blue": 81}
    td = env.reset()
    dead_seen, rss = 0, []
    for t in range(1000):
        td, td_next = env.step_and_maybe_reset(env.rand_action(td))
        for group in env.group_map:
            dead = ~td["next", group, "mask"][0, :, 0]
            gone = dead & ~td[group, "mask"][0, :, 0]  # dead before this step: its last one brought its observation
            dead_seen = max(dead_seen, int(dead.sum()))
            assert not td["next", group, "observation"][0][gone].any()
            assert not td["next", group, "reward"][0][gone].any()
            assert td["next", group, "done"][0][dead].all()
        td = td_next
        if t in (200, 999):
            rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    assert dead_seen > 0
    assert rss[1] - rss[0] < 20 * 1024  # KiB: flat after warm-up


def test_magent2_keywords_include_the_rewards_its_config_takes():
    _installed("magent2")
    env = marl_envs.make("magent2/battle", num_envs=1, map_size=12, attack_penalty=-0.2)
    assert {"map_size", "max_cycles", "step_reward", "attack_penalty"} <= set(env.task_spec.own_keywords())
    with pytest.raises(TypeError, match=r"magent2 task 'battle_v4' got an unexpected keyword argument 'map_sze'; "
                                        r"did you mean 'map_size'\?"):
        marl_envs.make("magent2/battle", map_sze=20)


# ------------------------------------------------------------------------------------------------------
# MaMuJoCo
# ------------------------------------------------------------------------------------------------------
def test_mamujoco_equals_the_raw_parallel_loop_across_falls():
    """Hopper 3x1 falls under random actions (terminated): ours against raw MaMuJoCo instances."""
    _installed("mamujoco")
    from gymnasium_robotics.envs.multiagent_mujoco import mamujoco_v1

    B = 2
    env = marl_envs.make("mamujoco/Hopper_3x1", num_envs=B, seed=1)
    raw = [mamujoco_v1.parallel_env("Hopper", "3x1") for _ in range(B)]
    obs = [instance.reset(seed=1 + i)[0] for i, instance in enumerate(raw)]
    agents = [a for members in env.group_map.values() for a in members]
    td, falls = env.reset(), 0
    for _ in range(80):
        for i in range(B):
            for g, members in env.group_map.items():
                got = td[g, "observation"][i].numpy()
                want = np.stack([obs[i][a] for a in members]).astype(np.float32)
                np.testing.assert_array_equal(got, want)
        td = env.rand_action(td)
        actions = {g: td[g, "action"].numpy() for g in env.group_map}
        td, td_next = env.step_and_maybe_reset(td)
        for i, instance in enumerate(raw):
            step = {a: actions[g][i][j] for g, members in env.group_map.items() for j, a in enumerate(members)}
            o, reward, term, _, _ = instance.step(step)
            np.testing.assert_array_equal(
                np.asarray([float(td["next", g, "reward"][i, j]) for g, m in env.group_map.items()
                            for j in range(len(m))], np.float32),
                np.asarray([reward[a] for a in agents], np.float32))
            assert bool(td["next", "terminated"][i]) == any(term.values())
            if any(term.values()):
                falls += 1
                o, _ = instance.reset()
            obs[i] = o
        td = td_next
    assert falls >= B


def test_mamujoco_keywords_are_mamujocos_and_the_gymnasium_envs():
    _installed("mamujoco")
    env = marl_envs.make("mamujoco/Ant_2x4", num_envs=2, agent_obsk=0, ctrl_cost_weight=0.1)
    assert env.reset()["agents", "observation"].shape[:2] == (2, 2)
    with pytest.raises(TypeError, match=r"mamujoco task 'Ant_2x4' got an unexpected keyword argument "
                                        r"'ctrl_cost_weigth'; did you mean 'ctrl_cost_weight'\?"):
        marl_envs.make("mamujoco/Ant_2x4", ctrl_cost_weigth=0.1)


# ------------------------------------------------------------------------------------------------------
# OpenSpiel: chance, turns, simultaneous moves
# ------------------------------------------------------------------------------------------------------
class RawSpiel:
    """A raw pyspiel loop: one game state, chance drawn as the module docstring of our backend says."""

    def __init__(self, name: str, seed: int):
        import pyspiel

        self.game = pyspiel.load_game(name)
        self.rng = np.random.default_rng(seed)
        self.reset()

    def chance(self):
        while self.state.is_chance_node():
            outcomes, probabilities = zip(*self.state.chance_outcomes())
            self.state.apply_action(outcomes[self.rng.choice(len(outcomes), p=np.asarray(probabilities))])

    def reset(self):
        self.state = self.game.new_initial_state()
        self.returns = np.zeros(self.game.num_players())
        self.chance()

    def step(self, actions: list[int]) -> np.ndarray:
        if self.state.is_simultaneous_node():
            self.state.apply_actions(actions)
        else:
            self.state.apply_action(actions[self.state.current_player()])
        self.chance()
        now = np.asarray(self.state.returns())
        reward, self.returns = now - self.returns, now
        return reward


@pytest.mark.parametrize("name", ["kuhn_poker", "leduc_poker", "goofspiel"])
def test_openspiel_equals_a_raw_pyspiel_loop_with_the_same_actions_and_chance(name):
    """Turn-based poker with chance deals, and simultaneous goofspiel: observations, legal actions, whose turn,
    rewards and ends, over several episodes."""
    _installed("openspiel")
    B = 3
    env = marl_envs.make(f"openspiel/{name}", num_envs=B, seed=11)
    (group, agents), = env.group_map.items()
    raw = [RawSpiel(name, 11 + i) for i in range(B)]
    td, episodes = env.reset(), 0
    for _ in range(60):
        for i, r in enumerate(raw):
            for p in range(len(agents)):
                tensor = (r.state.observation_tensor(p) if r.game.get_type().provides_observation_tensor
                          else r.state.information_state_tensor(p))
                np.testing.assert_array_equal(td[group, "observation"][i, p].flatten().numpy(),
                                              np.asarray(tensor, np.float32))
                legal = r.state.legal_actions(p) if not r.state.is_terminal() else []
                if legal:
                    assert td[group, "action_mask"][i, p].nonzero().flatten().tolist() == legal
            if not env.parallel:
                assert td[group, "mask"][i, :, 0].nonzero().flatten().tolist() == [r.state.current_player()]
        td = env.rand_action(td)
        actions = td[group, "action"].tolist()
        td, td_next = env.step_and_maybe_reset(td)
        for i, r in enumerate(raw):
            reward = r.step(actions[i])
            np.testing.assert_allclose(td["next", group, "reward"][i, :, 0].numpy(), reward.astype(np.float32))
            assert bool(td["next", "terminated"][i]) == r.state.is_terminal()
            if r.state.is_terminal():
                episodes += 1
                r.reset()
        td = td_next
    assert episodes >= 2 * B


@pytest.mark.parametrize("name, group_map, categorical", [
    ("leduc_poker", None, True),  # turn-based, chance mid-game
    ("goofspiel", None, True),  # simultaneous
    ("kuhn_poker", "ONE_GROUP_PER_AGENT", False),  # a group per player, one-hot actions
])
def test_openspiel_direct_writes_equal_the_generic_pettingzoo_path(name, group_map, categorical):
    """``OpenSpielEnv`` writes its games' values straight into the frames; the generic PettingZoo wrapper over the
    same views gives the same data: with auto-reset, and stepping on past the end without a reset (PettingZoo's
    dead steps, which go through the views)."""
    _installed("openspiel")
    from groupings import MarlGroupMapType
    from marl_envs.backends.openspiel import OpenSpielAEC, OpenSpielEnv, OpenSpielParallel
    from marl_envs.backends.pettingzoo import PettingZooWrapper

    kwargs = {"num_envs": 4, "seed": 3, "categorical_actions": categorical,
              "group_map": None if group_map is None else MarlGroupMapType[group_map]}
    direct = OpenSpielEnv(name, **kwargs)
    view = OpenSpielParallel if direct.parallel else OpenSpielAEC
    generic = PettingZooWrapper(functools.partial(view, name), use_mask=not direct.parallel, **kwargs)
    a = _same_rollouts(direct, generic, 80)
    assert a["next", "done"].sum() >= 8  # several episodes per env
    for env in (direct, generic):  # on past the end: the finished games' agents leave one step at a time
        torch.manual_seed(1)
        td, steps = env.reset(), []
        for _ in range(20):  # goofspiel: 13 rounds
            try:
                td = env.rand_step(td)
            except ValueError as err:
                assert "has no agents left" in str(err)
                break
            steps.append(td)
            td = env.step_mdp(td)
        env.steps = torch.stack(steps)
    assert (direct.steps == generic.steps).all()
    assert direct.steps["next", "done"].any()


def test_openspiel_reports_chance_outcomes_and_never_plays_an_illegal_move():
    _installed("openspiel")
    env = marl_envs.make("openspiel/leduc_poker", num_envs=4, seed=0)
    data = env.rollout(300, break_when_any_done=False)  # pyspiel raises on an illegal move
    acting = data["agents", "mask"][..., 0]
    chosen = data["agents", "action"]
    legal = data["agents", "action_mask"].gather(-1, chosen.unsqueeze(-1))[..., 0]
    assert legal[acting].all()
    dealt = data["agents", "info", "chance"][..., 0, 0]  # the reset's deal: cards 0..5
    assert ((dealt >= 0) & (dealt < 6)).all()
    assert (data["next", "agents", "info", "chance"] >= 0).any()  # the public card, dealt mid-hand


def test_openspiel_draws_the_state_text_when_asked():
    _installed("openspiel")
    env = marl_envs.make("openspiel/kuhn_poker", num_envs=2)
    assert not env.renders
    with pytest.raises(ValueError, match=r"^render\(\) draws OpenSpiel envs built with render_mode='rgb_array'; "
                                         r"these have render_mode=None: build them with marl_envs.make\("
                                         r"'openspiel/kuhn_poker', ..., render_mode='rgb_array'\)$"):
        env.render()
    text = marl_envs.make("openspiel/tic_tac_toe", num_envs=1, render_mode="ansi")
    text.reset()
    with pytest.raises(ValueError, match=r"^render\(\) draws OpenSpiel envs built with render_mode='rgb_array'; "
                                         r"these have render_mode='ansi': build them with marl_envs.make\("
                                         r"'openspiel/tic_tac_toe', ..., render_mode='rgb_array'\)$"):
        text.render()
    with pytest.raises(ValueError, match=r"^turn-based \(AEC\) OpenSpiel envs need use_mask=True"):
        marl_envs.make("openspiel/tic_tac_toe", num_envs=1, use_mask=False)
    drawn = marl_envs.make("openspiel/tic_tac_toe", num_envs=2, seed=0, render_mode="rgb_array")
    drawn.reset()
    empty = drawn.render(0)
    drawn.rollout(2, break_when_any_done=False)
    played = drawn.render(0)
    assert drawn.renders and empty.shape[2] == 3 and empty.dtype.name == "uint8"
    assert empty.shape[0] >= 240 and empty.shape[1] >= 320
    assert (played != empty).any()  # the marks of the two moves are drawn
    with pytest.raises(ValueError, match=r"openspiel task 'kuhn_poker' has no render_mode 'human'; its render modes "
                                         r"are \['ansi', 'rgb_array'\]"):
        marl_envs.make("openspiel/kuhn_poker", render_mode="human")


def test_openspiel_game_parameters_are_keywords():
    _installed("openspiel")
    env = marl_envs.make("openspiel/kuhn_poker", num_envs=2, players=3)
    assert env.group_map == {"agents": ["player_0", "player_1", "player_2"]}
    with pytest.raises(TypeError, match=r"openspiel task 'kuhn_poker' got an unexpected keyword argument "
                                        r"'player'; did you mean 'players'\?"):
        marl_envs.make("openspiel/kuhn_poker", player=3)


def test_openspiel_refusals_are_raised_once_with_the_fix(capfd):
    _installed("openspiel")
    with pytest.raises(ValueError, match=r"unknown openspiel task 'openspiel/kuhn'; did you mean 'openspiel/kuhn_poker'\? "
                                         r"available: "):
        marl_envs.make("openspiel/kuhn")
    with pytest.raises(ValueError, match=r"openspiel/kuhn_poker with \{'players': 30\}: OpenSpiel refused it: .*"
                                         r"num_players_ = 30, kGameType.max_num_players = 10\. Its parameters and "
                                         r"defaults: marl-envs info openspiel/kuhn_poker"):
        marl_envs.make("openspiel/kuhn_poker", players=30)
    assert "OpenSpiel exception" not in capfd.readouterr().err  # the C++ message, not printed besides


@pytest.mark.filterwarnings("ignore:Brax System, piplines and environments:UserWarning")
def test_our_brax_splits_drive_the_joints_of_mamujocos_partitions():
    """Our Brax scenes derive each agent's joints from the model; MaMuJoCo lists its partitions by hand. Every
    agent of ours drives the joints of one of MaMuJoCo's agents (joint names compared without underscores: Brax's
    ant says ``hip_1``, Gymnasium's ``hip1``)."""
    _installed("mamujoco")
    _installed("brax")
    import jax
    from gymnasium_robotics.envs.multiagent_mujoco.obsk import get_parts_and_edges

    from marl_envs.backends.brax import import_brax, quiet_brax_build
    from marl_envs.backends.brax._scenes import SCENES, RobotModel, model_mapping

    envs = import_brax()
    pairs = {"halfcheetah_6x1": ("HalfCheetah", "6x1"), "hopper_3x1": ("Hopper", "3x1"),
             "walker2d_2x3": ("Walker2d", "2x3"), "ant_4x2": ("Ant", "4x2"), "humanoid_9-8": ("Humanoid", "9|8")}
    assert set(pairs) == set(SCENES)
    for scene, (robot, partition) in pairs.items():
        with quiet_brax_build():
            brax_env = envs.get_environment(SCENES[scene].robot, backend="spring")
        model = RobotModel.from_mj_model(brax_env.sys.mj_model)
        obs_size = jax.eval_shape(brax_env.reset, jax.random.PRNGKey(0)).obs.shape[-1]  # traced, not compiled
        mapping = model_mapping(scene, model, obs_size)
        ours = {frozenset(model.joint_names[model.actuator_joint[a]].replace("_", "") for a in indices)
                for indices in mapping.action_indices.values()}
        parts = get_parts_and_edges(robot, partition)[0]
        assert ours == {frozenset(node.label.replace("_", "") for node in part) for part in parts}, scene


@pytest.mark.parametrize("backend", sorted(name for name, record in registry.backends().items()
                                     if "pettingzoo" in record.builds_on))
def test_module_docstring_examples(backend):
    import doctest

    _installed(backend)
    result = doctest.testmod(marl_envs.registry.backend_module(backend), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("name, kwargs", [("lbforaging/Foraging-5x5-2p-1f-v3", {"max_episode_steps": 6}),
                                          ("openspiel/leduc_poker", {}),
                                          ("magent2/combined_arms", {"max_cycles": 5})])
def test_worker_processes_give_the_same_data(name, kwargs):
    """The new families run in worker processes like PettingZoo's own (their instances built in the workers)."""
    _installed(name.partition("/")[0])
    serial = marl_envs.make(name, num_envs=4, seed=2, **kwargs)
    workers = marl_envs.make(name, num_envs=4, seed=2, num_workers=2, **kwargs)
    try:
        torch.manual_seed(0)
        a = serial.rollout(12, break_when_any_done=False)
        torch.manual_seed(0)
        b = workers.rollout(12, break_when_any_done=False)
        assert (a == b).all()
    finally:
        workers.close()
