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

How a step runs, the compilation cache and the saved ``jax.export`` modules, rendering and the known limits:
the Brax page of the docs (``docs/backends/brax.md``).
"""

from ...registry import Backend

BACKEND = Backend(__name__, packages=("jax", "brax"), extra="brax", env_class="BraxEnv",
                  check_env=("brax/fast", {}),
                  example=("brax/ant_4x2", {"backend": "spring"}), exports=("BraxEnv", "BraxWrapper"), host_wait=True,
                  check=f"{__name__}._library:check",
                  title="Brax", distributions=("brax", "jax", "mujoco"), builds_on=("jax",))
__getattr__, __dir__ = BACKEND.lazy_attributes()
