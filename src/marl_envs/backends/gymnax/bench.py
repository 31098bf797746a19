"""The gymnax reference loops of ``marl_envs.bench``: gymnax's own auto-resetting ``step``, ``jit(vmap(...))``,
in a Python loop over the same actions and per-env keys, split into one array per step beforehand (one dispatch
per step). Its carry holds everything a step returns. A second loop drives the same compiled step from torch, as a
torch learner's own bridge to gymnax does (``BridgeLoop``: each action from a torch tensor, the observation, reward
and done handed to torch)."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import torch
from tensordict import TensorDictBase

from ._env import GymnaxEnv
from ...distributed import jax_device
from ...bench import Loop, References
from ...bench.jax import BridgeLoop, JaxLoop, compile_step, core_timings


def _loops(env: GymnaxEnv, plan: Sequence[TensorDictBase], chunks: Sequence[range]
           ) -> tuple[dict[str, Loop], dict[str, float]]:
    raw, params, B = env.gymnax_env, env.env_params, env.num_envs
    device = jax_device(env.device)
    discrete = type(raw.action_space(params)).__name__ == "Discrete"
    keys = jax.random.split(jax.random.PRNGKey(1), len(plan) * B).reshape(len(plan), B, 2)
    actions = [td["action"].to(torch.int32) if discrete else td["action"] for td in plan]  # as the step takes them
    inputs = [jax.device_put((keys[t], a.cpu().numpy()), device) for t, a in enumerate(actions)]

    def step(carry, inp):
        key, action = inp
        return jax.vmap(raw.step, in_axes=(0, 0, 0, None))(key, carry[1], action, params)[:4]

    obs, state = jax.jit(jax.vmap(raw.reset, in_axes=(0, None)))(jax.random.split(jax.random.PRNGKey(0), B), params)
    shapes = jax.eval_shape(step, (obs, state), inputs[0])
    carry = (obs, state, *(jnp.zeros(s.shape, s.dtype) for s in shapes[2:]))
    bridged = jax.tree.map(jnp.copy, carry)  # each loop donates its own
    compiled, seconds = compile_step(step, carry, inputs[0])
    return {
        "pure JAX: jit(vmap(env.step)) Python loop, gymnax auto-reset": JaxLoop(compiled, carry, inputs),
        "pure JAX, the same step from torch: actions in, observation, reward, done out": BridgeLoop(
            compiled, bridged, actions, lambda c: (c[0], c[2], c[3]), env.device, [key for key, _ in inputs]),
    }, {"pure JAX loop: compile step": seconds}


BENCH = References(default_num_envs=1024, loops=_loops, timings=core_timings)
