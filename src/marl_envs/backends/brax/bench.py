"""The Brax reference loops of ``marl_envs.bench``: pure JAX, the fastest honest way to step the same robot.

Every loop steps the robot with the same actions as ours (``BraxEnv.robot_action`` of each step's plan), put on
the JAX device and split into one array per step beforehand, so that a step is one dispatch (indexing a stacked
array per step would add one). The state never leaves JAX; a scene runs the whole robot, so the agent split is
part of what ours pays for.

- ``jit(vmap(step))`` of Brax's own ``VmapWrapper`` + ``EpisodeWrapper`` + ``AutoResetWrapper`` stack
  (``training.wrap``): what a Brax user's Python loop runs, with auto-reset;
- the same compiled step driven from torch (``BridgeLoop``): each action from a torch tensor, the observation,
  reward and done handed to torch, as a torch learner's own bridge to Brax does;
- ``jit(vmap(env.step))`` of the bare env: no episode counting, no resets (less work than ours: the floor of a
  Python loop);
- ``lax.scan`` over each chunk of the auto-reset stack: the limit, no Python per step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import jax
import torch
from tensordict import TensorDictBase

from ._env import BraxEnv, import_brax
from ..jax import quiet_tracing
from ...distributed import jax_device
from ...bench import Loop, References
from ...bench.jax import BridgeLoop, JaxLoop, ScanLoop, compile_step, core_timings


def _brax_training_wrap(env, episode_length: int):
    from brax.envs.wrappers import training

    return training.wrap(env, episode_length=episode_length)


def reference_loops(env: BraxEnv, plan: Sequence[TensorDictBase], chunks: Sequence[range], *,
                    wrap=_brax_training_wrap, library: str = "Brax") -> tuple[dict[str, Loop], dict[str, float]]:
    """The loops over ``wrap(env.brax_env, episode_length)``: the library's own batched auto-reset stack."""
    import_brax()  # quietly, first (an env loaded from its export has not imported Brax)
    device = jax_device(env.device)
    robot = [env.robot_action(td) for td in plan]
    flat = torch.stack(robot).cpu().numpy()
    actions = [jax.device_put(a, device) for a in flat]  # one array per step: one dispatch per step
    stacked = {(r.start, r.stop): jax.device_put(flat[r.start:r.stop], device) for r in chunks}
    raw = wrap(env.brax_env, episode_length=env.max_steps or 1000)
    keys = jax.random.split(jax.random.PRNGKey(0), env.num_envs)

    def rollout(state, chunk):
        return jax.lax.scan(lambda s, a: (raw.step(s, a), None), state, chunk)[0]

    compile_seconds = {}
    with quiet_tracing():
        wrapped_state = jax.jit(raw.reset)(keys)
        bare_state = jax.jit(jax.vmap(env.brax_env.reset))(keys)
        wrapped, compile_seconds["pure JAX loop: compile step"] = compile_step(raw.step, wrapped_state, actions[0])
        bare, compile_seconds["pure JAX bare loop: compile step"] = compile_step(
            jax.vmap(env.brax_env.step), bare_state, actions[0])
        scans = {}
        start = time.perf_counter()
        for chunk in stacked.values():  # one compilation per chunk length
            if chunk.shape[0] not in scans:
                scans[chunk.shape[0]] = jax.jit(rollout).trace(wrapped_state, chunk).lower().compile()
        compile_seconds["lax.scan: compile rollout"] = time.perf_counter() - start
        scan_state = jax.jit(raw.reset)(keys)
        bridged_state = jax.jit(raw.reset)(keys)  # each loop donates its own
    return {
        f"pure JAX: jit(vmap(step)) Python loop, {library} auto-reset": JaxLoop(wrapped, wrapped_state, actions),
        "pure JAX, the same step from torch: actions in, observation, reward, done out": BridgeLoop(
            wrapped, bridged_state, robot, lambda s: jax.tree.leaves((s.obs, s.reward, s.done)), env.device),
        "pure JAX: jit(vmap(env.step)) Python loop, bare env, no resets": JaxLoop(bare, bare_state, actions),
        "pure JAX: lax.scan rollout (the limit)": ScanLoop(lambda s, c: scans[c.shape[0]](s, c), scan_state, stacked),
    }, compile_seconds


BENCH = References(default_num_envs=128, loops=reference_loops, timings=core_timings)
