"""Brax backend: every Brax env by name, multi-agent splits of Brax robots, differentiable rollouts.

>>> import marl_envs
>>> env = marl_envs.make("brax/ant_4x2", num_envs=8, backend="spring")
>>> env.group_map
{'agents': ['agent_0', 'agent_1', 'agent_2', 'agent_3']}

Single-agent envs (``brax/ant``, a ``BraxWrapper`` without indices) keep TorchRL's ``BraxWrapper`` layout:

====================== ================== ==========================================================
key                    shape              spec
====================== ================== ==========================================================
``observation``        ``(B, obs)``       ``Unbounded`` float32 (a nested Composite for dict observations)
``action``             ``(B, act)``       ``Bounded(-1, 1)`` float32 (Brax clips to each actuator's range)
``("next", "reward")`` ``(B, 1)``         ``Unbounded`` float32
====================== ================== ==========================================================

A multi-agent split (the scenes ``brax/ant_4x2``, ``brax/halfcheetah_6x1``, ``brax/hopper_3x1``,
``brax/walker2d_2x3``, ``brax/humanoid_9-8``, or ``action_indices`` / ``observation_indices``) gives, for a group
``g`` of ``n`` agents:

========================= ================== ===============================================================
key                       shape              spec
========================= ================== ===============================================================
``(g, "observation")``    ``(B, n, m)``      ``Unbounded`` float32; ``m`` = the group's largest agent, the
                                             others zero-padded at the end
``(g, "action")``         ``(B, n, d)``      ``Bounded(-1, 1)`` float32, scattered into the robot's action
``("next", g, "reward")`` ``(B, n, 1)``      ``Unbounded`` float32, the robot's reward copied per agent
``state``                 ``(B, obs)``       ``Unbounded`` float32, the robot's full observation
========================= ================== ===============================================================

``done`` / ``terminated`` / ``truncated`` ``(B, 1)`` sit at the root. The Brax env's ``done`` is ``terminated``
(a ``truncation`` info, as ``EpisodeWrapper`` writes, is ``truncated``); ``max_steps`` (counted in env steps,
each ``frame_skip`` Brax steps) is ``truncated``.

**Time limit.** Brax's envs by name (``brax.envs.get_environment``) have no time limit of their own: Brax puts one
on in ``brax.envs.create``'s ``EpisodeWrapper``, of ``episode_length=1000`` by default, and ``BraxEnv``'s
``max_steps`` defaults to the same 1000 (any other, or None, is taken). A ``BraxWrapper`` over an env in an
``EpisodeWrapper`` takes that wrapper's limit as its ``max_steps`` (``episode_length`` Brax steps, in env steps of
``action_repeat * frame_skip``); a shorter one is taken, a longer one refused.

**Speed.** The Brax state stays in JAX, packed into one buffer per dtype. Each ``step`` is one compiled
``jit(vmap(...))`` call (agent scatter/gather, ``frame_skip`` via ``lax.scan``, the done entries, the time limit);
``step_and_maybe_reset`` adds to that call a fresh random start for every env, kept where the episode ended (Brax's
``AutoResetWrapper`` replays one cached start instead). The state buffers are donated. The outputs come back as one
buffer per dtype that torch reads as views (``backends.jax``'s executor): on the CPU through one NumPy copy, on a
GPU by zero-copy DLPack, never waiting for the device. JAX caches are never cleared on the hot path. ``marl-envs
bench brax/<name>`` compares with pure JAX.

**Compile once.** JAX's persistent compilation cache is switched on when the first env is built, in
``$MARL_ENVS_JAX_CACHE_DIR`` (default ``${XDG_CACHE_HOME:-~/.cache}/marl_envs/jax``; compilations over 0.2 s
are kept), unless JAX already has a cache directory (``JAX_COMPILATION_CACHE_DIR``) or ``MARL_ENVS_JAX_CACHE=0``
opts out. An env built by name (``BraxEnv``, ``make("brax/...")``) also saves its traced reset and step as
``jax.export`` modules in that directory's ``marl_envs-exported/`` folder; a later process building it with the
same arguments loads them and finds their compiled code in JAX's cache, so it neither imports Brax nor traces
(``benchmarks/compile_once.py`` measures it; ``_exports`` says what the saved files are keyed on). The modules take
any ``num_envs``; XLA compiles them once for each batch size (static shapes), and the cache keeps each.

**Rendering** uses MuJoCo's renderer; on a Linux machine without a display but with EGL's library, ``MUJOCO_GL=egl``
is set before MuJoCo is first imported by this backend (unless MUJOCO_GL is set or MuJoCo was already imported). EGL
needs the Debian packages ``libegl1 libegl-mesa0 libgl1-mesa-dri`` (software rendering, no GPU needed);
``MUJOCO_GL=osmesa`` needs ``libosmesa6``. That and the ``jnp.clip`` shim for ``swimmer`` are applied when the first
Brax env is built, never at import (``_compat``).

Brax's ``brax/envs`` is no longer maintained upstream; the construction-time ``UserWarning`` Brax emits about
it is silenced here (only that one).
"""

from ...registry import Backend

BACKEND = Backend(__name__, packages=("jax", "brax"), extra="brax", env_class="BraxEnv",
                  check_env=("brax/fast", {}),
                  example=("brax/ant_4x2", {"backend": "spring"}), exports=("BraxEnv", "BraxWrapper"), host_wait=True,
                  check=f"{__name__}._library:check",
                  title="Brax", distributions=("brax", "jax", "mujoco"), builds_on=("jax",))
__getattr__, __dir__ = BACKEND.lazy_attributes()
