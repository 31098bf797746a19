"""Melting Pot: names, the contract's keys, episode ends, workers, the import without TensorFlow, refusals."""

import subprocess
import sys

import numpy as np
import pytest
import torch

import marl_envs

pytestmark = pytest.mark.skipif(not marl_envs.backend_installed("meltingpot"), reason="meltingpot is not installed")

COOKING = "meltingpot/collaborative_cooking__asymmetric"


@pytest.fixture(scope="module")
def cooking():
    env = marl_envs.make(COOKING, num_envs=2, seed=0)
    yield env
    env.close()


def test_every_substrate_of_the_installed_package_builds_by_name():
    from marl_envs.backends.meltingpot._library import substrate_module

    assert marl_envs.available_envs("meltingpot") == sorted(f"meltingpot/{n}" for n in substrate_module().SUBSTRATES)
    assert len(marl_envs.available_envs("meltingpot")) == 49


def test_keys_shapes_and_dtypes(cooking):
    td = cooking.reset()
    assert cooking.group_map == {"agents": ["player_0", "player_1"]}
    assert td["agents", "observation", "RGB"].shape == (2, 2, 40, 40, 3)
    assert td["agents", "observation", "RGB"].dtype == torch.uint8
    assert td["agents", "observation", "COLLECTIVE_REWARD"].dtype == torch.float64
    assert td["state"].shape == (2, 40, 72, 3) and td["state"].dtype == torch.uint8
    assert cooking.full_action_spec["agents", "action"].shape == (2, 2)
    assert cooking.max_steps == 1000
    assert cooking.render(1).shape == (40, 72, 3)
    assert np.array_equal(cooking.render(1), td["state"][1].numpy())
    marl_envs.check_env_specs(cooking)


class _Recording:
    """A dmlab2d env that records the actions Melting Pot's wrappers hand it."""

    def __init__(self, lab, sent):
        self._lab, self._sent = lab, sent

    def act_discrete(self, actions):
        self._sent.append(np.array(actions))
        return self._lab.act_discrete(actions)

    def __getattr__(self, name):
        return getattr(self._lab, name)


def test_the_data_are_melting_pots_own_across_episode_ends(monkeypatch):
    """Each step is Melting Pot's ``substrate.step`` (here stepped through its wrappers, which must send dmlab2d the
    action vector the family's table sends) and every entry is that step's timestep, across episode ends, with the
    players in their groups and the world view at the root. (Two builds of one seed differ upstream, so a second,
    raw substrate cannot be the reference.)"""
    import dmlab2d

    from marl_envs.backends.meltingpot._library import Instance

    seen, sent = [], []
    reset = Instance.reset

    def through_the_wrappers(self):  # the dmlab2d env under the wrappers, recording what they send
        env = self.substrate
        while type(env) is not dmlab2d.Environment:
            env = env._env
        env._env = _Recording(env._env, sent)

    def recorded_reset(self, seed):
        reset(self, seed)
        through_the_wrappers(self)
        seen.append(("reset", self.substrate.observation()))

    def recorded_step(self, actions):
        ours = self.table(actions)
        timestep = self.substrate.step(actions.tolist())
        assert np.array_equal(sent.pop(), ours) and not sent  # the wrappers' action vector is the table's
        seen.append(("step", timestep, actions.tolist()))
        return timestep.last()

    monkeypatch.setattr(Instance, "reset", recorded_reset)
    monkeypatch.setattr(Instance, "step", recorded_step)
    env = marl_envs.make("meltingpot/predator_prey__open", num_envs=1, seed=0, max_steps=3)
    try:
        td = env.reset()
        first = seen.pop(0)[1]
        assert np.array_equal(td["state"][0].numpy(), first[0]["WORLD.RGB"])
        order = [p for members in env.group_map.values() for p in members]
        for t in range(7):
            td = env.rand_action(td)
            td, td_next = env.step_and_maybe_reset(td)
            _, timestep, actions = seen.pop(0)
            nxt = td["next"]
            for group, members in env.group_map.items():
                idx = [int(m.partition("_")[2]) for m in members]
                assert td[group, "action"][0].tolist() == [actions[k] for k in idx]
                assert np.array_equal(nxt[group, "observation", "RGB"][0].numpy(),
                                      np.stack([timestep.observation[k]["RGB"] for k in idx]))
                for key in ("STAMINA", "COLLECTIVE_REWARD"):
                    assert nxt[group, "observation", key][0, :, 0].tolist() == [
                        float(timestep.observation[k][key]) for k in idx]
                assert nxt[group, "reward"][0, :, 0].tolist() == [float(timestep.reward[k]) for k in idx]
            assert np.array_equal(nxt["state"][0].numpy(), timestep.observation[0]["WORLD.RGB"])
            assert bool(nxt["truncated"]) == (t % 3 == 2) and not timestep.last()
            if t % 3 == 2:  # a new episode: its first observation is the reset's
                first = seen.pop(0)[1]
                assert np.array_equal(td_next["state"][0].numpy(), first[0]["WORLD.RGB"])
                assert np.array_equal(td_next["prey", "observation", "RGB"][0, 0].numpy(), first[3]["RGB"])
            td = td_next
        assert not seen and len(order) == 13
    finally:
        env.close()


@pytest.mark.parametrize("group_map", [None, {"agents": ["player_1", "player_0"]},
                                       {"cook": ["player_1"], "helper": ["player_0"]}])
def test_each_group_holds_its_players_data_in_its_order(monkeypatch, group_map):
    """Whatever the group map (one group of every player in order, the players reordered, a group each), each
    group's actions reach its players and its entries are its players' timestep data, in the map's order."""
    from marl_envs.backends.meltingpot._library import Instance

    seen = []

    def recorded_step(self, actions):
        timestep = self.substrate.step(actions.tolist())
        seen.append((timestep, actions.tolist()))
        return timestep.last()

    monkeypatch.setattr(Instance, "step", recorded_step)
    env = marl_envs.make(COOKING, num_envs=1, seed=0, group_map=group_map)
    try:
        td = env.reset()
        for _ in range(3):
            td, td_next = env.step_and_maybe_reset(env.rand_action(td))
            timestep, actions = seen.pop()
            for group, members in env.group_map.items():
                idx = [int(m.partition("_")[2]) for m in members]
                assert td[group, "action"][0].tolist() == [actions[k] for k in idx]
                assert np.array_equal(td["next", group, "observation", "RGB"][0].numpy(),
                                      np.stack([timestep.observation[k]["RGB"] for k in idx]))
                assert td["next", group, "reward"][0, :, 0].tolist() == [float(timestep.reward[k]) for k in idx]
            td = td_next
    finally:
        env.close()


def test_roles_are_groups_where_they_differ():
    env = marl_envs.make("meltingpot/predator_prey__open", num_envs=1)
    try:
        assert {g: len(m) for g, m in env.group_map.items()} == {"predator": 3, "prey": 10}
        td = env.rand_step(env.reset())
        assert td["next", "prey", "observation", "STAMINA"].shape == (1, 10, 1)
        assert td["next", "predator", "reward"].shape == (1, 3, 1)
    finally:
        env.close()


def test_the_substrates_length_is_a_truncation_across_the_episode_end():
    env = marl_envs.make(COOKING, num_envs=1, num_workers=1, seed=0)
    try:
        data = env.rollout(1001, break_when_any_done=False)
        done = data["next", "done"].reshape(-1)
        assert done.nonzero().flatten().tolist() == [999]
        assert data["next", "truncated"].reshape(-1)[999] and not data["next", "terminated"].any()
    finally:
        env.close()


def test_workers_step_and_reset_and_a_dead_worker_is_rebuilt_by_reset():
    env = marl_envs.make(COOKING, num_envs=3, num_workers=2, seed=0, max_steps=4)
    try:
        assert len(env.worker_pids) == 2
        data = env.rollout(6, break_when_any_done=False)
        assert data["next", "truncated"][:, 3].all()
        import os
        import signal

        os.kill(env.worker_pids[1], signal.SIGKILL)
        with pytest.raises(marl_envs.backends.meltingpot.WorkerError,
                           match=r"meltingpot/collaborative_cooking__asymmetric: Melting Pot worker 1 \(envs 2-2\)|"
                                 r"Melting Pot worker 1 \(env 2\) was killed by SIGKILL"):
            env.rand_step(env.reset())
        assert env.reset()["agents", "observation", "RGB"].shape == (3, 2, 40, 40, 3)
    finally:
        env.close()


def test_refusals_name_the_fix():
    with pytest.raises(ValueError, match=r"did you mean 'meltingpot/clean_up'"):
        marl_envs.make("meltingpot/clean_upp")
    with pytest.raises(ValueError, match=r"'clean_up_0' is a Melting Pot scenario: a substrate played with bots, "
                                         r"whose TensorFlow models .* build its substrate, 'clean_up'"):
        marl_envs.make("meltingpot/clean_up_0")
    with pytest.raises(ValueError, match=r"roles=\['cook'\] for 'collaborative_cooking__asymmetric': give one role"):
        marl_envs.make(COOKING, roles=["cook"])


def test_no_stand_in_is_left_where_a_users_import_finds_it():
    """Melting Pot is imported with a stand-in ``tensorflow`` only while it is imported: afterwards ``import
    tensorflow`` finds what it finds without us (the real package where installed, else nothing)."""
    code = (
        "import importlib.util, sys, marl_envs\n"
        "real = importlib.util.find_spec('tensorflow') is not None\n"
        "env = marl_envs.make('meltingpot/collaborative_cooking__asymmetric')\n"
        "assert 'tensorflow' not in sys.modules, 'left in sys.modules'\n"
        "try:\n"
        "    import tensorflow\n"
        "except ModuleNotFoundError:\n"
        "    assert not real\n"
        "else:\n"
        "    assert real and tensorflow.__file__ and type(tensorflow).__name__ == 'module', tensorflow\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_substrates_build_where_tensorflow_is_absent():
    """Without TensorFlow (its import blocked here, as Python blocks a ``None`` in ``sys.modules``), the substrates
    still build, and a later ``import tensorflow`` fails as it would without us."""
    code = (
        "import sys\n"
        "sys.modules['tensorflow'] = None\n"
        "import marl_envs\n"
        "env = marl_envs.make('meltingpot/collaborative_cooking__asymmetric')\n"
        "assert env.rand_step(env.reset())['next', 'agents', 'reward'].shape == (1, 2, 1)\n"
        "assert sys.modules['tensorflow'] is None\n"
        "try:\n"
        "    import tensorflow\n"
        "except ModuleNotFoundError:\n"
        "    print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


@pytest.mark.xfail(reason="Melting Pot 2.4.1 builds two substrates of one env_seed differently in one process",
                   strict=False)
def test_a_twin_with_the_same_seed_gives_the_same_data():
    a, b = (marl_envs.make(COOKING, num_envs=2, seed=3) for _ in range(2))
    try:
        first = a.rollout(20, break_when_any_done=False)
        actions = first.select(*a.action_keys)
        t = iter(range(20))
        second = b.rollout(20, lambda td: td.update(actions[:, next(t)]), break_when_any_done=False)
        assert (first == second).all()
    finally:
        a.close()
        b.close()
