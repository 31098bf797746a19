"""MuJoCo Playground backend: its DM Control suite by name, and its robots split into agents.

>>> import marl_envs
>>> env = marl_envs.make("playground/CheetahRun", num_envs=8)
>>> split = marl_envs.make("playground/WalkerWalk_2x3", num_envs=8)
>>> split.group_map
{'agents': ['agent_0', 'agent_1']}

Playground's envs keep Brax's interface, so they run through the Brax backend's ``BraxWrapper``, with
``brax/ant``'s layout for ``playground/<Env>`` and the Brax scenes' for ``playground/<Env>_<split>``. Which envs
(MJX's ``impl="jax"``; not the suites that download a model repository), how a split's observations are derived
from the model, and the time limit: the MuJoCo Playground page of the docs (``docs/backends/playground.md``).
"""

from ...registry import Backend

# the doctor's check env: MJX, about a minute of compiling on a CPU, once
BACKEND = Backend(__name__, packages=("jax", "brax", "mujoco_playground"), extra="playground",
                  env_class="PlaygroundEnv", check_env=("playground/CartpoleBalance", {}),
                  host_wait=True,  # CartpoleBalance never waits (only CheetahRun does, by design: SETTLING_RESETS)
                  title="MuJoCo Playground", distributions=("playground", "brax", "jax", "mujoco", "mujoco-mjx"),
                  builds_on=("jax", "brax"))
__getattr__, __dir__ = BACKEND.lazy_attributes()
