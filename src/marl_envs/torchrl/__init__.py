"""Use any marl-envs env from TorchRL: collectors, transforms, batched envs and losses.

``to_torchrl(env)`` wraps a marl-envs env (a built-in backend's or a user's env on the ``EnvBase`` hook) in
``TorchRLEnv``, a ``torchrl.envs.EnvBase``. It has the same keys, group map, batch size ``(num_envs,)`` and
device; its specs are the env's, converted to ``torchrl.data`` classes. Steps and resets are handed to the
wrapped env as they come: the TensorDicts pass through, and TorchRL's ``_reset`` entries (root or per group)
reach the env's vectorized partial reset.

Needs the ``torchrl`` extra (``pip install 'marl-envs[torchrl]'``; TorchRL 0.14 runs on tensordict 0.14).
``import marl_envs`` never imports TorchRL; importing this module does.

>>> import marl_envs
>>> from marl_envs.torchrl import to_torchrl
>>> env = to_torchrl(marl_envs.make("vmas/balance", num_envs=4, n_agents=3))
>>> env.rollout(5, break_when_any_done=False)["next", "agents", "reward"].shape
torch.Size([4, 5, 3, 1])
"""

from ._adapter import COLLECTOR_KWARGS, TorchRLEnv, check_batch_size, to_torchrl, to_torchrl_spec
from ._classes import (
    BraxEnv,
    BraxWrapper,
    JumanjiEnv,
    LBForagingEnv,
    LBForagingWrapper,
    MeltingpotEnv,
    MeltingpotWrapper,
    OpenSpielEnv,
    OpenSpielWrapper,
    PettingZooEnv,
    PettingZooWrapper,
    VmasEnv,
    VmasWrapper,
)
from ._playground import MujocoPlaygroundEnv

__all__ = ["COLLECTOR_KWARGS", "BraxEnv", "BraxWrapper", "JumanjiEnv", "LBForagingEnv", "LBForagingWrapper",
           "MeltingpotEnv", "MeltingpotWrapper", "MujocoPlaygroundEnv", "OpenSpielEnv", "OpenSpielWrapper",
           "PettingZooEnv", "PettingZooWrapper",
           "TorchRLEnv", "VmasEnv", "VmasWrapper", "check_batch_size", "to_torchrl", "to_torchrl_spec"]
