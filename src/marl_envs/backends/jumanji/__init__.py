"""Jumanji backend: Jumanji's multi-agent envs by name, through the one JAX path (``backends.jax``).

>>> import marl_envs
>>> env = marl_envs.make("jumanji/LevelBasedForaging-v0", num_envs=8)
>>> env.group_map
{'agents': ['agent_0', 'agent_1']}

Observations stay structured, as Jumanji's NamedTuples: per-agent fields under ``(group, "observation", ...)``,
shared ones at the root. The keys, how ``terminated`` and ``truncated`` are read from a ``TimeStep`` and each env's
time limit: the Jumanji page of the docs (``docs/backends/jumanji.md``).
"""

from ...registry import Backend

BACKEND = Backend(__name__, packages=("jax", "jumanji"), extra="jumanji", env_class="JumanjiEnv",
                  check_env=("jumanji/LevelBasedForaging-v0", {}), example=("jumanji/Cleaner-v0", {}), host_wait=True,
                  title="Jumanji", distributions=("jumanji", "jax"), builds_on=("jax",))
__getattr__, __dir__ = BACKEND.lazy_attributes()
