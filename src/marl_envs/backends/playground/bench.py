"""The MuJoCo Playground reference loops of ``marl_envs.bench``: the Brax backend's loops (``backends.brax.bench``) over
Playground's own training stack, ``wrap_for_brax_training`` (its vmap, episode counter and auto-reset), instead of
Brax's: what a Playground user's Python loop runs, the bare env with no resets, and a ``lax.scan`` rollout."""

from __future__ import annotations


from ._env import PlaygroundEnv, import_playground
from ...bench import References
from ..brax.bench import reference_loops
from ...bench.jax import core_timings


def _playground_wrap(env, episode_length: int):
    import_playground()
    from mujoco_playground import wrapper

    return wrapper.wrap_for_brax_training(env, episode_length=episode_length)


def _playground_loops(env: PlaygroundEnv, plan, chunks):
    return reference_loops(env, plan, chunks, wrap=_playground_wrap, library="Playground")


BENCH = References(default_num_envs=128, loops=_playground_loops, timings=core_timings)
