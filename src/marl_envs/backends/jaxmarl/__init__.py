"""JaxMARL backend: every JaxMARL env that runs on the installed JAX, by name, through the one JAX
path (``backends.jax``).

>>> import marl_envs
>>> env = marl_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=8)
>>> env.group_map
{'agents': ['agent_0', 'agent_1', 'agent_2']}

The keys (SMAX's teams are the groups ``ally`` and ``enemy``, its win is ``(group, "info", "won")``, its
``world_state`` the root ``"state"``), how ``truncated`` is derived (JaxMARL has no such flag) and each env's time
limit: the JaxMARL page of the docs (``docs/backends/jaxmarl.md``).
"""

from ...registry import Backend

BACKEND = Backend(__name__, packages=("jax", "jaxmarl"), extra="jaxmarl", env_class="JaxMarlEnv",
                  check_env=("jaxmarl/MPE_simple_spread_v3", {}), host_wait=True, check=f"{__name__}._library:check",
                  counterpart=f"{__name__}._library:counterpart", title="JaxMARL", distributions=("jaxmarl", "jax"),
                  builds_on=("jax",))
__getattr__, __dir__ = BACKEND.lazy_attributes()
