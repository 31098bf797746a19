"""OpenSpiel games, batched by the PettingZoo machinery: turn-based games through PettingZoo's AEC API,
simultaneous-move games through its parallel API.

>>> import marl_envs
>>> env = marl_envs.make("openspiel/kuhn_poker", num_envs=2, seed=0)
>>> env.group_map
{'agents': ['player_0', 'player_1']}
>>> env.reset()["agents", "action_mask"].shape
torch.Size([2, 2, 2])

Which games are offered (and why some are not), the keys, how chance nodes are drawn (seeded, as a raw ``pyspiel``
loop drawing with ``numpy.random.default_rng(seed)``) and how a horizon is told from a true end: the OpenSpiel
page of the docs (``docs/backends/openspiel.md``).
"""

from ..pettingzoo import family_record

BACKEND = family_record(__name__, "pyspiel", env_class="OpenSpielEnv", check_env=("openspiel/kuhn_poker", {}),
                        example=("openspiel/tic_tac_toe", {"render_mode": "rgb_array"}),
                        title="OpenSpiel", distributions=("open-spiel", "pettingzoo"), bench=f"{__name__}.bench",
                        docs="backends/openspiel.md")
__getattr__, __dir__ = BACKEND.lazy_attributes()
