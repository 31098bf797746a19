"""The multi-robot warehouse (``rware``): the EPyMARL benchmark's warehouse tasks, batched by the PettingZoo
machinery.

>>> import marl_envs
>>> env = marl_envs.make("rware/rware-tiny-2ag-v2", num_envs=2, seed=0)
>>> env.reset()["agents", "observation"].shape
torch.Size([2, 2, 71])

Every id of the library's Gymnasium registry builds by name (``rware-<size>-<n>ag[-easy|-hard]-v2`` and the
image-observation variants, 228 of them); ``env_names()`` lists the tasks of the EPyMARL benchmark (Papoudakis et
al., 2021). RWARE has no goal state: an episode only stops at its step limit (``max_steps``, 500) or, where set,
after ``max_inactivity_steps`` without a delivery, so every end is *truncated* (the library's own ``truncated`` is
always False). RWARE's step limit and the env's ``max_steps`` are one keyword: ``max_steps=N`` sets both.
"""

from ..pettingzoo import family_record

BACKEND = family_record(__name__, "rware", env_class="RwareEnv", check_env=("rware/rware-tiny-2ag-v2", {}),
                        example=("rware/rware-tiny-2ag-v2", {"render_mode": "rgb_array"}),
                        title="RWARE", distributions=("rware", "pettingzoo", "pyglet"),
                        bench="marl_envs.backends.pettingzoo.bench:TUPLE_AGENTS")
__getattr__, __dir__ = BACKEND.lazy_attributes()
