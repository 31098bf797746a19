"""Jumanji backend: Jumanji's multi-agent envs by name, through the one JAX path (``backends.jax``).

>>> import marl_envs
>>> env = marl_envs.make("jumanji/LevelBasedForaging-v0", num_envs=8)
>>> env.group_map
{'agents': ['agent_0', 'agent_1']}

Jumanji's observations are structured (a NamedTuple of arrays, some per agent, some shared). They are kept
structured, not flattened. For the group ``g`` of ``n`` agents (one group: Jumanji's agents are alike):

=================================== =============== ================================================================
key                                 shape           from Jumanji
=================================== =============== ================================================================
``(g, "observation", field, ...)``  ``(B, n, *o)``  each per-agent field of the observation (``agents_view``,
                                                    ``vehicles.coordinates``, ...), float32
``(g, "action_mask")``              ``(B, n, k)``   the observation's ``action_mask``, bool (``rand_action`` honours
                                                    it)
``field`` (root, nested as Jumanji) ``(B, *o)``     each shared field (``grid``, ``step_count``, ``nodes.demands``),
                                                    in Jumanji's dtype (a grid every agent sees: not copied per agent)
``(g, "action")``                   ``(B, n)``      ``Categorical`` (SearchAndRescue: ``(B, n, 2)`` ``Bounded``)
``("next", g, "reward")``           ``(B, n, 1)``   the agent's reward; a team reward (a scalar in Jumanji): every
                                                    agent's
``(g, "info", name)``               ``(B, n, 1)``   each of the ``TimeStep``'s extras (``percent_eaten``, ...), float32
``(g, "terminated")``               ``(B, n, 1)``   Connector only: the agent connected or is blocked (discount 0)
=================================== =============== ================================================================

Which fields are per agent is ``PER_AGENT``'s table (a shape cannot tell: Connector's 10 x 10 grid has 10 agents).
Ends come from the ``TimeStep``: an episode ends on its ``LAST`` step; Jumanji's ``truncation`` keeps the discount
above 0 (a time limit) and its ``termination`` sets it to 0, so ``truncated`` is a last step with some discount
left and ``terminated`` the other last steps. Four envs (Cleaner, MMST, RobotWarehouse, SearchAndRescue) end their
``time_limit`` with a ``termination``: a last step at which the state's step count has reached the env's
``time_limit`` is ``truncated`` (and not ``terminated``) in these four, as a value target must bootstrap there; a
true terminal state on that very step is reported ``truncated`` only (Jumanji's flags cannot tell the two apart
there). LevelBasedForaging and Connector end their limit with a ``truncation``, so a termination on that step is a
true terminal state: ``terminated``, and ``truncated`` (the time limit) too.

**Time limit.** The env's ``time_limit`` is its ``max_steps``: every env counts the step before testing
``step_count >= time_limit`` (SearchAndRescue: ``step``), so an episode lasts ``time_limit`` env steps
(``time_limit=N`` changes it); a shorter ``max_steps`` is taken, a longer one refused. MultiCVRP has no time limit
(``max_steps`` None): its episodes end within ``2 * num_customers`` steps, where Jumanji ends an unfinished tour
with the worst-case remaining cost charged, a ``termination`` (``max_episode_length`` is that bound).

The step is Jumanji's ``step`` (no auto-reset: the terminal
observation stays in ``next``); the envs that are done are reset by the model's masked reset. Jumanji keeps its
random key in the state, so a step draws no key of ours.

Integer fields travel through the model's float32 buffer, exact for values below 2**24 (grids, counts, indices).
"""

from ...registry import Backend

BACKEND = Backend(__name__, packages=("jax", "jumanji"), extra="jumanji", env_class="JumanjiEnv",
                  check_env=("jumanji/LevelBasedForaging-v0", {}), example=("jumanji/Cleaner-v0", {}), host_wait=True,
                  title="Jumanji", distributions=("jumanji", "jax"), builds_on=("jax",))
__getattr__, __dir__ = BACKEND.lazy_attributes()
