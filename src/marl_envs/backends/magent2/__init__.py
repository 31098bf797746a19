"""MAgent2: large teams on a grid (battle, pursuit, gathering), batched by the PettingZoo machinery.

>>> import marl_envs
>>> env = marl_envs.make("magent2/battle_v4", num_envs=2, map_size=20, seed=0)
>>> {group: len(agents) for group, agents in env.group_map.items()}
{'red': 12, 'blue': 12}

Names are MAgent2's modules (``magent2/battle_v4``; ``magent2/battle`` names the installed version). Agents die
mid-episode: the envs are built with ``use_mask=True`` (a dead agent's ``(group, "mask")`` is False, its entries
zeros, its reward zero, its ``terminated`` True and kept) and ``done_on_any=False`` (an episode ends when every
agent has, at ``max_cycles`` at the latest: ``env.max_steps``, *truncated*). The teams are groups (``red`` /
``blue``, ``predator`` / ``prey``, ..., by ``groupings.default_group_map``), ``return_state=True`` adds the map
(``env.state()``) at the root.
"""

from ..pettingzoo import family_record

BACKEND = family_record(__name__, "magent2", env_class="MAgent2Env", check_env=("magent2/battle", {"map_size": 12}),
                        example=("magent2/battle", {"map_size": 12, "render_mode": "rgb_array"}),
                        title="MAgent2", distributions=("magent2", "pettingzoo", "pygame-ce"))
__getattr__, __dir__ = BACKEND.lazy_attributes()
