"""gymnax backend: gymnax's single-agent JAX envs by name, through the one JAX path (``backends.jax``).

>>> import marl_envs
>>> env = marl_envs.make("gymnax/CartPole-v1", num_envs=8)

Single-agent layout (as Brax's single-agent envs): ``observation`` ``(B, *o)`` float32, ``action`` ``(B,)``
``Categorical`` (``Discrete``) or ``(B, *a)`` ``Bounded`` (``Box``), ``("next", "reward")`` ``(B, 1)``.

The step is ``step_env`` (no auto-reset), so the terminal observation stays in ``next``. gymnax 1.0 keeps the
two ends apart: ``step_env``'s ``done`` is the natural end (``terminated``) and ``env.is_truncated(state,
params)`` its time limit (``state.time >= params.max_steps_in_episode``), reported as ``truncated`` unless the
episode also terminated on that step. ``params`` are the env's ``default_params``, with ``env_params={...}`` overriding fields.

**Time limit.** ``params.max_steps_in_episode`` is the env's ``max_steps``: gymnax counts ``state.time`` from 0 at
the reset and adds one each step before testing it, so an episode lasts that many env steps (Pendulum-v1: 200;
``env_params={"max_steps_in_episode": N}`` changes it). A shorter ``max_steps`` is taken, a longer one refused.
"""

from ...registry import Backend

BACKEND = Backend(__name__, packages=("jax", "gymnax"), extra="gymnax", env_class="GymnaxEnv",
                  check_env=("gymnax/CartPole-v1", {}), host_wait=True,
                  title="gymnax", distributions=("gymnax", "jax"), builds_on=("jax",))
__getattr__, __dir__ = BACKEND.lazy_attributes()
