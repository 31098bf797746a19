"""PettingZoo backend: ``num_envs`` PettingZoo instances, parallel or turn-based (AEC), behind one batch dim.

>>> import marl_envs
>>> env = marl_envs.make("pettingzoo/mpe/simple_spread_v3", num_envs=2, N=3, seed=0)
>>> env.reset()["agents", "observation"].shape
torch.Size([2, 3, 18])

PettingZoo is Python, so a step loops over the instances; each instance's results are written into numpy
buffers that become tensors once per step (``torch.from_numpy``, no per-agent tensors).
"""

from ...registry import Backend

BACKEND = Backend(__name__, packages=("pettingzoo",), extra="pettingzoo", env_class="PettingZooEnv",
                  check_env=("pettingzoo/mpe/simple_spread_v3", {}),
                  example=("pettingzoo/mpe/simple_spread_v3", {"N": 2, "render_mode": "rgb_array"}), exports=("PettingZooEnv", "PettingZooWrapper"),
                  title="PettingZoo", distributions=("pettingzoo", "mpe2", "pygame-ce"))


def family_record(module: str, library: str, *, env_class: str, check_env: tuple, title: str,
                  distributions: tuple[str, ...], bench: str = "marl_envs.backends.pettingzoo.bench",
                  docs: str = "backends/cpu_families.md", example: tuple | None = None) -> Backend:
    """The record of a family whose envs run as PettingZoo instances in this package's shards (MAgent2, MaMuJoCo,
    LBF, RWARE, OpenSpiel): ``library`` is what it imports beside PettingZoo, its extra the family's name, its
    reference loops PettingZoo's unless ``bench`` names others, its docs the CPU families' page unless ``docs``."""
    return Backend(module, packages=("pettingzoo", library), extra=module.rpartition(".")[2], env_class=env_class,
                   check_env=check_env, bench=bench, title=title, distributions=distributions,
                   docs=docs, builds_on=("pettingzoo",), example=example)


#: What the families built on PettingZoo's machinery take from it (OpenSpiel, MAgent2, MaMuJoCo, LBF, RWARE; Melting
#: Pot its worker pool).
__getattr__, __dir__ = BACKEND.lazy_attributes({
    "._gymnasium": ("TupleAgentsFamily", "raw_env"),
    "._shard": ("BatchFacts", "Buffers", "StepArrays", "Shard", "batch_index", "state_of"),
    "._spaces": ("ACTION_MASK",),
    "._tasks": ("builds",),
    "._workers": ("DEFAULT_TIMEOUT_S", "PooledEnv", "WorkerPool", "shared_zeros"),
})
