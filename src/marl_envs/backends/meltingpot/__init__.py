"""Melting Pot: DeepMind's 2D social-dilemma substrates (49), pixels in, run by the PettingZoo machinery's workers.

>>> import marl_envs
>>> env = marl_envs.make("meltingpot/collaborative_cooking__asymmetric", num_envs=2, seed=0)
>>> env.reset()["agents", "observation", "RGB"].shape
torch.Size([2, 2, 40, 40, 3])

Every substrate of the installed ``dm-meltingpot`` builds by name; ``num_envs`` copies step in this process
(``num_workers=0``) or in worker processes, each building its own substrates (a substrate cannot be pickled).
Melting Pot is imported without TensorFlow (``_library``); scenarios (substrates with TensorFlow bots) are refused.
"""

from ..pettingzoo import family_record

BACKEND = family_record(__name__, "meltingpot", env_class="MeltingpotEnv",
                        check_env=("meltingpot/collaborative_cooking__asymmetric", {}), title="Melting Pot",
                        distributions=("dm-meltingpot", "dmlab2d"), bench="marl_envs.backends.meltingpot.bench",
                        docs="backends/meltingpot.md")
__getattr__, __dir__ = BACKEND.lazy_attributes()
