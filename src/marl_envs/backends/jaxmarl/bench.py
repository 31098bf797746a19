"""The JaxMARL reference loop of ``marl_envs.bench``: JaxMARL's own auto-resetting ``step``, ``jit(vmap(...))``,
in a Python loop over the same actions (per-agent dicts) and per-env keys, both split into one array per step
beforehand, so that a step is one dispatch. Its carry holds everything a step returns (state, observations,
rewards, dones), as a training loop would read them. For envs with action masks (``get_avail_actions``) a
second loop also computes the masks every step, as a JaxMARL training loop on such an env does (JaxMARL's own
SMAX baselines call it every step). Both loops step the plan's actions as they are, illegal ones included (SMAX
takes any action), and so does ours (``legal_actions=False``, with no action check): the same work on both
sides."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from tensordict import TensorDictBase

from ._env import JaxMarlEnv
from ...distributed import jax_device
from ...bench import Loop, References
from ...bench.jax import compiled_loop, core_timings


def _loops(env: JaxMarlEnv, plan: Sequence[TensorDictBase], chunks: Sequence[range]
           ) -> tuple[dict[str, Loop], dict[str, float]]:
    raw, B = env.jaxmarl_env, env.num_envs
    device = jax_device(env.device)
    discrete = {a: type(raw.action_space(a)).__name__ != "Box" for a in raw.agents}
    inputs = []
    keys = jax.random.split(jax.random.PRNGKey(1), len(plan) * B).reshape(len(plan), B, 2)
    for t, td in enumerate(plan):
        actions = {}
        for group, members in env.group_map.items():
            value = td[group, "action"].cpu().numpy()
            for j, agent in enumerate(members):
                actions[agent] = value[:, j].astype("int32") if discrete[agent] else value[:, j]
        inputs.append(jax.device_put((keys[t], actions), device))

    def step(carry, inp):
        key, actions = inp
        obs, state, reward, dones, _ = jax.vmap(raw.step)(key, carry[1], actions)
        return obs, state, reward, dones

    obs, state = jax.jit(jax.vmap(raw.reset))(jax.random.split(jax.random.PRNGKey(0), B))
    carry = jax.eval_shape(step, (obs, state, None, None), inputs[0])
    carry = (obs, state, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), carry[2]),
             jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), carry[3]))
    loops, seconds = compiled_loop("pure JAX: jit(vmap(env.step)) Python loop, JaxMARL auto-reset", step, carry,
                                   inputs)
    if ("agents", "action_mask") in env.observation_keys or any(
            isinstance(k, tuple) and k[-1] == "action_mask" for k in env.observation_keys):
        def masked(carry, inp):
            out = step(carry[:4], inp)
            return (*out, jax.vmap(raw.get_avail_actions)(out[1]))

        start = jax.tree.map(jnp.copy, (*carry, jax.vmap(raw.get_avail_actions)(state)))  # each loop donates its own
        more, more_seconds = compiled_loop("pure JAX: the same loop, plus get_avail_actions per step", masked, start,
                                           inputs)
        loops.update(more)
        seconds["pure JAX masked loop: compile step"] = more_seconds["pure JAX loop: compile step"]
    return loops, seconds


BENCH = References(default_num_envs=1024, loops=_loops, timings=core_timings, legal_actions=False)
