"""JaxMARL backend: every JaxMARL env that runs on the installed JAX, by name, through the one JAX
path (``backends.jax``).

>>> import marl_envs
>>> env = marl_envs.make("jaxmarl/MPE_simple_spread_v3", num_envs=8)
>>> env.group_map
{'agents': ['agent_0', 'agent_1', 'agent_2']}

For a group ``g`` of ``n`` agents (the default grouping rule over the agents' specs; heterogeneous agents get
their own dense groups, never padding; ``SMAX``'s two teams are the groups ``ally`` and ``enemy``: one policy
playing both sides of a battle learns no skill, see the JaxMARL backend's page):

========================== =============== ===============================================================
key                        shape           spec
========================== =============== ===============================================================
``(g, "observation")``     ``(B, n, *o)``  ``Unbounded`` float32 (the env's observation, cast)
``(g, "action")``          ``(B, n, ...)`` ``Categorical`` (``Discrete``), ``MultiCategorical``, ``Bounded`` (``Box``)
``(g, "action_mask")``     ``(B, n, k)``   bool, ``get_avail_actions`` (``get_legal_moves``: Hanabi)
``("next", g, "reward")``  ``(B, n, 1)``   ``Unbounded`` float32
``(g, "terminated")``      ``(B, n, 1)``   the agent's own done (SMAX, JaxNav: agents that end separately)
``(g, "info", "won")``     ``(B, n, 1)``   float32, SMAX and HeuristicEnemySMAX: 1.0 on the step the agent's team
                                           wins (the other team wiped out, one of its own alive), else 0.0; its
                                           mean over the steps that end episodes is the win rate
``"state"`` (root)         ``(B, s)``      ``Unbounded`` float32, JaxMARL's ``world_state`` where the env's
                                           observations carry one (SMAX, HeuristicEnemySMAX): the global state a
                                           centralised critic reads
========================== =============== ===============================================================

The root ``terminated`` is ``dones["__all__"]``. JaxMARL has no truncation flag; ``truncated`` is derived: an
episode that ends while the state's ``step`` counter (HeuristicEnemySMAX: its wrapped SMAX state's) has reached
the env's ``max_steps`` (MPE, SMAX, Overcooked, JaxNav, switch riddle) ended by its time limit, as does a MABrax
episode that Brax's ``EpisodeWrapper`` marks with its ``truncation``, and Coin Game and STORM episodes end only by
their step counts;
``terminated`` is ``dones["__all__"]`` and not ``truncated``. The step is ``step_env`` (no auto-reset), so the
terminal observation stays in ``next``; the envs that are done are reset by the model's masked reset.

**Time limit.** The env's own limit is ``max_steps`` (``env.max_steps``), counted in env steps: MPE and SMAX test
``step >= max_steps`` before counting the step, so their episodes last JaxMARL's ``max_steps`` + 1 steps (MPE: 26,
SMAX: 101); Overcooked, JaxNav and switch riddle episodes last ``max_steps`` steps, Coin Game's ``num_inner_steps *
num_outer_steps``, MABrax's ``episode_length`` (over ``action_repeat``). A shorter ``max_steps`` is taken, a longer
one refused. JaxMARL's own ``max_steps`` is passed as ``env_kwargs={"max_steps": N}`` (the name is this class's
keyword), where the env takes it: switch riddle's is ``4 * num_agents - 6``, the ``MPE_simple_facmac_*a_v1`` envs'
fixed. Hanabi has no time limit (``max_steps`` None: a game ends itself).
"""

from ...registry import Backend

BACKEND = Backend(__name__, packages=("jax", "jaxmarl"), extra="jaxmarl", env_class="JaxMarlEnv",
                  check_env=("jaxmarl/MPE_simple_spread_v3", {}), host_wait=True, check=f"{__name__}._library:check",
                  counterpart=f"{__name__}._library:counterpart", title="JaxMARL", distributions=("jaxmarl", "jax"),
                  builds_on=("jax",))
__getattr__, __dir__ = BACKEND.lazy_attributes()
