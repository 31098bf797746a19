"""What the jaxmarl backend knows of JaxMARL without importing it: its env names, the module and class each env is
built from, SMAX's maps, and the check of a build's name and values against them.

``import jaxmarl`` imports every family it has (MABrax imports Brax and MuJoCo: seconds on a small CPU), and
``jaxmarl.make`` is an if-chain over all of them. So an env is built here from its own module, imported alone
(``import_alone``: JaxMARL's package ``__init__`` is not run), with the class ``jaxmarl.make`` would call. This
module imports nothing but the standard library and ``marl_envs._core.messages``: ``marl_envs.make`` runs ``check``
before torch, JAX or JaxMARL is imported, so a misspelled name or map is refused at once. The tables are JaxMARL
0.2.0's (the version ``marl-envs[jaxmarl]`` pins); ``tests/backends/test_jax_families.py`` checks them against the
installed JaxMARL (``jaxmarl.registered_envs``, ``jaxmarl.make``'s source, ``MAP_NAME_TO_SCENARIO``).
"""

from __future__ import annotations

import re
from typing import Any

from ..._core import keywords
from ..._core.messages import check_kwargs, check_name, close_matches, unknown_name

__all__ = ["CLASSES", "ENV_KEYWORDS", "OVERCOOKED_LAYOUTS", "SMAX_MAPS", "UNAVAILABLE", "check", "counterpart",
           "env_names", "library_name", "unavailable"]

_MPE, _SMAX, _MABRAX = "jaxmarl.environments.mpe", "jaxmarl.environments.smax", "jaxmarl.environments.mabrax"
CLASSES: dict[str, str] = {
    "MPE_simple_v3": f"{_MPE}.simple:SimpleMPE",
    "MPE_simple_tag_v3": f"{_MPE}.simple_tag:SimpleTagMPE",
    "MPE_simple_world_comm_v3": f"{_MPE}.simple_world_comm:SimpleWorldCommMPE",
    "MPE_simple_spread_v3": f"{_MPE}.simple_spread:SimpleSpreadMPE",
    "MPE_simple_crypto_v3": f"{_MPE}.simple_crypto:SimpleCryptoMPE",
    "MPE_simple_speaker_listener_v4": f"{_MPE}.simple_speaker_listener:SimpleSpeakerListenerMPE",
    "MPE_simple_push_v3": f"{_MPE}.simple_push:SimplePushMPE",
    "MPE_simple_adversary_v3": f"{_MPE}.simple_adversary:SimpleAdversaryMPE",
    "MPE_simple_reference_v3": f"{_MPE}.simple_reference:SimpleReferenceMPE",
    "MPE_simple_facmac_v1": f"{_MPE}.simple_facmac:SimpleFacmacMPE",
    "MPE_simple_facmac_3a_v1": f"{_MPE}.simple_facmac:SimpleFacmacMPE3a",  # functions of no keywords
    "MPE_simple_facmac_6a_v1": f"{_MPE}.simple_facmac:SimpleFacmacMPE6a",
    "MPE_simple_facmac_9a_v1": f"{_MPE}.simple_facmac:SimpleFacmacMPE9a",
    "switch_riddle": "jaxmarl.environments.switch_riddle.switch_riddle:SwitchRiddle",
    "SMAX": f"{_SMAX}.smax_env:SMAX",
    "HeuristicEnemySMAX": f"{_SMAX}.heuristic_enemy_smax_env:HeuristicEnemySMAX",
    "LearnedPolicyEnemySMAX": f"{_SMAX}.heuristic_enemy_smax_env:LearnedPolicyEnemySMAX",
    "ant_4x2": f"{_MABRAX}.mabrax_env:Ant",
    "halfcheetah_6x1": f"{_MABRAX}.mabrax_env:HalfCheetah",
    "hopper_3x1": f"{_MABRAX}.mabrax_env:Hopper",
    "humanoid_9|8": f"{_MABRAX}.mabrax_env:Humanoid",
    "walker2d_2x3": f"{_MABRAX}.mabrax_env:Walker2d",
    "storm": "jaxmarl.environments.storm.storm_env:InTheGrid",
    "storm_2p": "jaxmarl.environments.storm.storm_2p:InTheGrid_2p",
    "storm_np": "jaxmarl.environments.storm.storm:InTheMatrix",
    "hanabi": "jaxmarl.environments.hanabi.hanabi:HanabiEnv",
    "overcooked": "jaxmarl.environments.overcooked.overcooked:Overcooked",
    "overcooked_v2": "jaxmarl.environments.overcooked_v2.overcooked:OvercookedV2",
    "coin_game": "jaxmarl.environments.coin_game.coin_game:CoinGame",
    "jaxnav": "jaxmarl.environments.jaxnav.jaxnav_env:JaxNav",
}
"""JaxMARL's env name -> ``"module:name"`` of the class (or function) ``jaxmarl.make`` builds it with, for every
registered env but the ``JaxRobotarium_*`` ones (``ROBOTARIUM``)."""

ROBOTARIUM = ("JaxRobotarium_navigation", "JaxRobotarium_discovery", "JaxRobotarium_material_transport",
              "JaxRobotarium_warehouse", "JaxRobotarium_arctic_transport", "JaxRobotarium_foraging",
              "JaxRobotarium_rware", "JaxRobotarium_predator_prey")
"""The registered envs of the ``jaxrobotarium`` package, which is not on PyPI."""

UNAVAILABLE = {
    "LearnedPolicyEnemySMAX": "needs a trained enemy policy and its parameters (no default)",
    # STORM runs upstream, but its agents are the ints 0, 1 and its observations a dict of image and inventory
    # (storm), a tuple (storm_2p) or one array (storm_np): not yet mapped by this adapter
    "storm": "dict observations per agent (image, inventory) are not mapped yet",
    "storm_2p": "dict observations per agent (image, inventory) are not mapped yet",
    "storm_np": "integer agent ids with one stacked observation array are not mapped yet",
}
"""Registered JaxMARL envs that cannot be built by name here, with the reason (JaxRobotarium_* need the
``jaxrobotarium`` package, which is not on PyPI: they are listed by ``unavailable()``)."""

SMAX_MAPS = ("3m", "2s3z", "25m", "3s5z", "8m", "5m_vs_6m", "10m_vs_11m", "27m_vs_30m", "3s5z_vs_3s6z", "3s_vs_5z",
             "6h_vs_8z", "smacv2_5_units", "smacv2_10_units", "smacv2_20_units")
"""The SMAX maps a ``scenario`` names (``MAP_NAME_TO_SCENARIO`` of ``jaxmarl.environments.smax.smax_env``)."""


OVERCOOKED_LAYOUTS = ("cramped_room", "asymm_advantages", "coord_ring", "forced_coord", "counter_circuit")
"""Overcooked-AI's five layouts as the ``layout`` of ``overcooked_v2`` names them (among its
``overcooked_v2_layouts``; ``overcooked`` takes a layout dict): ``counterpart`` offers them for ``overcooked/<layout>``
(``tests/test_registry.py`` builds the envs its messages name)."""

ENV_KEYWORDS = ("num_envs", "device", "max_steps", "seed", "group_map", "env_kwargs", "device_path")
"""``JaxMarlEnv``'s own keywords, in its signature's order (a test checks them against it): every other keyword of
a build is the JaxMARL env's."""


def unavailable() -> dict[str, str]:
    """Registered JaxMARL envs that cannot be built here, with the reason."""
    return {**UNAVAILABLE, **dict.fromkeys(ROBOTARIUM, "needs the jaxrobotarium package (not on PyPI)")}


def env_names() -> list[str]:
    """JaxMARL's registered envs less the ones ``unavailable()`` explains, split robots' joint counts written ``9-8``
    (JaxMARL's ``humanoid_9|8`` is ``humanoid_9-8`` here: a name a shell takes unquoted)."""
    return sorted(n.replace("|", "-") for n in CLASSES if n not in UNAVAILABLE)


def library_name(env_name: str) -> str:
    """The name JaxMARL registers ``env_name`` (a name of ``env_names()``) under."""
    return next((n for n in CLASSES if n.replace("|", "-") == env_name), env_name)


def check(env_name: str, kwargs: dict[str, Any]) -> None:
    """Refuse a build ``JaxMarlEnv(env_name, **kwargs)`` would refuse for its name, its SMAX map or a keyword, before
    anything is imported (``marl_envs.registry.Backend.check``; ``JaxMarlEnv`` runs it too). The keywords not in
    ``ENV_KEYWORDS``, and those of ``env_kwargs``, are the JaxMARL env's: they are checked against the keywords
    declared for it (``marl_envs._core.keywords``).

    Raises:
        ValueError: an env that cannot be built here (with the reason), an unknown env name or SMAX map (with close
            matches), a keyword given both in ``env_kwargs`` and on its own.
        TypeError: ``env_kwargs`` is not a dict, a keyword neither the env nor JaxMARL's env takes (with the
            close match), or a value of a type its keyword does not take (its default's).
    """
    check_name("JaxMARL", env_name.replace("|", "-"), env_names(), unavailable())
    inner = kwargs.get("env_kwargs")
    if inner is not None and not isinstance(inner, dict):
        raise TypeError(f"env_kwargs must be a dict of jaxmarl.make keywords, got {inner!r}")
    own = {key: value for key, value in kwargs.items() if key not in ENV_KEYWORDS}
    twice = sorted(set(inner or {}) & set(own))
    if twice:
        raise ValueError(f"JaxMARL env {env_name!r} got {twice[0]!r} both in env_kwargs and as a keyword; pass it once")
    library = {**(inner or {}), **own}
    scenario = library.get("scenario")
    if isinstance(scenario, str) and scenario not in SMAX_MAPS:
        raise unknown_name("SMAX map", scenario, list(SMAX_MAPS))
    accepted = keywords.declared("jaxmarl", env_name) if library else None  # None: not declared, not checked
    check_kwargs(f"JaxMARL env {env_name!r}", keywords.defaults(accepted), library,
                 env=ENV_KEYWORDS, kind="the env's")


def _nearest(what: str, name: str, choices: list[str] | tuple[str, ...]) -> tuple[str | None, str]:
    """``name`` if it is one of ``choices``, else its close match, or None; and the words that say it is a match."""
    if name in choices:
        return name, ""
    close = close_matches(name, choices, n=1)
    return (close[0], f"; the nearest {what} to {name!r} is {close[0]!r}") if close else (None, "")


def _smac(name: str) -> str:
    maps = [m for m in SMAX_MAPS if not m.startswith("smacv2_")]
    chosen, nearest = _nearest("map", name, maps)
    said = "JaxMARL's SMAX plays SMAC's maps in JAX, HeuristicEnemySMAX against a scripted enemy as SMAC's built-in AI"
    if chosen is None:
        return f"{said}: marl_envs.make('jaxmarl/HeuristicEnemySMAX', scenario=MAP), MAP one of {', '.join(maps)}"
    return (f"{said}{nearest}: marl_envs.make('jaxmarl/HeuristicEnemySMAX', scenario={chosen!r}) (marl-envs info "
            f"jaxmarl/HeuristicEnemySMAX scenario={chosen})")


def _smacv2(name: str) -> str:
    maps = [m for m in SMAX_MAPS if m.startswith("smacv2_")]
    units = re.search(r"(\d+)_vs_\d+", name)
    chosen = f"smacv2_{units.group(1)}_units" if units else None
    said = ("JaxMARL's SMAX has SMACv2's maps in JAX, drawing the units' start positions and types as SMACv2 does "
            "(their types from SMAX's six, of every race)")
    if chosen not in maps:
        return (f"{said}: marl_envs.make('jaxmarl/HeuristicEnemySMAX', scenario=MAP), MAP one of {', '.join(maps)} (N "
                f"units a side)")
    return (f"{said}: marl_envs.make('jaxmarl/HeuristicEnemySMAX', scenario={chosen!r}) ({units.group(1)} units a "
            f"side; marl-envs info jaxmarl/HeuristicEnemySMAX scenario={chosen})")


def _overcooked(name: str) -> str:
    chosen, nearest = _nearest("layout", name, OVERCOOKED_LAYOUTS)
    said = "JaxMARL's Overcooked has Overcooked-AI's layouts in JAX"
    if chosen is None:
        return (f"{said}: marl_envs.make('jaxmarl/overcooked_v2', layout=LAYOUT), LAYOUT one of "
                f"{', '.join(OVERCOOKED_LAYOUTS)} (or jaxmarl/overcooked)")
    return (f"{said}{nearest}: marl_envs.make('jaxmarl/overcooked_v2', layout={chosen!r}) (marl-envs info "
            f"jaxmarl/overcooked_v2 layout={chosen}; or jaxmarl/overcooked)")


def counterpart(family: str, name: str) -> str | None:
    """What JaxMARL has nearest to ``<family>/<name>`` of a library that is no family here
    (``marl_envs.registry.Backend.counterpart``): SMAC's and SMACv2's maps are SMAX's, Overcooked-AI's layouts
    ``overcooked_v2``'s; None for another family."""
    nearest = {"smac": _smac, "smacv2": _smacv2, "overcooked": _overcooked}.get(family.lower())
    return None if nearest is None else nearest(name)
