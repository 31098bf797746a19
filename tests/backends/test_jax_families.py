"""JaxMARL and gymnax through the one JAX core: exactness against the raw libraries, the functional face."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from envs import play_to_max_steps
import marl_envs

jax = pytest.importorskip("jax")
jnp = jax.numpy
pytest.importorskip("jaxmarl")
pytest.importorskip("gymnax")

from marl_envs.backends.jaxmarl import _env as jm  # noqa: E402
from marl_envs.backends.jax import env_keys  # noqa: E402

B = 4


def _split(keys):
    pairs = jax.vmap(lambda k: jax.random.split(k, 2))(keys)
    return pairs[:, 0], pairs[:, 1]


def test_jaxmarl_names_pinned():
    """Every registered JaxMARL env is either buildable by name or listed with its reason."""
    import jaxmarl

    names = jm.env_names()
    assert "humanoid_9-8" in names and jm.library_name("humanoid_9-8") == "humanoid_9|8"  # shell-safe here
    assert {jm.library_name(n) for n in names} | set(jm.unavailable()) == set(jaxmarl.registered_envs)
    assert set(jm.unavailable()) == {"LearnedPolicyEnemySMAX", "storm", "storm_2p", "storm_np"} | {
        n for n in jaxmarl.registered_envs if n.startswith("JaxRobotarium_")}
    with pytest.raises(ValueError, match=r"LearnedPolicyEnemySMAX' cannot be built here: needs a trained enemy"):
        marl_envs.make("jaxmarl/LearnedPolicyEnemySMAX")
    with pytest.raises(ValueError, match=r"MPE_simple_spread_v3"):
        marl_envs.make("jaxmarl/MPE_simple_spred_v3")


def test_jaxmarl_tables_are_the_librarys():
    """What the backend declares of JaxMARL (``_library``: each env's class and module, SMAX's maps) is what the
    installed JaxMARL has: ``jaxmarl.make``'s if-chain calls the same class (or function) for every name."""
    import ast
    import importlib
    import inspect
    import sys
    import textwrap

    import jaxmarl
    from jaxmarl.environments.smax.smax_env import MAP_NAME_TO_SCENARIO

    from marl_envs.backends.jaxmarl import _library

    from marl_envs._core.validate import env_keywords

    assert _library.ENV_KEYWORDS == tuple(env_keywords(jm.JaxMarlEnv))  # the env's own keywords, checked first
    assert set(_library.CLASSES) | set(_library.ROBOTARIUM) == set(jaxmarl.registered_envs)
    assert _library.SMAX_MAPS == tuple(MAP_NAME_TO_SCENARIO)
    registration = sys.modules[jaxmarl.make.__module__]
    called = {}  # name -> what make calls for it
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(jaxmarl.make)))):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(
                node.test.comparators[0], ast.Constant) and isinstance(node.body[0], ast.Assign):
            name = node.test.comparators[0].value
            if not name.startswith("JaxRobotarium"):  # their classes come from jaxrobotarium (not installed)
                called[name] = getattr(registration, node.body[0].value.func.id)
    assert set(called) == set(_library.CLASSES)
    for name, where in _library.CLASSES.items():
        module, _, attribute = where.partition(":")
        assert getattr(importlib.import_module(module), attribute) is called[name], name


def test_a_jaxmarl_env_is_built_from_its_own_module():
    """Building an MPE env imports its module alone: not JaxMARL's package (every family, MABrax's Brax and MuJoCo
    too); a later ``import jaxmarl`` gets the whole package, with the same classes."""
    code = (
        "import sys, marl_envs\n"
        "env = marl_envs.make('jaxmarl/MPE_simple_spread_v3', num_envs=2)\n"
        "env.rollout(2)\n"
        "loaded = {'jaxmarl', 'jaxmarl.environments', 'brax', 'mujoco'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
        "import jaxmarl\n"
        "assert type(jaxmarl.make('MPE_simple_spread_v3')) is type(env.jaxmarl_env)\n"
        "assert jaxmarl.environments.SimpleSpreadMPE is type(env.jaxmarl_env) and 'jaxrobotarium' not in sys.modules\n"
        "import gymnax\n"  # gymnax too: its package imports every env (Pong: seaborn, SciPy)
        "cartpole = marl_envs.make('gymnax/CartPole-v1', num_envs=2)\n"
        "assert type(gymnax.make('CartPole-v1')[0]) is type(cartpole.gymnax_env)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_gymnax_classes_are_the_librarys():
    import gymnax

    from marl_envs.backends.gymnax import _env as gx

    registry = gymnax.registration._registry
    assert gx.CLASSES == {name: f"{f.__module__}:{f.__qualname__}" for name, f in registry.items()
                          if name not in gx.UNAVAILABLE}


@pytest.mark.filterwarnings("ignore:max_dist_to_goal:UserWarning")  # JaxNav's notice about its own map range
def test_every_discrete_jaxmarl_env_carries_a_mask_or_is_listed_with_the_reason():
    """A JaxMARL env with discrete actions has ``(group, "action_mask")`` unless ``NO_MASK`` lists it; a listed env
    really has no mask source (so the list cannot hide one), and the list names only discrete envs."""
    import jaxmarl

    from marl_envs.backends.brax import quiet_brax_build

    discrete, masked = set(), set()
    for name in jm.env_names():
        with quiet_brax_build():
            env = jaxmarl.make(jm.library_name(name))
        if any(type(env.action_space(a)).__name__ in ("Discrete", "MultiDiscrete") for a in env.agents):
            discrete.add(name)
            state = jax.eval_shape(env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32))[1]
            if jm._mask_source(env, state)[0] is not None:
                masked.add(name)
    assert {"SMAX", "HeuristicEnemySMAX", "hanabi"} <= masked
    assert discrete - masked == set(jm.NO_MASK)
    assert all(reason.startswith("JaxMARL's get_avail_actions raises") for reason in jm.NO_MASK.values())


@pytest.mark.parametrize("name, kwargs", [("MPE_simple_spread_v3", {}), ("MPE_simple_adversary_v3", {}),
                                          ("SMAX", {}), ("switch_riddle", {})])
def test_jaxmarl_exact(name, kwargs):
    """Same keys and actions: our observations, rewards and ends are the raw library's."""
    env = marl_envs.make(f"jaxmarl/{name}", num_envs=B, seed=3, **kwargs)
    raw = env.jaxmarl_env
    agents = [a for members in env.group_map.values() for a in members]
    td = env.reset()
    carried, now = _split(env_keys(3, B))
    obs, state = jax.vmap(raw.reset)(now)
    torch.manual_seed(0)
    for _ in range(6):
        td = env.rand_action(td)
        actions = {}
        for group, members in env.group_map.items():
            for j, agent in enumerate(members):
                actions[agent] = jnp.asarray(td[group, "action"][:, j].numpy())
        for group, members in env.group_map.items():
            for j, agent in enumerate(members):
                np.testing.assert_array_equal(td[group, "observation"][:, j].numpy(),
                                              np.asarray(obs[agent], np.float32).reshape(B, *td[group, "observation"].shape[2:]))
        # JaxMARL's world state, where its observations carry one (SMAX's), is the root "state"
        assert ("state" in td.keys()) == ("world_state" in obs)
        if "world_state" in obs:
            np.testing.assert_array_equal(td["state"].numpy(), np.asarray(obs["world_state"], np.float32))
        carried, now = _split(carried)
        obs, state, reward, dones, _ = jax.vmap(raw.step_env)(now, state, {a: actions[a] for a in agents})
        td = env.step(td)
        for group, members in env.group_map.items():
            for j, agent in enumerate(members):
                np.testing.assert_array_equal(td["next", group, "reward"][:, j, 0].numpy(), np.asarray(reward[agent]))
        np.testing.assert_array_equal(td["next", "done"][:, 0].numpy(), np.asarray(dones["__all__"]))
        td = td["next"].exclude(*[(g, "reward") for g in env.group_map])


@pytest.mark.parametrize("name", ["jaxmarl/SMAX", "gymnax/CartPole-v1", "brax/fast"])
def test_step_and_maybe_reset_matches_step_then_reset(name):
    """JaxMARL and gymnax step and reset the envs a step ends in one compiled call, Brax in two; all three merge
    the reset into the next root data in one pass (the action masks of SMAX's fresh episodes included): the same
    data and the same key streams as step() followed by reset() of the done envs."""
    if name.startswith("brax"):
        pytest.importorskip("brax")
    fused, plain = (marl_envs.make(name, num_envs=B, seed=5, max_steps=4) for _ in range(2))
    td_f, td_p = fused.reset(), plain.reset()
    resets = 0
    for _ in range(10):
        td_f = fused.rand_action(td_f)
        td_p.update(td_f.select(*fused.action_keys).clone())
        td_f, next_f = fused.step_and_maybe_reset(td_f)
        td_p = plain.step(td_p)
        next_p = plain.step_mdp(td_p)
        done = next_p["done"].clone()
        if done.any():
            next_p["_reset"] = done
            next_p = plain.reset(next_p)
        resets += int(done.sum())
        for x, y in ((td_f["next"], td_p["next"]), (next_f, next_p)):
            assert set(x.keys(True, True)) == set(y.keys(True, True))
            for key in x.keys(True, True):
                assert torch.equal(x[key], y[key]), key
        td_f, td_p = next_f, next_p
    assert resets > B  # ends by the env and by max_steps were both reset


@pytest.mark.parametrize("name", ["jaxmarl/SMAX", "jaxmarl/MPE_simple_spread_v3"])
def test_done_entries_at_every_level(name):
    """done = terminated | truncated at the root and in groups; max_steps truncates the root and a group's
    agents; a group without its own ends repeats the root's terminated."""
    env = marl_envs.make(name, num_envs=B, seed=1, max_steps=3)
    td = env.reset()
    groups = [g for g in env.group_map if (g, "done") in env.done_keys]
    steps = torch.zeros(B, dtype=torch.long)
    limit_hits = 0
    for _ in range(8):
        td = env.rand_action(td)
        td, root = env.step_and_maybe_reset(td)
        steps += 1
        nxt, limit = td["next"], (steps >= 3)[:, None]
        limit_hits += int(limit.sum())
        assert torch.equal(nxt["done"], nxt["terminated"] | nxt["truncated"])
        assert (nxt["truncated"] | ~limit).all()
        for g in groups:
            n = len(env.group_map[g])
            assert torch.equal(nxt[g, "done"], nxt[g, "terminated"] | nxt[g, "truncated"])
            assert torch.equal(nxt[g, "truncated"], limit[:, None].expand(B, n, 1))
        for key in env.done_keys:  # the next root data carries the step's done entries
            assert torch.equal(root[key] if not nxt["done"].any() else root[key][~nxt["done"][:, 0]],
                               nxt[key] if not nxt["done"].any() else nxt[key][~nxt["done"][:, 0]])
        steps[nxt["done"][:, 0]] = 0
    assert limit_hits > 0
    if name == "jaxmarl/SMAX":
        assert groups == ["ally", "enemy"]


@pytest.mark.parametrize("name", ["jaxmarl/SMAX", "brax/fast", "gymnax/CartPole-v1", "playground/CartpoleBalance",
                                  pytest.param("playground/WalkerWalk_2x3", marks=pytest.mark.slow)])  # 100 s of MJX
def test_device_path_matches_cpu_path(name):
    """The code path written for GPUs (DLPack both ways, actions checked inside the step, fresh starts computed for
    every env and selected) gives the CPU path's data (Brax and Playground: the ended envs restarted after the step)
    exactly: run here on the CPU by device_path=True (no GPU on the test machines)."""
    if name.startswith(("brax", "playground")):
        pytest.importorskip("brax")
    if name.startswith("playground") and not marl_envs.registry.backend_installed("playground"):
        pytest.skip("needs the playground extra")
    cpu = marl_envs.make(name, num_envs=B, seed=2, max_steps=5)
    device = marl_envs.make(name, num_envs=B, seed=2, max_steps=5, device_path=True)
    assert device.device_path and not cpu.device_path
    assert cpu.validate_actions is True and device._deferred and cpu._deferred  # inside the step, on every device
    td_c, td_d = cpu.reset(), device.reset()
    for _ in range(12):
        td_c = cpu.rand_action(td_c)
        td_d.update(td_c.select(*cpu.action_keys).clone())
        td_c, next_c = cpu.step_and_maybe_reset(td_c)
        td_d, next_d = device.step_and_maybe_reset(td_d)
        for x, y in ((td_c["next"], td_d["next"]), (next_c, next_d)):
            assert set(x.keys(True, True)) == set(y.keys(True, True))
            for key in x.keys(True, True):
                assert torch.equal(x[key], y[key]), key
        td_c, td_d = next_c, next_d


def test_mpe_ends_by_time_limit_with_terminal_observation():
    env = marl_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=2, seed=0)
    data = env.rollout(26, break_when_any_done=False)
    assert not data["next", "done"][:, :25].any()
    assert data["next", "truncated"][:, 25].all() and not data["next", "terminated"].any()
    # the terminal observation is the step's own, not the next episode's first
    assert not torch.equal(data["next", "agents", "observation"][:, 25], data["agents", "observation"][:, 0])


def _play_to_the_limit(env):
    """Random play (``step_and_maybe_reset``) to ``env.max_steps``: the ``next`` data of the step that reaches it,
    and per done key the entries still running before it (envs not ended earlier, agents whose own done was unset
    the step before)."""
    nxt, going, before = play_to_max_steps(env)
    running = {}
    for key in env.done_keys:
        live = going.reshape(env.num_envs, *[1] * (nxt[key].ndim - 1)).expand_as(nxt[key])
        if isinstance(key, tuple) and before is not None:
            live = live & ~before[(*key[:-1], "done")]
        running[key] = live
    return nxt, running


def _assert_time_limit_flags(env, nxt, running):
    """At the time limit: every entry still running is ``truncated`` (and ``done``), none ``terminated``."""
    assert running["done"].any()  # some env reached the limit
    for key, live in running.items():
        value = nxt[key][live]
        name = key if isinstance(key, str) else key[-1]
        assert (not value.any()) if name == "terminated" else value.all(), key


# (name, make keywords, the library's own time limit read from the env's library object, in env steps)
HORIZONS = {
    # MPE tests step >= max_steps before counting the step: 25 + 1 steps
    "jaxmarl/MPE_simple_spread_v3": ({}, lambda env: env.jaxmarl_env.max_steps + 1),
    "jaxmarl/coin_game": ({"num_inner_steps": 2, "num_outer_steps": 3},
                          lambda env: env.jaxmarl_env.num_inner_steps * env.jaxmarl_env.num_outer_steps),
    "gymnax/Pendulum-v1": ({}, lambda env: env.env_params.max_steps_in_episode),
}


@pytest.mark.parametrize("name", list(HORIZONS))
def test_the_librarys_time_limit_is_max_steps_and_truncates(name):
    """``max_steps`` defaults to the library's own time limit in env steps (MPE: 26, Pendulum: 200); random play to
    it ends every env not ended earlier with ``truncated``, at the root and for every agent, never ``terminated``."""
    kwargs, horizon = HORIZONS[name]
    env = marl_envs.make(name, num_envs=3, seed=0, **kwargs)
    assert env.max_steps == env.max_episode_length == horizon(env)
    _assert_time_limit_flags(env, *_play_to_the_limit(env))


def test_max_steps_beyond_the_librarys_time_limit_is_refused():
    """A longer ``max_steps`` than the library's limit is refused, naming the keyword that lengthens it; a shorter
    one is taken; JaxMARL's own ``max_steps`` goes through ``env_kwargs`` (the name is the env's keyword)."""
    with pytest.raises(ValueError, match=r"max_steps=27 is beyond the library's own time limit: its episodes end "
                                         r"after 26 steps; pass max_steps of at most 26, or lengthen the library's "
                                         r"limit \(env_kwargs=\{\"max_steps\": N\}\)"):
        marl_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=2, max_steps=27)
    with pytest.raises(ValueError, match=r"its episodes end after 200 steps; .*\(env_params="
                                         r"\{\"max_steps_in_episode\": N\}\)"):
        marl_envs.make("gymnax/Pendulum-v1", num_envs=2, max_steps=201)
    with pytest.raises(ValueError, match=r"got 'scenario' both in env_kwargs and as a keyword"):
        marl_envs.make("jaxmarl/SMAX", scenario="3m", env_kwargs={"scenario": "3m"})
    assert marl_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=2, max_steps=10).max_steps == 10
    longer = marl_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=2, env_kwargs={"max_steps": 40})
    assert longer.jaxmarl_env.max_steps == 40 and longer.max_steps == 41
    with pytest.raises(ValueError, match=r"max_steps=None is beyond"):  # the library ends its episodes anyway
        longer.max_steps = None


def test_smax_masks_and_separate_ends():
    env = marl_envs.make("jaxmarl/SMAX", num_envs=2, seed=0)
    assert env.group_map == {"ally": [f"ally_{i}" for i in range(5)], "enemy": [f"enemy_{i}" for i in range(5)]}
    td = env.reset()
    for team in ("ally", "enemy"):  # the teams are the groups (same specs: the default rule would make one)
        assert (team, "action_mask") in env.observation_keys and (team, "terminated") in env.done_keys
        assert td[team, "action_mask"].dtype == torch.bool
        assert td[team, "action_mask"].shape == (2, 5, env.full_action_spec[team, "action"].n)


def test_hanabi_masks_its_legal_moves():
    """JaxMARL's Hanabi raises NotImplementedError in get_avail_actions; its get_legal_moves is the mask, so
    random actions are legal moves over 1,000 steps of play (games end and restart on the way)."""
    env = marl_envs.make("jaxmarl/hanabi", num_envs=2, seed=0)
    data = env.rollout(1000, break_when_any_done=False)
    mask, action = data["agents", "action_mask"], data["agents", "action"]
    assert mask.gather(-1, action.unsqueeze(-1)).all()
    # the player to move has several moves, the other only its no-op: a real mask, not all True
    legal = mask.sum(-1)
    assert (legal.min(-1).values == 1).all() and (legal.max(-1).values > 1).all()
    assert data["next", "done"].any()
    # the mask is get_legal_moves of the raw JaxMARL state, read through the functional face
    functions, rng = env.jax_functions(), np.random.default_rng(0)
    step, legal_moves = jax.jit(functions.step_autoreset), jax.jit(env.jaxmarl_env.get_legal_moves)
    state, obs = functions.reset(jax.random.PRNGKey(3))
    for _ in range(60):
        mask = np.asarray(obs["agents"]["action_mask"])
        raw = legal_moves(state.env)
        np.testing.assert_array_equal(mask, np.stack([np.asarray(raw[a]) for a in env.group_map["agents"]]) > 0)
        action = jnp.asarray([rng.choice(np.flatnonzero(m)) for m in mask])
        state, _, obs = step(state, {"agents": {"action": action}})


@pytest.mark.parametrize("name", ["SMAX", "HeuristicEnemySMAX"])
def test_smax_time_limit_is_truncated(name):
    """Units that hold still on a wide map never meet: the battle ends by SMAX's 100-step limit (after step 101,
    as SMAX checks the limit before counting the step), reported as truncated, never terminated. The
    HeuristicEnemySMAX state wraps SMAX's (its step counter is ``state.state.step``)."""
    env = marl_envs.make(f"jaxmarl/{name}", num_envs=2, seed=0, scenario="3m", map_width=400, map_height=400)

    def hold(td):
        for group in env.group_map:
            td[group, "action"] = torch.full(td[group, "action_mask"].shape[:2], 4)  # 4: stop
        return td

    data = env.rollout(101, hold, break_when_any_done=False)
    assert not data["next", "done"][:, :100].any()
    assert data["next", "truncated"][:, 100].all() and not data["next", "terminated"].any()


def test_heuristic_enemy_smax_rewards_focus_fire_over_random():
    """Reward semantics seen through a scripted policy: allies that advance (action 1: east) and all shoot the
    first enemy in range win battles (+1 on top of the enemy health they removed, a fraction per episode) and
    earn far more than random allies, who never win against the heuristic enemy; the ``won`` info says which
    battles were won."""
    env = marl_envs.make("jaxmarl/HeuristicEnemySMAX", num_envs=16, seed=0, scenario="3m")

    def focus_fire(td):
        mask = td["agents", "action_mask"]
        in_range = mask[..., 5:]
        action = torch.where(in_range.any(-1), in_range.float().argmax(-1) + 5, 1)
        td["agents", "action"] = torch.where(mask.gather(-1, action.unsqueeze(-1)).squeeze(-1), action, 4)
        return td

    results = {}
    for name, policy in (("scripted", focus_fire), ("random", None)):
        env.set_seed(0)
        data = env.rollout(120, policy, break_when_any_done=False)
        assert data["agents", "action_mask"].gather(-1, data["agents", "action"].unsqueeze(-1)).all()
        reward, done = data["next", "agents", "reward"][..., 0, 0], data["next", "done"][..., 0]
        results[name] = (reward.sum() / done.sum()).item(), (reward[done] >= 1).float().mean().item()
        # the "won" info: every ally's, on the step that ends a battle the allies win (JaxMARL's own baselines read
        # a win off that step's reward, >= 1), nowhere else
        won = data["next", "agents", "info", "won"][..., 0]  # (B, T, n)
        assert torch.equal(won[done], (reward[done] >= 1).float().unsqueeze(-1).expand(-1, 3))
        assert not won[~done].any()
    (scripted, scripted_wins), (random, random_wins) = results["scripted"], results["random"]
    assert scripted > 1.0 > 0.5 > random and scripted_wins > 0.3 and random_wins < 0.05


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1", "Breakout-MinAtar"])
def test_gymnax_exact(name):
    env = marl_envs.make(f"gymnax/{name}", num_envs=B, seed=1)
    raw, params = env.gymnax_env, env.env_params
    td = env.reset()
    carried, now = _split(env_keys(1, B))
    obs, state = jax.vmap(raw.reset_env, in_axes=(0, None))(now, params)
    for _ in range(5):
        # one compiled program for the batch against the library's own: XLA may fuse float math differently (1 ulp)
        np.testing.assert_allclose(td["observation"].numpy(), np.asarray(obs, np.float32).reshape(td["observation"].shape),
                                   rtol=1e-6, atol=1e-7)
        td = env.rand_action(td)
        action = jnp.asarray(td["action"].numpy())
        carried, now = _split(carried)
        obs, state, reward, done, _ = jax.vmap(raw.step_env, in_axes=(0, 0, 0, None))(
            now, state, action.astype(jnp.int32) if action.ndim == 1 else action, params)
        td = env.step(td)
        np.testing.assert_allclose(td["next", "reward"][:, 0].numpy(), np.asarray(reward, np.float32), rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(td["next", "done"][:, 0].numpy(), np.asarray(done))
        td = td["next"].exclude("reward")


def test_gymnax_truncation_from_time_limit():
    env = marl_envs.make("gymnax/Pendulum-v1", num_envs=2, env_params={"max_steps_in_episode": 5})
    data = env.rollout(5, break_when_any_done=False)
    assert data["next", "truncated"][:, 4].all() and not data["next", "terminated"].any()
    with pytest.raises(ValueError, match=r"no parameter 'max_step'"):
        marl_envs.make("gymnax/Pendulum-v1", env_params={"max_step": 5})


@pytest.mark.parametrize("name", ["jaxmarl/SMAX", "gymnax/CartPole-v1"])
def test_outputs_of_a_step_are_not_overwritten_by_later_steps(name):
    """Each step's tensors (floats, bools and done entries, next root data) are its own memory."""
    env = marl_envs.make(name, num_envs=4, seed=0, max_steps=3)
    td = env.reset()
    kept = []
    for _ in range(5):
        td, root = env.step_and_maybe_reset(env.rand_action(td))
        kept.append((td["next"], td["next"].clone(), root, root.clone()))
        td = root
    for out, copy, root, root_copy in kept:  # the next step wrote its actions and "next" into root
        assert (out == copy).all()
        assert (root.exclude("next", *env.action_keys) == root_copy.exclude(*env.action_keys)).all()


def test_max_steps_set_after_construction_truncates_at_the_new_limit():
    env = marl_envs.make("gymnax/Pendulum-v1", num_envs=2, seed=0, max_steps=50)
    env.max_steps = 3
    data = env.rollout(4, break_when_any_done=False)
    assert data["next", "truncated"][:, 2].all() and not data["next", "truncated"][:, :2].any()
    assert data["next", "done"][:, 2].all() and not data["next", "terminated"].any()


def test_functional_face_scan_matches_torch_env_brax_ant():
    """A lax.scan rollout of brax/ant_4x2 through jax_functions() matches the torch-facing env step for step."""
    pytest.importorskip("brax")
    T = 5
    env = marl_envs.make("brax/ant_4x2", num_envs=2, seed=7, max_steps=None)
    face = env.jax_functions()
    torch.manual_seed(0)
    td = env.reset()
    actions, ours = [], []
    for _ in range(T):
        td = env.rand_action(td)
        actions.append(td["agents", "action"].clone())
        td = env.step(td)
        ours.append(td["next"].clone())
        td = td["next"].exclude(("agents", "reward"))
    stacked = jnp.asarray(torch.stack(actions).numpy())  # (T, B, n, d)

    def rollout(key, acts):
        state, _ = face.reset(key)

        def body(state, a):
            return face.step(state, {"agents": {"action": a}})

        return jax.lax.scan(body, state, acts)[1]

    outs = jax.jit(jax.vmap(rollout, in_axes=(0, 1)))(face.first_keys(7, 2), stacked)
    # a scan is another XLA program than the per-step one: the first step agrees to float32 rounding, and the
    # contact dynamics amplify those ulps over the next steps (5e-4 after 5 steps, measured)
    for t in range(T):
        tol = dict(rtol=1e-5, atol=1e-6) if t == 0 else dict(rtol=1e-2, atol=2e-3)
        np.testing.assert_allclose(np.asarray(outs["agents"]["observation"][:, t]),
                                   ours[t]["agents", "observation"].numpy(), **tol)
        np.testing.assert_allclose(np.asarray(outs["agents"]["reward"][:, t]), ours[t]["agents", "reward"].numpy(),
                                   **tol)
        for key in ("terminated", "truncated", "done"):
            np.testing.assert_array_equal(np.asarray(outs[key][:, t]), ours[t][key].numpy())


# (name, make keywords, steps): one env of each JAX family over 1,000 steps. MPE ends by its own 25-step limit,
# CartPole by falling and by our max_steps, SMAX by our max_steps (with per-agent ends and action masks), the
# Brax pendulum by falling, Jumanji's LBF by its time limit or a cleared field (with shared integer entries)
AUTORESET_CASES = {
    "jaxmarl/MPE_simple_spread_v3": ({}, 1000),
    "gymnax/CartPole-v1": ({"max_steps": 20}, 1000),
    "jaxmarl/SMAX": ({"scenario": "3m", "max_steps": 6}, 1000),
    "brax/inverted_pendulum": ({}, 1000),
    "jumanji/LevelBasedForaging-v0": ({"time_limit": 25}, 1000),
}


def _leaf(tree: dict, key) -> np.ndarray:
    for part in (key,) if isinstance(key, str) else key:
        tree = tree[part]
    return np.asarray(tree)


def _keys(tree: dict, prefix: tuple = ()) -> set:
    """The leaf keys of a nested dict, as a TensorDict names them (a root key is a string)."""
    out = set()
    for name, value in tree.items():
        key = (*prefix, name)
        out |= _keys(value, key) if isinstance(value, dict) else {key[0] if len(key) == 1 else key}
    return out


@pytest.fixture(scope="module", params=list(AUTORESET_CASES))
def autoreset_runs(request):
    """One env driven twice from the same seed and actions: ``step_and_maybe_reset`` of the torch env, and a
    ``lax.scan`` of ``step_autoreset`` vmapped over the envs of ``first_keys``; both sides' data and end states."""
    name = request.param
    kwargs, T = AUTORESET_CASES[name]
    seed, B = 3, 2
    env = marl_envs.make(name, num_envs=B, seed=seed, **kwargs)
    face = env.jax_functions()
    td = env.reset()
    first = td.clone()
    actions, nexts, roots = [], [], []
    for _ in range(T):
        td = env.rand_action(td)
        actions.append(td.select(*env.action_keys).clone())
        td, root = env.step_and_maybe_reset(td)
        nexts.append(td["next"].clone())
        roots.append(root.exclude(*env.action_keys).clone())
        td = root
    stacked = jax.tree.map(lambda x: jnp.asarray(x.numpy()), torch.stack(actions, dim=1).to_dict())  # (B, T, ...)

    def rollout(key, acts):
        state, obs = face.reset(key)

        def body(state, a):
            state, out, obs = face.step_autoreset(state, a)
            return state, (out, obs)

        state, (outs, obss) = jax.lax.scan(body, state, acts)
        return state, obs, outs, obss

    state, *ours = jax.jit(jax.vmap(rollout))(face.first_keys(seed, B), stacked)
    theirs = first, torch.stack(nexts, dim=1), torch.stack(roots, dim=1)
    return {"env": env, "state": state, "pairs": list(zip(theirs, ours))}


def test_functional_autoreset_matches_step_and_maybe_reset_across_episodes(autoreset_runs):
    """From the first reset and over at least three episodes per env, ``step_autoreset``'s ``out`` is the torch
    env's ``td["next"]`` (the terminal observation, rewards and every done entry, max_steps included) and its
    ``obs`` the next root data (the next episode's first observation where one ended): the same keys, the same
    values, float32 rounding apart (the scan is another XLA program than the compiled batch step: over the 1,000
    steps MPE differs by up to 1.4e-6, the others not at all, measured; the docs' table)."""
    pairs = autoreset_runs["pairs"]  # (first reset, every step's "next", every next root), torch's and ours
    assert (pairs[1][0]["done"].sum(dim=(1, 2)) >= 3).all()  # every env crossed at least three episode ends
    for data, ours in pairs:
        assert set(data.keys(True, True)) == _keys(ours)
        for key in data.keys(True, True):
            theirs = data[key].numpy()
            if theirs.dtype == bool:
                np.testing.assert_array_equal(_leaf(ours, key), theirs, err_msg=str(key))
            else:
                np.testing.assert_allclose(_leaf(ours, key), theirs, rtol=1e-5, atol=1e-5, err_msg=str(key))


def test_functional_state_carries_the_torch_envs_keys_and_step_counts(autoreset_runs):
    """After the same steps, the functional state holds what the torch env keeps per env: its carried key (the
    same chain of splits at every reset and random step) and its steps since the last reset."""
    env, state = autoreset_runs["env"], autoreset_runs["state"]
    np.testing.assert_array_equal(np.asarray(state.key), np.asarray(env._executor.carried()[1]))
    np.testing.assert_array_equal(np.asarray(state.steps), env._executor.step_counts().numpy())



def test_split_key_is_jax_random_split_bit_for_bit():
    """The core splits keys with the written-out Threefry hash (JAX's CPU lowering of it is a loop): the same bits as
    ``jax.random.split``, for random keys and the edge values of both words."""
    from marl_envs.backends.jax import split_key

    edges = [[0, 0], [0xFFFFFFFF, 0xFFFFFFFF], [0, 1], [1, 0], [2**31, 5], [7, 2**32 - 2]]
    keys = jnp.concatenate([jnp.asarray(edges, jnp.uint32), jax.random.randint(
        jax.random.PRNGKey(1), (500, 2), 0, 2**31 - 1).astype(jnp.uint32)])
    kept, now = jax.jit(jax.vmap(split_key))(keys)
    pairs = jax.vmap(jax.random.split)(keys)
    np.testing.assert_array_equal(np.asarray(kept), np.asarray(pairs[:, 0]))
    np.testing.assert_array_equal(np.asarray(now), np.asarray(pairs[:, 1]))
