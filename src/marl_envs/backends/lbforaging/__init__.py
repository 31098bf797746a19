"""Level-Based Foraging (``lbforaging``): the EPyMARL benchmark's foraging tasks, batched by the PettingZoo machinery.

>>> import marl_envs
>>> env = marl_envs.make("lbforaging/Foraging-8x8-2p-2f-coop-v3", num_envs=2, seed=0)
>>> env.reset()["agents", "observation"].shape
torch.Size([2, 2, 12])

Every id of the library's Gymnasium registry builds by name (``Foraging-<size>x<size>-<players>p-<foods>f[-coop]
-v3``, ``-2s`` for sight 2, 1920 of them); ``env_names()`` lists the tasks of the EPyMARL benchmark (Papoudakis et
al., 2021) that the registry has. An episode *terminates* when every food has been collected and is *truncated*
at ``max_episode_steps`` (50; ``env.max_steps``, lengthened by ``max_episode_steps=N``): the library's own
``truncated`` is always False. A seeded reset gives what a fresh env gives with that seed (the library's own
``reset(seed=...)`` also depends on where the players stood at the end of the last episode); unseeded resets are
the library's.
"""

from ..pettingzoo import family_record

BACKEND = family_record(__name__, "lbforaging", env_class="LBForagingEnv",
                        check_env=("lbforaging/Foraging-8x8-2p-2f-coop-v3", {}),
                        example=("lbforaging/Foraging-5x5-2p-1f-v3", {"render_mode": "rgb_array"}),
                        title="Level-Based Foraging", distributions=("lbforaging", "pettingzoo", "pyglet"),
                        bench="marl_envs.backends.pettingzoo.bench:TUPLE_AGENTS")
__getattr__, __dir__ = BACKEND.lazy_attributes()
