"""The Jumanji reference loop of ``marl_envs.bench``: Jumanji's own ``VmapAutoResetWrapper`` step (its batched
``step`` with the auto-reset of the envs that end), jitted, in a Python loop over the same actions, put on the
JAX device in Jumanji's layout and split into one array per step beforehand, so that a step is one dispatch. Its
carry is the wrapper's state and ``TimeStep`` (observations, masks, rewards, discounts, extras), as a training
loop reads them. Both loops step the plan's actions as they are, illegal ones included (Jumanji's envs take any
action in range), and so does ours (``legal_actions=False``, with no action check)."""

from __future__ import annotations

from collections.abc import Sequence

import jax
from tensordict import TensorDictBase

from ._env import JumanjiEnv, import_jumanji
from ...distributed import jax_device
from ...bench import Loop, References
from ...bench.jax import compiled_loop, core_timings


def _loops(env: JumanjiEnv, plan: Sequence[TensorDictBase], chunks: Sequence[range]
           ) -> tuple[dict[str, Loop], dict[str, float]]:
    import_jumanji()
    from jumanji.wrappers import VmapAutoResetWrapper

    raw = VmapAutoResetWrapper(env.jumanji_env)
    device = jax_device(env.device)
    inputs = [jax.device_put(env.jumanji_action(td), device) for td in plan]

    def step(carry, action):
        return raw.step(carry[0], action)

    carry = jax.jit(raw.reset)(jax.random.split(jax.random.PRNGKey(0), env.num_envs))
    return compiled_loop("pure JAX: jit(VmapAutoResetWrapper.step) Python loop, Jumanji auto-reset", step, carry,
                         inputs)


BENCH = References(default_num_envs=1024, loops=_loops, timings=core_timings, legal_actions=False)
