"""MuJoCo Playground backend: its DM Control suite by name, and its robots split into agents.

>>> import marl_envs
>>> env = marl_envs.make("playground/CheetahRun", num_envs=8)
>>> split = marl_envs.make("playground/WalkerWalk_2x3", num_envs=8)
>>> split.group_map
{'agents': ['agent_0', 'agent_1']}

Playground's envs keep Brax's interface (``reset(rng)``, ``step(state, action)``, a ``State`` of ``obs``,
``reward``, ``done``, ``metrics``, ``info``) over MJX physics, so they run through the Brax backend's
``BraxWrapper`` and its JAX model: the single-agent layout of ``brax/ant`` for ``playground/<Env>``, the
multi-agent layout of the Brax scenes (per-agent observations, the robot's reward per agent, the full observation
as the root ``state``) for ``playground/<Env>_<split>``.

**Which envs.** The DM Control suite (``registry.dm_control_suite.ALL_ENVS``), built with MJX's JAX
implementation (``impl="jax"``): the JAX model vmaps one env, which MuJoCo Warp's data layout (Playground's
default ``impl="warp"``, its GPU kernels) does not allow. The locomotion and manipulation suites are not offered:
building one clones the ``mujoco_menagerie`` model repository with ``git``: marl-envs downloads nothing at run time.

**Splits.** ``Cheetah*`` (one agent per joint), ``Hopper*`` (one per joint), ``Walker*`` (one per leg) and
``Humanoid*`` (upper body and legs) are split by the Brax scenes' rules (``backends.brax.scenes``: agents partition
the actuated joints, found from the MuJoCo model); the name's suffix counts the agents' joints (``_6x1``,
``_4x1``, ``_2x3``, ``_9-12``). What each agent observes is derived from the model and the env's own
observation function, not from a table: moving each joint's ``qpos`` and ``qvel`` entries (at two random states)
and reading ``_get_obs`` tells on which joints each observation entry depends; an agent observes the entries that depend
only on the root's joints, its own, their neighbours (joints touching a common body) and the joints its bodies
hang from (a foot's touch sensor depends on the whole leg), and the entries that depend on no joint (targets).
Episodes last the config's ``episode_length`` (1000 in the DM Control suite), Playground's own time limit (its
training wrapper ends episodes there): it is the env's ``max_steps``; a shorter one is taken, a longer one refused
(``config={"episode_length": N}`` changes it).
"""

from ...registry import Backend

# the doctor's check env: MJX, about a minute of compiling on a CPU, once
BACKEND = Backend(__name__, packages=("jax", "brax", "mujoco_playground"), extra="playground",
                  env_class="PlaygroundEnv", check_env=("playground/CartpoleBalance", {}),
                  host_wait=True,  # CartpoleBalance never waits (only CheetahRun does, by design: SETTLING_RESETS)
                  title="MuJoCo Playground", distributions=("playground", "brax", "jax", "mujoco", "mujoco-mjx"),
                  builds_on=("jax", "brax"))
__getattr__, __dir__ = BACKEND.lazy_attributes()
