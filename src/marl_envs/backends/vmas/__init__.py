"""VMAS backend: every VMAS scenario by name, exact against raw VMAS, with vectorized partial resets.

>>> import marl_envs
>>> env = marl_envs.make("vmas/balance", num_envs=4, n_agents=3, seed=0)
>>> env.group_map
{'agents': ['agent_0', 'agent_1', 'agent_2']}

Data of a group ``g`` of ``n`` agents (``B = num_envs``)::

    key                          shape            spec
    (g, "observation")           (B, n, *obs)     Unbounded float32 (a nested Composite for dict observations)
    (g, "info", k)               (B, n, *info_k)  Unbounded float32 (zeros right after a reset)
    (g, "action")                (B, n, d)        Bounded float32: VMAS's ranges, communication dims in [0, 1]
                                 (B, n)           Categorical int64 (continuous_actions=False)
                                 (B, n, k)        OneHot int64 (... and categorical_actions=False)
                                 (B, n, m)        MultiCategorical int64 (... and multidiscrete_actions=True)
    ("next", g, "reward")        (B, n, 1)        Unbounded float32
    done, terminated, truncated  (B, 1)           Binary bool, at the root

The scenario's own ``done`` is ``terminated``; ``max_steps`` is ``truncated`` (VMAS never sees it).
"""

from collections.abc import Mapping
from typing import Any

from ..._core import keywords
from ..._core.messages import check_kwargs, unknown_env
from ...registry import Backend, available_envs


def check(scenario: str, kwargs: dict[str, Any]) -> None:
    """Refuse a scenario name VMAS does not have, or a value of a type its keyword does not take, before anything
    is imported or a keyword is bound (``marl_envs.registry.Backend.check``): ``make("vmas/navigatoin")`` names the
    scenario, and ``make("vmas/balance", n_agents="3")`` the value, not a missing ``num_envs``."""
    names = [name.partition("/")[2] for name in available_envs("vmas")]
    name = scenario.removesuffix(".py")
    if name not in names:
        raise unknown_env("VMAS scenario", scenario, names)
    check_values(name, keywords.declared("vmas", name), kwargs)


def check_values(label: str, declared: keywords.Keywords | None, kwargs: Mapping[str, Any]) -> None:
    """Refuse a value of a type its keyword does not take (``check_kwargs``), for the keywords ``declared`` says the
    scenario reads (None: a scenario of your own, not checked). A keyword it does not name is VMAS's to refuse,
    once the scenario is built and VMAS says it was left unread (``VmasEnv``)."""
    defaults = keywords.defaults(declared)
    if defaults:
        check_kwargs(f"VMAS scenario {label!r}", defaults, {k: v for k, v in kwargs.items() if k in defaults})


BACKEND = Backend(__name__, packages=("vmas",), extra="vmas", env_class="VmasEnv",
                  check_env=("vmas/balance", {"n_agents": 3}),
                  example=("vmas/balance", {"n_agents": 2}), exports=("VmasEnv", "VmasWrapper"),
                  host_wait="VMAS resets exactly the done envs, by their indices: the host reads which are done",
                  check=f"{__name__}:check",
                  title="VMAS", distributions=("vmas", "pyglet"))
__getattr__, __dir__ = BACKEND.lazy_attributes()
