"""The gymnax reference loop of ``marl_envs.bench``: gymnax's own auto-resetting ``step``, ``jit(vmap(...))``,
in a Python loop over the same actions and per-env keys, split into one array per step beforehand (one dispatch
per step). Its carry holds everything a step returns."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from tensordict import TensorDictBase

from ._env import GymnaxEnv
from ...distributed import jax_device
from ...bench import Loop, References
from ...bench.jax import compiled_loop, core_timings


def _loops(env: GymnaxEnv, plan: Sequence[TensorDictBase], chunks: Sequence[range]
           ) -> tuple[dict[str, Loop], dict[str, float]]:
    raw, params, B = env.gymnax_env, env.env_params, env.num_envs
    device = jax_device(env.device)
    discrete = type(raw.action_space(params)).__name__ == "Discrete"
    keys = jax.random.split(jax.random.PRNGKey(1), len(plan) * B).reshape(len(plan), B, 2)
    inputs = [jax.device_put((keys[t], td["action"].cpu().numpy().astype("int32") if discrete
                              else td["action"].cpu().numpy()), device) for t, td in enumerate(plan)]

    def step(carry, inp):
        key, action = inp
        return jax.vmap(raw.step, in_axes=(0, 0, 0, None))(key, carry[1], action, params)[:4]

    obs, state = jax.jit(jax.vmap(raw.reset, in_axes=(0, None)))(jax.random.split(jax.random.PRNGKey(0), B), params)
    shapes = jax.eval_shape(step, (obs, state), inputs[0])
    carry = (obs, state, *(jnp.zeros(s.shape, s.dtype) for s in shapes[2:]))
    return compiled_loop("pure JAX: jit(vmap(env.step)) Python loop, gymnax auto-reset", step, carry, inputs)


BENCH = References(default_num_envs=1024, loops=_loops, timings=core_timings)
