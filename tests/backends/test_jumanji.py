"""Jumanji's multi-agent envs through the one JAX core: exact against raw Jumanji over episode boundaries, our
and TorchRL's ``check_env_specs``, structured observations kept structured."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from envs import play_to_max_steps
import marl_envs
from marl_envs import cli

jax = pytest.importorskip("jax")
jnp = jax.numpy
pytest.importorskip("jumanji")

from marl_envs.backends import jumanji as jm  # noqa: E402
from marl_envs.backends.jax import env_keys  # noqa: E402

B, SEED = 3, 2
MULTI_AGENT = ["Cleaner-v0", "Connector-v3", "LevelBasedForaging-v0", "MMST-v0", "MultiCVRP-v0", "RobotWarehouse-v0",
               "SearchAndRescue-v0"]
# time limits short enough for two episode ends in 14 steps (MultiCVRP has none: its episodes end when every
# customer is served, after 11 to 30 steps of random legal moves here)
KWARGS = {name: {"time_limit": 6} for name in MULTI_AGENT if name != "MultiCVRP-v0"}
STEPS = {"MultiCVRP-v0": 64}


def test_names_are_the_seven_multi_agent_envs_and_the_rest_are_listed_with_reasons():
    import jumanji

    assert jm.env_names() == MULTI_AGENT
    assert marl_envs.available_envs("jumanji") == [f"jumanji/{n}" for n in MULTI_AGENT]
    left_out = jm.unavailable()
    assert set(left_out) | set(MULTI_AGENT) == set(jumanji.registered_environments())
    assert left_out["Sokoban-v0"].startswith("downloads its level data")
    assert left_out["Snake-v1"].startswith("single-agent")
    with pytest.raises(ValueError, match=r"the Jumanji env 'Sokoban-v0' cannot be built here: downloads"):
        marl_envs.make("jumanji/Sokoban-v0")
    with pytest.raises(ValueError, match=r"RobotWarehouse-v0"):
        marl_envs.make("jumanji/RobotWarehose-v0")
    with pytest.raises(TypeError, match=r"time_limit"):
        marl_envs.make("jumanji/LevelBasedForaging-v0", time_limt=5)


def _split(keys):
    pairs = jax.vmap(lambda k: jax.random.split(k, 2))(keys)
    return pairs[:, 0], pairs[:, 1]


def _where(mask: np.ndarray, new, old):
    """``new`` in the envs ``mask`` marks, ``old`` elsewhere (leaf by leaf, the env along the first dim)."""
    return jax.tree.map(lambda a, b: jnp.where(mask.reshape(-1, *[1] * (a.ndim - 1)), a, b), new, old)


def _raw_action(env, td) -> jax.Array:
    """The agents' actions of ``td`` in Jumanji's layout (agents in order along the first dim after the batch)."""
    value = td["agents", "action"].numpy()
    return jnp.asarray(value.astype(np.dtype(env.jumanji_env.action_spec.dtype)))


def _compare(env, td, timestep) -> None:
    """Every entry of ``td`` that comes from Jumanji's observation or extras equals the raw ``timestep``'s."""
    for field in env._model._fields:
        raw = np.asarray(field.read(timestep.observation))
        if field.per_agent:
            ours = td[("agents", *field.key)].numpy()
            np.testing.assert_array_equal(ours, raw.astype(ours.dtype).reshape(ours.shape), err_msg=str(field.key))
        else:
            ours = td[field.key].numpy()
            assert ours.dtype == raw.dtype, field.key
            np.testing.assert_array_equal(ours, raw, err_msg=str(field.key))
    for name in env._model._extras:
        raw = np.broadcast_to(np.asarray(timestep.extras[name], np.float32)[:, None],
                              td["agents", "info", name].shape[:2])
        np.testing.assert_array_equal(td["agents", "info", name][..., 0].numpy(), raw, err_msg=name)


@pytest.fixture(scope="module", params=MULTI_AGENT)
def run(request):
    """One env per name (compiled once for the tests of this module): stepped with random legal actions beside
    raw Jumanji's ``reset`` / ``step`` from the same per-env keys, the envs that end reset on both sides."""
    name = request.param
    env = marl_envs.make(f"jumanji/{name}", num_envs=B, seed=SEED, **KWARGS.get(name, {}))
    raw = env.jumanji_env
    reset, step = jax.jit(jax.vmap(raw.reset)), jax.jit(jax.vmap(raw.step))
    carried, now = _split(env_keys(SEED, B))
    state, timestep = reset(now)
    torch.manual_seed(0)
    td = env.reset()
    _compare(env, td, timestep)
    ends, truncations = np.zeros(B, int), {}
    for _ in range(STEPS.get(name, 14)):
        td = env.rand_action(td)
        state, timestep = step(state, _raw_action(env, td))
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        _compare(env, nxt, timestep)
        reward = np.asarray(timestep.reward, np.float32)
        reward = np.broadcast_to(reward[:, None] if reward.ndim == 1 else reward, nxt["agents", "reward"].shape[:2])
        np.testing.assert_array_equal(nxt["agents", "reward"][..., 0].numpy(), reward)
        last = np.asarray(timestep.step_type) == 2
        kept_discount = np.asarray(timestep.discount).reshape(B, -1).max(axis=1) > 0
        counter = getattr(state, "step_count", getattr(state, "step", None))
        limit = getattr(raw, "time_limit", None)
        at_limit = np.asarray(counter) >= limit if limit is not None else np.zeros(B, bool)
        # a termination at the limit is the limit itself where Jumanji ends its limit so, else a true terminal state
        limit_ended = at_limit & (name in jm.LIMIT_BY_TERMINATION)
        np.testing.assert_array_equal(nxt["done"][:, 0].numpy(), last)
        np.testing.assert_array_equal(nxt["truncated"][:, 0].numpy(), last & (kept_discount | at_limit))
        np.testing.assert_array_equal(nxt["terminated"][:, 0].numpy(), last & ~(kept_discount | limit_ended))
        truncations[name] = truncations.get(name, 0) + int((last & at_limit).sum())
        if ("agents", "terminated") in nxt.keys(True):  # Connector: an agent that connected or is blocked
            ended = np.asarray(timestep.discount) == 0
            np.testing.assert_array_equal(nxt["agents", "terminated"][..., 0].numpy(), ended)
        ends += last
        if last.any():  # both sides draw the next episode from the env's carried key
            kept, now = _split(carried)
            fresh_state, fresh = reset(now)
            state, timestep, carried = _where(last, (fresh_state, fresh, kept), (state, timestep, carried))
        _compare(env, root, timestep)
        td = root
    return {"env": env, "ends": ends, "truncations": truncations.get(name, 0)}


def test_exact_against_raw_jumanji_across_episode_ends(run):
    """Same keys, same actions: our observations (structured, per agent and shared), masks, extras, rewards and
    ends are raw Jumanji's on every step, and the next episodes start from the same states (checked in ``run``)."""
    assert (run["ends"] >= 2).all(), run["ends"]  # every env crossed at least two episode ends


def test_a_time_limit_is_truncated(run):
    """Reaching Jumanji's ``time_limit`` is ``truncated``, never ``terminated``, even in the envs that end their limit
    with a termination (``LIMIT_BY_TERMINATION``: Cleaner, MMST, RobotWarehouse, SearchAndRescue; time_limit=6 here);
    checked step by step against the raw state's step count in ``run``, which must have met the limit."""
    if run["env"].jumanji_env.__class__.__name__ == "MultiCVRP":
        pytest.skip("MultiCVRP has no time limit: its episodes end when every customer is served")
    assert run["truncations"] > 0


def test_time_limit_is_max_steps_and_ends_with_truncated(run):
    """``max_steps`` defaults to the env's ``time_limit`` (6 here; MultiCVRP has none: its tours end within
    ``2 * num_customers`` steps, its ``max_episode_length``); random play to it ends every env not ended earlier with
    ``truncated``, at the root and for every agent still running, never ``terminated`` at the root (a Connector agent
    connected or blocked on that very step has truly ended: ``terminated`` too, as ``run`` checks against Jumanji's
    discount, but not every agent); a longer ``max_steps`` is refused, naming ``time_limit``."""
    env = run["env"]
    raw = env.jumanji_env
    if env.env_name == "MultiCVRP-v0":
        assert env.max_steps is None and env.max_episode_length == 2 * raw._num_customers
        return
    assert env.max_steps == env.max_episode_length == raw.time_limit == 6
    nxt, going, before = play_to_max_steps(env)
    assert going.any()
    for key in env.done_keys:
        live = going.reshape(env.num_envs, *[1] * (nxt[key].ndim - 1)).expand_as(nxt[key])
        if isinstance(key, tuple):  # an agent whose own done was set the step before has ended (Connector)
            live = live & ~before[(*key[:-1], "done")]
        value, name = nxt[key][live], key if isinstance(key, str) else key[-1]
        if name != "terminated":
            assert value.all(), key
        elif key == "terminated" or env.env_name != "Connector-v3":
            assert not value.any(), key
        else:
            assert not value.all(), key
    with pytest.raises(ValueError, match=r"max_steps=7 is beyond the library's own time limit: its episodes end "
                                         r"after 6 steps; .*\(time_limit=N\)"):
        marl_envs.make(f"jumanji/{env.env_name}", num_envs=2, max_steps=7, time_limit=6)


def test_check_env_specs(run):
    marl_envs.check_env_specs(run["env"], seed=0)


@pytest.mark.skipif(importlib.util.find_spec("torchrl") is None, reason="needs torchrl")
def test_torchrl_check_env_specs(run):
    from torchrl.envs.utils import check_env_specs as torchrl_check_env_specs

    from marl_envs.torchrl import to_torchrl

    adapted = to_torchrl(run["env"])
    torchrl_check_env_specs(adapted)
    assert adapted.rollout(4, break_when_any_done=False).batch_size == (B, 4)


def test_layout_of_structured_observations():
    """Per-agent fields under the group, shared ones at the root in Jumanji's dtype (not copied per agent), the
    action mask honoured by ``rand_action``; ``render`` draws with Jumanji's viewer."""
    env = marl_envs.make("jumanji/Cleaner-v0", num_envs=2, seed=0, time_limit=6)
    td = env.reset()
    assert td["grid"].dtype == torch.int8 and td["grid"].shape == (2, 10, 10)
    assert td["agents", "observation", "agents_locations"].shape == (2, 3, 2)
    assert td["agents", "action_mask"].dtype == torch.bool and td["agents", "action_mask"].shape == (2, 3, 4)
    assert "grid" not in td["agents", "observation"]
    for _ in range(20):
        td = env.rand_action(td)
        chosen = td["agents", "action_mask"].gather(-1, td["agents", "action"].unsqueeze(-1))
        assert chosen.all()
        td = env.step_and_maybe_reset(td)[1]
    image = env.render(1)  # drawn by Jumanji's own viewer, into an array
    assert env.renders and image.dtype == np.uint8 and image.shape[-1] == 3 and image.std() > 0
    env.close()


def test_connector_gives_each_agent_its_view_of_the_grid(capsys):
    """Connector's agents share one grid (agent i's path, position and target are 3i + 1, 3i + 2, 3i + 3 in it,
    as Jumanji documents); each agent's ``observation`` shows its own as 1, 2, 3 in channel 0 and the others' as
    1, 2, 3 in channel 1, and ``marl-envs info`` describes the shared entries in Jumanji's words."""
    env = marl_envs.make("jumanji/Connector-v3", num_envs=2, seed=0)
    td = env.reset()
    for _ in range(3):
        td = env.step_and_maybe_reset(env.rand_action(td))[1]
    grid, view = td["grid"], td["agents", "observation"]
    n = len(env.group_map["agents"])
    assert view.shape == (2, n, *grid.shape[1:], 2) and view.dtype == torch.float32
    for i in range(n):
        for value in (1, 2, 3):
            own = grid == 3 * i + value
            assert own.any() or value == 1  # a position and a target always; a path once the agent moved
            assert (view[:, i, ..., 0][own] == value).all() and (view[:, i, ..., 1][own] == 0).all()
            for j in range(n):
                if j != i:
                    assert (view[:, j, ..., 1][own] == value).all() and (view[:, j, ..., 0][own] == 0).all()
    assert (view.transpose(0, 1)[:, grid == 0] == 0).all()
    env.close()
    assert cli.main(["info", "jumanji/Connector-v3"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "shared by every agent: int array representing the positions of all agents" in rows["grid"]
    assert "shared by every agent: (int32) the current episode step" in rows["step_count"]
    assert "each agent's view of the grid: channel 0 its own path" in rows["agents.observation"]


def test_jumanji_action_puts_the_agents_in_jumanjis_order():
    """With groups that reorder the agents, ``jumanji_action`` (what the bench's raw loop steps) gives each
    agent's action at its Jumanji index, in Jumanji's dtype."""
    env = marl_envs.make("jumanji/LevelBasedForaging-v0", num_envs=2, group_map={"a": ["agent_1"], "b": ["agent_0"]})
    td = env.rand_action(env.reset())
    raw = env.jumanji_action(td)
    assert raw.dtype == np.int32 and raw.shape == (2, 2)
    np.testing.assert_array_equal(raw[:, 0], td["b", "action"][:, 0].numpy())
    np.testing.assert_array_equal(raw[:, 1], td["a", "action"][:, 0].numpy())


def test_each_env_is_built_from_its_own_module_as_jumanji_make_builds_it():
    """``CLASSES`` (each env's class, imported from its module alone) is Jumanji's registry: the same classes, which
    Jumanji registers without keywords of their own."""
    import jumanji
    from jumanji.registration import _REGISTRY, load

    from marl_envs.backends.jumanji import _env

    assert set(_env.CLASSES) == set(MULTI_AGENT)
    for name, where in _env.CLASSES.items():
        module, _, attribute = where.partition(":")
        assert load(_REGISTRY[name].entry_point) is getattr(importlib.import_module(module), attribute), name
        assert _REGISTRY[name].kwargs == {}, name
    assert jumanji.make  # the package, complete


@pytest.mark.parametrize("mode", ["deferred", "immediate"])
def test_an_agent_with_no_legal_choice_takes_any_action(mode):
    """MMST leaves agents with no legal choice (an all-False mask row) within a few steps; Jumanji's step takes any
    action for them, and so does ours, in both check modes: the library's random play (a uniform draw over every
    choice in such a row) runs 200 steps with no refusal."""
    env = marl_envs.make("jumanji/MMST-v0", num_envs=4, seed=0)
    env.validate_actions = mode
    data = env.rollout(200, break_when_any_done=False)
    assert data.batch_size == (4, 200)
    empty = ~data["agents", "action_mask"].any(-1)
    assert empty.sum() > 50  # rows with no legal choice came up, and took what the draw gave
    assert len(data["agents", "action"][empty].unique()) > 1
