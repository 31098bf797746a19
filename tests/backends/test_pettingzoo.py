"""The PettingZoo backend: every installed task, exactness against raw PettingZoo loops, masks, dead agents."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo")
pytest.importorskip("mpe2")

from envs import play_to_max_steps  # noqa: E402
import marl_envs  # noqa: E402
from gymnasium import spaces  # noqa: E402
from marl_envs import MarlGroupMapType  # noqa: E402
from marl_envs.backends.pettingzoo import PettingZooEnv, PettingZooWrapper  # noqa: E402
from marl_envs.bench import run as benchmark  # noqa: E402
from pettingzoo import ParallelEnv  # noqa: E402

pytestmark = [
    # cooperative_pong renders in every reset and warns that no render mode was set
    pytest.mark.filterwarnings("ignore:.*calling render method without specifying any render mode:UserWarning"),
    # texas_holdem_no_limit builds a float64 Box that gymnasium casts to float32 at construction
    pytest.mark.filterwarnings("ignore:.*precision lowered by casting to float32:UserWarning"),
]

# ------------------------------------------------------------------------------------------------------
# Exactness against hand-written PettingZoo loops
# ------------------------------------------------------------------------------------------------------
def test_parallel_mpe_equals_raw_loop_across_resets_and_partial_resets():
    import mpe2.simple_spread_v3 as task

    B, seed = 3, 7
    env = PettingZooEnv("mpe/simple_spread_v3", num_envs=B, N=3, max_cycles=6, seed=seed)
    raw = [task.parallel_env(N=3, max_cycles=6) for _ in range(B)]
    raw_obs = [instance.reset(seed=seed + i)[0] for i, instance in enumerate(raw)]
    agents = env.group_map["agents"]

    def expect_obs(td, observations):
        want = np.stack([np.stack([o[a] for a in agents]) for o in observations])
        np.testing.assert_array_equal(td["agents", "observation"].numpy(), want.astype(np.float32))

    td = env.reset()
    expect_obs(td, raw_obs)
    for t in range(14):
        td = env.rand_action(td)
        if t == 3:  # a partial reset of env 1 only; the others keep their episodes
            td.set("_reset", torch.tensor([[False], [True], [False]]))
            td = env.reset(td)
            raw_obs[1] = raw[1].reset()[0]
            expect_obs(td, raw_obs)
            td = env.rand_action(td)
        td, td_next = env.step_and_maybe_reset(td)
        action = td["agents", "action"].tolist()
        for i, instance in enumerate(raw):
            obs, rew, term, trunc, _ = instance.step({a: action[i][j] for j, a in enumerate(agents)})
            raw_obs[i] = obs
            assert td["next", "agents", "reward"][i, :, 0].tolist() == [np.float32(rew[a]) for a in agents]
            assert td["next", "agents", "terminated"][i, :, 0].tolist() == [term[a] for a in agents]
            assert td["next", "agents", "truncated"][i, :, 0].tolist() == [trunc[a] for a in agents]
            assert bool(td["next", "done"][i]) == (not instance.agents)
        expect_obs(td["next"], raw_obs)
        for i, instance in enumerate(raw):
            if not instance.agents:  # ours auto-reset it: the raw loop continues the instance's own stream
                raw_obs[i] = instance.reset()[0]
        expect_obs(td_next, raw_obs)
        td = td_next


def test_turn_based_connect_four_equals_raw_loop():
    from pettingzoo.classic.connect_four.connect_four import env as connect_four

    B, seed = 2, 3
    env = marl_envs.make("pettingzoo/classic/connect_four_v3", num_envs=B, seed=seed)
    raw = [connect_four() for _ in range(B)]
    for i, instance in enumerate(raw):
        instance.reset(seed=seed + i)
    agents = env.group_map["agents"]
    td = env.reset()
    games_over = 0
    for _ in range(45):
        td, td_next = env.step_and_maybe_reset(env.rand_action(td))
        action = td["agents", "action"]
        for i, instance in enumerate(raw):
            acting = instance.agent_selection
            j = agents.index(acting)
            assert td["agents", "mask"][i, :, 0].tolist() == [a == acting for a in agents]
            assert td["agents", "action_mask"][i, j, action[i, j]]  # rand_action honoured the mask
            instance.step(int(action[i, j]))
            nxt = td["next", "agents"]
            for k, a in enumerate(agents):
                observed = instance.observe(a)
                np.testing.assert_array_equal(nxt["observation"][i, k].numpy(), observed["observation"])
                assert nxt["reward"][i, k, 0] == instance.rewards[a]
                assert nxt["terminated"][i, k, 0] == instance.terminations[a]
            if all(instance.terminations.values()):
                assert td["next", "done"][i]
                games_over += 1
                instance.reset()
        td = td_next
    assert games_over >= 2


# ------------------------------------------------------------------------------------------------------
# Turn-based games and action masks
# ------------------------------------------------------------------------------------------------------
def _tictactoe_step(env, td, square):
    """Play ``square`` for the acting agent; the other agent's action is ignored by the env."""
    acting = td["agents", "mask"][0, :, 0]
    action = torch.where(acting, torch.tensor(square), torch.tensor(8)).unsqueeze(0)
    td.set(("agents", "action"), action)
    return env.step(td)


def test_tictactoe_scripted_win_reports_rewards_and_masks():
    env = marl_envs.make("pettingzoo/classic/tictactoe_v3", num_envs=1)
    assert env.group_map == {"agents": ["player_1", "player_2"]}
    td = env.reset()
    assert td["agents", "mask"][0, :, 0].tolist() == [True, False]
    assert td["agents", "action_mask"][0, 0].all()
    for t, square in enumerate([0, 4, 1, 5, 2]):  # player_1 takes 0, 1, 2: a line
        td = _tictactoe_step(env, td, square)
        nxt = td["next"]
        if t == 0:  # player_2 acts next, on a board without square 0
            assert nxt["agents", "mask"][0, :, 0].tolist() == [False, True]
            assert nxt["agents", "action_mask"][0, 1].tolist() == [False] + [True] * 8
            assert nxt["agents", "action_mask"][0, 0].all()  # the waiting agent: all True
        if t < 4:
            assert not nxt["done"].any() and not nxt["agents", "reward"].any()
        td = env.step_mdp(td)
    assert nxt["agents", "reward"][0, :, 0].tolist() == [1.0, -1.0]
    assert nxt["agents", "terminated"].all() and nxt["done"].all() and nxt["terminated"].all()


def test_tictactoe_random_games_honour_masks_and_end_zero_sum():
    env = marl_envs.make("pettingzoo/classic/tictactoe_v3", num_envs=6, seed=4)
    data = env.rollout(9, break_when_all_done=True)
    acting = data["agents", "mask"][..., 0]
    chosen = data["agents", "action"]
    legal = data["agents", "action_mask"].gather(-1, chosen.unsqueeze(-1))[..., 0]
    assert legal[acting].all()
    reward = data["next", "agents", "reward"][..., 0]
    done = data["next", "done"][..., 0]
    first_done = done.int().argmax(1)
    assert done.any(1).all()  # tic-tac-toe ends within 9 moves
    for i, t in enumerate(first_done.tolist()):
        assert not reward[i, :t].any()
        final = reward[i, t].tolist()
        assert final in ([1.0, -1.0], [-1.0, 1.0], [0.0, 0.0])  # an illegal move would give (-1, 0)


def test_aec_applies_only_the_acting_agents_action():
    env = marl_envs.make("pettingzoo/classic/tictactoe_v3", num_envs=1)
    td = env.reset()
    td.set(("agents", "action"), torch.tensor([[4, 4]]))  # player_2 "plays" 4 too, but does not act
    td = env.step(td)
    assert td["next", "agents", "action_mask"][0, 1].tolist() == [True] * 4 + [False] + [True] * 4
    assert not td["next", "done"].any()


def test_env_class_builds_what_make_builds():
    """``PettingZooEnv(name)`` applies ``make``'s defaults: a turn-based game runs its AEC API with masks."""
    by_class = PettingZooEnv("classic/tictactoe_v3", num_envs=2)
    by_make = marl_envs.make("pettingzoo/classic/tictactoe_v3", num_envs=2)
    assert (by_class.parallel, by_class.use_mask) == (by_make.parallel, by_make.use_mask) == (False, True)
    assert by_class.group_map == by_make.group_map
    for kind in ("observation", "action", "reward", "done"):
        assert getattr(by_class, f"full_{kind}_spec") == getattr(by_make, f"full_{kind}_spec"), kind


# ------------------------------------------------------------------------------------------------------
# Time limits: the library's own as max_steps
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("parallel", [True, False])
def test_mpe_max_cycles_is_max_steps_and_reaching_it_is_truncated(parallel):
    """MPE's ``max_cycles``: env steps of the parallel API, a move of each agent per cycle in the AEC one."""
    env = marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, seed=0, N=2, max_cycles=4, parallel=parallel)
    raw = env.envs[0].unwrapped
    assert env.max_steps == raw.max_cycles * (1 if parallel else len(raw.possible_agents)) == (4 if parallel else 8)
    assert env.max_episode_length == env.max_steps
    nxt, going, _ = play_to_max_steps(env)
    assert going.all()  # MPE has no end but its time limit
    assert nxt["truncated"].all() and not nxt["terminated"].any()
    assert nxt["agents", "truncated"].all() and not nxt["agents", "terminated"].any()


def test_multiwalker_time_limit_is_truncated_and_a_fall_on_its_step_terminated():
    """Multiwalker marks every walker terminated at ``max_cycles``; here that is a truncation, and a fall on that very
    step is a termination (truncated too)."""
    env = marl_envs.make("pettingzoo/sisl/multiwalker_v9", num_envs=2, seed=0, max_cycles=300)
    td = env.reset()
    for fall in range(1, 301):  # the step of env 0's first fall, under the seeded random actions
        td, root = env.step_and_maybe_reset(env.rand_action(td))
        if td["next", "done"][0]:
            break
        td = root
    assert fall < 300 and td["next", "terminated"][0] and not td["next", "truncated"][0]
    for cycles, fell in ((fall, True), (fall - 1, False)):  # the same seed: the same actions, the same walk
        env = marl_envs.make("pettingzoo/sisl/multiwalker_v9", num_envs=2, seed=0, max_cycles=cycles)
        assert env.max_steps == env.envs[0].unwrapped.env.max_cycles == cycles
        nxt, going, _ = play_to_max_steps(env)
        assert going[0] and nxt["truncated"][0] and nxt["agents", "truncated"][0].all()
        assert bool(nxt["terminated"][0]) == fell and nxt["agents", "terminated"][0].all() == fell


def test_tictactoe_reports_its_bound_and_no_time_limit():
    env = marl_envs.make("pettingzoo/classic/tictactoe_v3", num_envs=2, seed=0)
    assert env.max_steps is None and env.max_episode_length == 9
    assert repr(env).endswith("max_steps=None, max_episode_length=9)")  # a bound, not a time limit
    data = env.rollout(9, break_when_any_done=False)
    assert data["next", "done"].any(1).all()  # every game ends within its bound


def test_max_steps_beyond_the_librarys_limit_is_refused_and_a_shorter_one_truncates():
    with pytest.raises(ValueError, match=r"max_steps=100 is beyond the library's own time limit: its episodes end "
                                         r"after 25 steps; pass max_steps of at most 25, or lengthen the library's "
                                         r"limit \(max_cycles=N\) when building the env"):
        marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, max_steps=100)
    assert marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, max_cycles=100, max_steps=100).max_steps == 100
    env = marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, seed=0, max_steps=3)  # shorter: allowed
    nxt, going, _ = play_to_max_steps(env)
    assert going.all() and nxt["truncated"].all() and not nxt["terminated"].any()
    with pytest.raises(ValueError, match=r"max_steps=26 is beyond the library's own time limit"):
        env.max_steps = 26


# ------------------------------------------------------------------------------------------------------
# Dead agents
# ------------------------------------------------------------------------------------------------------
class Shrinking(ParallelEnv):
    """Two walkers; ``walker_1`` dies at step ``death``, the episode is truncated at step ``length``."""

    metadata = {"name": "shrinking_v0"}

    def __init__(self, death: int = 2, length: int = 5):
        self.possible_agents = ["walker_0", "walker_1"]
        self.death, self.length = death, length

    def observation_space(self, agent):
        return spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _obs(self):
        return {a: np.array([self.t, k + 1], np.float32) for k, a in enumerate(self.agents)}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        if set(actions) != set(self.agents):
            raise AssertionError(f"actions for {sorted(actions)}, live agents {self.agents}")
        self.t += 1
        term = {a: a == "walker_1" and self.t == self.death for a in self.agents}
        trunc = {a: self.t == self.length for a in self.agents}
        out = self._obs(), {a: 1.0 for a in self.agents}, term, trunc, {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return out


def test_dead_agent_is_masked_with_zeros_and_sticky_flags():
    env = PettingZooWrapper(Shrinking, num_envs=2, use_mask=True, done_on_any=False)
    data = env.rollout(5, break_when_any_done=False)
    nxt = data["next", "agents"]
    alive = nxt["mask"][0, :, :, 0]  # (T, n)
    assert alive.tolist() == [[True, True], [True, False], [True, False], [True, False], [False, False]]
    assert nxt["terminated"][0, :, 1, 0].tolist() == [False, True, True, True, True]
    assert nxt["reward"][0, :, 1, 0].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert (nxt["observation"][0, 2:, 1] == 0).all()
    assert nxt["observation"][0, 2:, 0, 0].tolist() == [3.0, 4.0, 5.0]
    root = data["next"]
    assert root["done"][0, :, 0].tolist() == [False] * 4 + [True]  # all(): ends when walker_0 does
    assert root["truncated"][0, 4] and not root["terminated"][0, 4]


def test_dead_agent_ends_the_episode_with_done_on_any():
    env = PettingZooWrapper(Shrinking, num_envs=1)
    data = env.rollout(5)
    assert data.batch_size[1] == 2 and data["next", "terminated"][0, -1]


def test_dead_agent_without_use_mask_says_to_set_it():
    env = PettingZooWrapper(Shrinking, num_envs=2, done_on_any=False)
    td = env.reset()
    for _ in range(2):
        td = env.step_mdp(env.rand_step(td))
    with pytest.raises(ValueError, match=r"agents \['walker_1'\] of env 0 are not in the episode.*use_mask=True"):
        env.rand_step(td)
    env.reset()  # nothing was half-applied: the env can be reset and stepped
    env.rand_step(env.reset())


# ------------------------------------------------------------------------------------------------------
# Spaces, groups, state, infos
# ------------------------------------------------------------------------------------------------------
class Spaces(ParallelEnv):
    """Dict / Discrete(start) / MultiBinary observations, MultiDiscrete(start) actions, numeric infos."""

    metadata = {"name": "spaces_v0"}

    def __init__(self):
        self.possible_agents = ["a_0", "a_1"]
        self.seen = []

    def observation_space(self, agent):
        return spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), np.float64), "level": spaces.Discrete(3, start=1),
                            "bits": spaces.MultiBinary(3)})

    def action_space(self, agent):
        return spaces.MultiDiscrete([2, 3], start=[1, 0])

    def _obs(self, t):
        return {a: {"pos": np.array([0.5, -0.5]) * k, "level": 1 + t % 3, "bits": np.array([1, 0, k], np.int8)}
                for k, a in enumerate(self.agents)}

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return self._obs(0), {a: {"score": 0.0, "name": "text"} for a in self.agents}

    def step(self, actions):
        self.seen.append(actions)
        rew = {a: 0.0 for a in self.agents}
        infos = {a: {"score": float(sum(actions[a])), "name": "text"} for a in self.agents}
        return self._obs(1), rew, dict.fromkeys(self.agents, False), dict.fromkeys(self.agents, False), infos


def test_dict_discrete_multibinary_multidiscrete_and_infos():
    env = PettingZooWrapper(Spaces, num_envs=1)
    obs_spec = env.full_observation_spec["agents"]
    assert set(obs_spec["observation"].keys()) == {"pos", "level", "bits"}
    assert obs_spec["observation", "pos"].dtype == torch.float32
    assert obs_spec["observation", "bits"].dtype == torch.int8
    assert list(obs_spec["info"].keys()) == ["score"]  # numeric infos only
    td = env.reset()
    assert td["agents", "observation", "level"].tolist() == [[0, 0]]  # Discrete(3, start=1) shifted to 0
    td.set(("agents", "action"), torch.tensor([[[0, 2], [1, 1]]]))
    td = env.step(td)
    assert {a: v.tolist() for a, v in env.envs[0].seen[-1].items()} == {"a_0": [1, 2], "a_1": [2, 1]}
    assert td["next", "agents", "info", "score"].tolist() == [[3.0, 3.0]]
    assert td["next", "agents", "observation", "level"].tolist() == [[1, 1]]
    marl_envs.check_env_specs(env)


def test_one_hot_actions_and_return_state_equal_raw():
    import mpe2.simple_adversary_v3 as task

    env = PettingZooEnv("mpe/simple_adversary_v3", num_envs=2, categorical_actions=False, return_state=True, seed=5)
    assert env.group_map == {"adversary": ["adversary_0"], "agent": ["agent_0", "agent_1"]}
    assert env.full_action_spec["agent", "action"].shape == (2, 2, 5)
    raw = task.parallel_env()
    raw.reset(seed=6)
    td = env.rand_step(env.reset())
    raw.step({"adversary_0": int(td["adversary", "action"][1, 0].argmax()),
              **{a: int(td["agent", "action"][1, j].argmax()) for j, a in enumerate(["agent_0", "agent_1"])}})
    np.testing.assert_array_equal(td["next", "state"][1].numpy(), raw.state().astype(np.float32))


def test_continuous_actions_and_seeding():
    env = PettingZooEnv("mpe/simple_spread_v3", num_envs=2, continuous_actions=True)
    assert env.full_action_spec["agents", "action"].shape == (2, 3, 5)
    env.set_seed(11)
    first = env.rollout(4, break_when_any_done=False)
    recorded = iter(first.select(*env.action_keys).unbind(1))
    env.set_seed(11)
    second = env.rollout(4, lambda td: td.update(next(recorded)), break_when_any_done=False)
    assert torch.equal(first["next", "agents", "observation"], second["next", "agents", "observation"])
    assert not torch.equal(first["agents", "observation"][0], first["agents", "observation"][1])  # seeds s + i


# ------------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------------
def test_errors_name_the_problem_and_the_fix():
    with pytest.raises(ValueError, match="turn-based and has no parallel API.*parallel=False, use_mask=True"):
        PettingZooEnv("classic/tictactoe_v3", parallel=True)
    with pytest.raises(ValueError, match="need use_mask=True"):
        PettingZooEnv("classic/tictactoe_v3", parallel=False, use_mask=False)
    with pytest.raises(ValueError, match="did you mean 'mpe/simple_spread_v3'"):
        PettingZooEnv("mpe/simple_sprad_v3")
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'M'; it accepts the env keywords "
                                        r"\['num_envs', .* and the task's keywords \['N', "):
        PettingZooEnv("mpe/simple_spread_v3", M=3)
    with pytest.raises(TypeError, match="'max_cycle'; did you mean 'max_cycles'\\?"):
        marl_envs.make("pettingzoo/mpe/simple_spread_v3", max_cycle=3)
    with pytest.raises(ValueError, match="no global state.*return_state=False"):
        marl_envs.make("pettingzoo/classic/tictactoe_v3", return_state=True)
    with pytest.raises(ValueError, match="group 'agents' mixes agents with different specs: 'adversary_0' and 'agent_0' differ at 'observation'"):
        PettingZooEnv("mpe/simple_adversary_v3", group_map=MarlGroupMapType.ALL_IN_ONE_GROUP)
    with pytest.raises(ValueError, match="wasn't found in any group"):
        PettingZooEnv("mpe/simple_spread_v3", group_map={"agents": ["agent_0", "agent_1"]})
    with pytest.raises(ValueError, match="num_envs=1 only.*zero-argument factory"):
        PettingZooWrapper(Shrinking(), num_envs=2)
    with pytest.raises(TypeError, match="PettingZoo ParallelEnv/AECEnv or a zero-argument factory"):
        PettingZooWrapper("mpe/simple_spread_v3")


def test_stepping_a_finished_env_says_to_reset():
    env = PettingZooEnv("mpe/simple_spread_v3", num_envs=1, max_cycles=1)
    td = env.rand_step(env.reset())
    assert td["next", "truncated"].all()
    with pytest.raises(ValueError, match="env 0 has no agents left.*reset it"):
        env.rand_step(env.step_mdp(td))


def test_benchmark_rows():
    rows = benchmark("pettingzoo/mpe/simple_spread_v3", num_envs=2, steps=5)
    assert [(label, steps) for label, _, steps in rows[:2]] == [
        ("marl_envs PettingZooEnv, auto-reset", 10), ("raw PettingZoo loop", 10)
    ]
    assert all(seconds > 0 for _, seconds, _ in rows)


def test_render_draws_envs_built_for_it_and_names_render_mode_otherwise():
    env = marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, seed=0)
    env.reset()
    assert not env.renders  # what a trainer reads before asking for frames (BenchMARL's has_render)
    with pytest.raises(ValueError, match=r"^render\(\) draws PettingZoo envs built with render_mode='rgb_array'; these "
                                         r"have render_mode=None: build them with marl_envs.make\("
                                         r"'pettingzoo/mpe/simple_spread_v3', ..., render_mode='rgb_array'\)$"):
        env.render(0)
    for workers in (0, 1):
        env = marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, seed=0, render_mode="rgb_array",
                             num_workers=workers)
        env.reset()
        assert env.renders
        frame = env.render(1)
        assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[-1] == 3 and frame.any()
        env.close()


def test_turn_based_actions_of_idle_players_are_neither_checked_nor_applied():
    """The mask says who acts: the idle player's action may be anything (zeros for its one-hot, as a TorchRL
    policy writes), the acting player's is checked."""
    env = marl_envs.make("pettingzoo/classic/tictactoe_v3", num_envs=2, seed=0, categorical_actions=False,
                         group_map={"player": ["player_1", "player_2"]})
    td = env.reset()
    assert td["player", "mask"].squeeze(-1).tolist() == [[True, False]] * 2
    action = torch.zeros(2, 2, 9, dtype=env.full_action_spec["player", "action"].dtype)
    action[:, 0, 4] = 1  # player_1 takes the centre; player_2's row stays zeros
    td = env.step(td.set(("player", "action"), action))["next"]
    assert td["player", "mask"].squeeze(-1).tolist() == [[False, True]] * 2
    assert (td["player", "observation"][:, 0].reshape(2, -1).sum(-1) == 1).all()  # one mark on the board
    with pytest.raises(ValueError, match=r"action \('player', 'action'\) has 2 invalid value\(s\), e.g. "
                                         r"\[\[0, 0, 0, 0, 0, 0, 0, 0, 0\], .*expected one-hot vectors over 9"):
        env.step(td.set(("player", "action"), action))  # player_2 acts now: its zeros are refused


def test_a_malformed_mask_gets_a_message():
    env = marl_envs.make("pettingzoo/classic/tictactoe_v3", num_envs=2, seed=0, categorical_actions=False,
                         group_map={"player": ["player_1", "player_2"]})
    td = env.reset()
    action = torch.zeros(2, 2, 9, dtype=env.full_action_spec["player", "action"].dtype)  # nobody acts: flagged
    td.set(("player", "action"), action).set(("player", "mask"), torch.ones(2, 2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"entry \('player', 'mask'\) \(whose actions count\) has shape \(2, 2, 3\), "
                                         r"dtype torch.bool, device cpu; expected a bool of shape \(2, 2\)"):
        env.step(td)
