"""MaMuJoCo (Gymnasium-Robotics' multi-agent MuJoCo): MuJoCo robots whose joints are split among agents, batched
by the PettingZoo machinery.

>>> import marl_envs
>>> env = marl_envs.make("mamujoco/HalfCheetah_2x3", num_envs=2, seed=0)
>>> env.reset()["agents", "observation"].shape
torch.Size([2, 2, 12])

Names are ``<robot>_<partition>``, MaMuJoCo's own partitions (``agent_conf``; its ``9|8`` is spelled ``9-8``, as
every split robot's name is). Keywords are MaMuJoCo's (``agent_obsk``, ``local_categories``, ...) and those of the
Gymnasium MuJoCo env under it (``ctrl_cost_weight``, ...), with ``max_episode_steps``. The episodes are Gymnasium's
(``-v5``): a robot that falls *terminates*, its time limit *truncates*: ``max_episode_steps`` steps (1000; Reacher
50, Pusher 100), which is ``env.max_steps``. ``return_state=True`` adds the robot's full observation at the root
(``env.state()``). Left out: ``ManySegmentAnt`` / ``ManySegmentSwimmer``, whose model file MaMuJoCo writes into its
own installed package at every build, and ``CoupledHalfCheetah_1p1``, which fails inside MaMuJoCo 1.4.2 when built
with MuJoCo 4 (``IndexError`` reading a tendon Jacobian in its observation code).
"""

from ..pettingzoo import family_record

BACKEND = family_record(__name__, "gymnasium_robotics", env_class="MaMuJoCoEnv",
                        check_env=("mamujoco/HalfCheetah_6x1", {}),
                        example=("mamujoco/Hopper_3x1", {"render_mode": "rgb_array"}), title="MaMuJoCo",
                        distributions=("gymnasium-robotics", "mujoco", "pettingzoo"))
__getattr__, __dir__ = BACKEND.lazy_attributes()
