"""The openspiel backend's env classes and ``env_names``; see ``marl_envs.backends.openspiel``."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv
from tensordict import TensorDictBase

from .._quiet import filtered_output
from ..pettingzoo import ACTION_MASK, BatchFacts, Buffers, PettingZooEnv, Shard, StepArrays, Task, batch_index
from ._drawing import text_image

__all__ = ["OpenSpielAEC", "OpenSpielEnv", "OpenSpielParallel", "env_names", "tasks"]

CHANCE = "chance"
#: ``render_mode``s: the state's text, or that text drawn as an image.
RENDER_MODES = ["ansi", "rgb_array"]
#: What OpenSpiel prints on stderr while the games are listed: the errors of games that need parameters (raised as
#: well, and caught), and notices (``quoridor``'s "has known issues"): dropped
_LOAD_NOTICES = re.compile(r"^(OpenSpiel exception: |Warning! The implementation of ).*\n?", re.M)
#: Games whose ``horizon`` counts moves that are no player's: markov_soccer counts its opening chance move (where the
#: ball is placed), so its players make ``horizon - 1`` moves
_HORIZON_CHANCE_MOVES = {"markov_soccer": 1}


def _import_pyspiel() -> Any:
    import pyspiel

    return pyspiel


#: OpenSpiel's C++ checks print their message to stderr before raising it: kept out of the user's terminal
_SPIEL_PRINTED = re.compile(r"OpenSpiel exception: .*\Z", re.DOTALL)


def _load_game(name: str, params: dict[str, Any]) -> Any:
    """``pyspiel.load_game(name, params)``; OpenSpiel's refusal of the parameters raised once, as a ``ValueError``
    naming the env and the keywords (its C++ message printed nowhere)."""
    pyspiel = _import_pyspiel()
    try:
        with filtered_output("stderr", _SPIEL_PRINTED):
            return pyspiel.load_game(name, params)
    except pyspiel.SpielError as err:
        message = " ".join(str(err).split())
        raise ValueError(f"openspiel/{name} with {params}: OpenSpiel refused it: {message}. Its parameters and "
                         f"defaults: marl-envs info openspiel/{name}") from None


class _Game:
    """One OpenSpiel game state and what the PettingZoo views need of it (shared by the AEC and parallel views)."""

    def __init__(self, name: str, params: dict[str, Any]):
        self.game = _load_game(name, params)
        self.use_observation = self.game.get_type().provides_observation_tensor
        self.shape = tuple(self.game.observation_tensor_shape() if self.use_observation
                           else self.game.information_state_tensor_shape())
        self.n_actions = self.game.num_distinct_actions()
        self.players = list(range(self.game.num_players()))
        self.agents = [f"player_{p}" for p in self.players]
        self.obs_space = spaces.Dict({
            "observation": spaces.Box(-np.inf, np.inf, self.shape, np.float32),
            ACTION_MASK: spaces.MultiBinary(self.n_actions),
        })
        self.act_space = spaces.Discrete(self.n_actions)
        self.rng = np.random.default_rng()
        self.state = self.game.new_initial_state()
        self.returns = [0.0] * len(self.players)
        self.last = [0.0] * len(self.players)  #: every player's reward of the last move (0 after a reset)
        self.chance = -1
        horizon = self.game.get_parameters().get("horizon")
        #: the game's time limit (its ``horizon`` parameter), or None: OpenSpiel ends the game there as at a true end
        self.horizon = horizon if isinstance(horizon, int) and horizon > 0 else None
        # the same game with a horizon one move longer: a state ended by the horizon alone is not terminal in it
        self.longer = None if self.horizon is None else _load_game(name, {**params, "horizon": horizon + 1})
        self.cut = False  #: the game ended at its horizon, without a true end (a truncation)

    def reset(self, seed: int | None, state: str | None = None) -> None:
        """A new game, or the game ``state`` serializes (``pyspiel.State.serialize()``), its returns so far kept."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.state = self.game.new_initial_state() if state is None else self.game.deserialize_state(state)
        self.returns = self.state.returns()
        self.last = [0.0] * len(self.players)
        self.chance = -1
        self.resolve_chance()
        self.cut = self.state.is_terminal() and self._at_horizon()

    def _at_horizon(self) -> bool:
        """Whether the game ended at its horizon alone: not terminal in the game one move longer."""
        return self.longer is not None and not self.longer.deserialize_state(self.state.serialize()).is_terminal()

    def resolve_chance(self) -> None:
        """Draw and apply chance outcomes until a player acts or the game ends."""
        state = self.state
        while state.is_chance_node():
            outcomes, probabilities = zip(*state.chance_outcomes())
            self.chance = int(outcomes[self.rng.choice(len(outcomes), p=np.asarray(probabilities))])
            state.apply_action(self.chance)

    def play(self, actions: Sequence[int]) -> None:
        """One move: every player's action at a simultaneous node, else the acting player's (``actions[p]`` is player
        ``p``'s); then chance, then the rewards (``last``)."""
        state = self.state
        self.chance = -1
        if state.is_simultaneous_node():
            state.apply_actions([int(action) for action in actions])
        else:
            state.apply_action(int(actions[state.current_player()]))
        self.resolve_chance()
        self.rewards()
        if state.is_terminal():  # once a game, at its end
            self.cut = self._at_horizon()

    def ends(self) -> tuple[bool, bool]:
        """``(terminated, truncated)`` of the game as it stands: a state ended by the horizon alone is truncated."""
        return self.state.is_terminal() and not self.cut, self.cut

    def rewards(self) -> None:
        """``last``: the change of every player's return since the last call."""
        now = self.state.returns()
        self.last = [a - b for a, b in zip(now, self.returns)]
        self.returns = now

    def tensor(self, player: int) -> list[float]:
        """The player's observation tensor (information-state tensor for games without one), flat."""
        state = self.state
        return state.observation_tensor(player) if self.use_observation else state.information_state_tensor(player)

    def observe(self, player: int) -> dict[str, np.ndarray]:
        mask = np.asarray(self.state.legal_actions_mask(player), np.int8)  # all 0 at a terminal state
        if not mask.any():
            mask[:] = 1  # not this player's move (or the game is over): whatever it sends is ignored
        return {"observation": np.asarray(self.tensor(player), np.float32).reshape(self.shape), ACTION_MASK: mask}

    def infos(self) -> dict[str, dict]:
        return {agent: {CHANCE: self.chance} for agent in self.agents}

    def render(self, mode: str | None) -> str | np.ndarray:
        """The state's text (``"ansi"``, None), or that text drawn as an image (``"rgb_array"``)."""
        return text_image(str(self.state)) if mode == "rgb_array" else str(self.state)


class _GameView:
    """What the AEC and parallel views share: one ``_Game``, its agents and spaces, its drawing."""

    def __init__(self, name: str, render_mode: str | None = None, **params: Any):
        super().__init__()
        self.core = _Game(name, params)
        self.possible_agents = list(self.core.agents)
        self.agents: list[str] = []
        self.render_mode = render_mode

    def observation_space(self, agent: str) -> spaces.Space:
        return self.core.obs_space

    def action_space(self, agent: str) -> spaces.Space:
        return self.core.act_space

    def render(self) -> str | np.ndarray:
        return self.core.render(self.render_mode)

    def close(self) -> None:
        pass


class OpenSpielAEC(_GameView, AECEnv):
    """A turn-based OpenSpiel game through PettingZoo's AEC API (``agent_selection`` is the player to act)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": RENDER_MODES, "is_parallelizable": False}

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        return self.core.observe(self.possible_agents.index(agent))

    def _sync(self) -> None:
        """PettingZoo's dicts and the player to act from the game after a move (``core.last``: its rewards)."""
        core, state = self.core, self.core.state
        self.rewards = dict(zip(self.possible_agents, core.last))
        self._cumulative_rewards = dict(self.rewards)  # what last() reports: this step's
        terminated, truncated = core.ends()
        self.terminations = dict.fromkeys(self.agents, terminated)
        self.truncations = dict.fromkeys(self.agents, truncated)
        self.infos = core.infos()
        if not state.is_terminal():
            self.agent_selection = self.possible_agents[state.current_player()]
        elif self.agent_selection not in self.agents and self.agents:
            self.agent_selection = self.agents[0]

    def restart(self, seed: int | None, state: str | None = None) -> None:
        """A new game (or serialized ``state``), and who acts in it: ``reset`` without PettingZoo's dicts
        (``GameShard`` reads the game)."""
        core = self.core
        core.reset(seed, state)
        core.rewards()
        self.agents = list(self.possible_agents)
        state = core.state
        self.agent_selection = self.agents[0 if state.is_terminal() else state.current_player()]
        if state.is_terminal():  # a saved game that had ended: the dicts a dead step reads say so
            self._sync()

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.restart(seed)
        self._sync()

    def step(self, action: int | None) -> None:
        core = self.core
        if core.state.is_terminal():  # PettingZoo's dead step: the agent leaves
            self.agents.remove(self.agent_selection)
            self.rewards = dict.fromkeys(self.agents, 0.0)
            if self.agents:
                self.agent_selection = self.agents[0]
            return
        core.play([action] * len(self.possible_agents))  # the acting player's action, wherever it sits
        self._sync()


class OpenSpielParallel(_GameView, ParallelEnv):
    """A simultaneous-move OpenSpiel game through PettingZoo's parallel API (a turn-based node inside it applies
    the acting player's action only)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": RENDER_MODES, "is_parallelizable": True}

    def _observations(self) -> dict[str, dict]:
        return {agent: self.core.observe(p) for p, agent in enumerate(self.possible_agents)}

    def restart(self, seed: int | None, state: str | None = None) -> None:
        """A new game (or serialized ``state``): ``reset`` without PettingZoo's dicts (``GameShard`` reads the game)."""
        self.core.reset(seed, state)
        self.agents = [] if self.core.state.is_terminal() else list(self.possible_agents)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.restart(seed)
        return self._observations(), self.core.infos()

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        core = self.core
        core.play([actions[agent] for agent in self.possible_agents])
        terminated, truncated = core.ends()
        out = (self._observations(), dict(zip(self.possible_agents, core.last)),
               dict.fromkeys(self.possible_agents, terminated), dict.fromkeys(self.possible_agents, truncated),
               core.infos())
        if core.state.is_terminal():
            self.agents = []
        return out


class GameShard(Shard):
    """The shard of OpenSpiel game states: the values the PettingZoo views give, written straight into the step arrays.

    For a game whose step takes microseconds, the views' dicts and the generic per-row writes cost more than the
    game. Here a step plays every row's move (``_Game.play``, what the views call too), reads every player's tensor
    and legal actions into flat lists, and writes each arrays entry once for all rows. The views stay the instances:
    their agents and player to act are kept as the generic path keeps them (PettingZoo's dicts only at a game's end),
    and a step where some game is already over (PettingZoo's dead steps, after a ``step`` without a reset) goes
    through them.
    """

    def __init__(self, instances: Sequence[Any], lo: int, facts: BatchFacts, buffers: Buffers):
        super().__init__(instances, lo, facts, buffers)
        self.games: list[_Game] = [view.core for view in self.instances]
        self.players = range(len(facts.agents))  # the agents are player_0, player_1, ...: the batch's order

    def step(self, decoded: Sequence[Sequence | None] | None = None) -> None:
        b, lo, hi, facts = self.buffers, self.lo, self.hi, self.facts
        if any(game.state.is_terminal() for game in self.games):  # dead steps: the generic path, over the views
            if not facts.parallel:
                for view, game in zip(self.instances, self.games):
                    if not game.state.is_terminal():
                        # the dicts a generic step reads (a direct step or restart leaves them as they were)
                        view._sync()
            super().step(decoded)
            return
        for r, (view, game, row) in enumerate(zip(self.instances, self.games, self._wired_by_agent().tolist())):
            self.current = lo + r
            game.play(row)
            if game.state.is_terminal():
                if facts.parallel:
                    view.agents = []
                else:
                    view._sync()
            elif not facts.parallel:
                view.agent_selection = view.possible_agents[game.state.current_player()]
        b.step.clear(lo, hi)
        self._read(b.step, range(lo, hi))
        self._flags(b.step)

    def reset(self, rows: Sequence[int], seeds: Sequence[int | None], states: Sequence[str] | None = None) -> None:
        """New games in rows ``rows`` (``seeds``: see ``Shard``), or the games ``states`` serialize (``restore``)."""
        arrays = self._reset_arrays(rows)
        for k, (i, seed) in enumerate(zip(rows, seeds)):
            self.current = i
            self.instances[i - self.lo].restart(seed, None if states is None else states[k])
        self._read(arrays, rows)
        self._flags(arrays)

    def restore(self, rows: Sequence[int], states: Sequence[str]) -> None:
        """Rows ``rows`` set to the games ``states`` serialize, written as a reset writes (no reward yet)."""
        self.reset(rows, [None] * len(rows), states)

    def states(self) -> list[str]:
        """Each row's game, serialized (``pyspiel.State.serialize()``; ``restore`` reads it back)."""
        return [game.state.serialize() for game in self.games]

    def _read(self, f: StepArrays, rows: Sequence[int]) -> None:
        """Rows ``rows`` of arrays ``f`` and of the episode flags, from their games as they stand."""
        b, facts, players, position = self.buffers, self.facts, self.players, self.position
        n, P = len(rows), len(players)
        if not n:
            return
        tensors, masks, rewards, ended, cut, chance, acting = [], [], [], [], [], [], []
        for i in rows:
            view = self.instances[i - self.lo]
            game = view.core
            state = game.state
            for p in players:
                tensors.extend(game.tensor(p))
                masks.extend(state.legal_actions_mask(p))
            rewards.extend(game.last)
            ended.append(state.is_terminal())
            cut.append(game.cut)
            chance.append(game.chance)
            acting.append(-1 if not view.agents else P if facts.parallel else position[view.agent_selection])
        mask = np.asarray(masks, bool).reshape(n, P, -1)
        mask[~mask.any(-1)] = True  # no legal action (not this player's move, or over): all True
        over = np.asarray(ended)
        live = np.ones((n, P), bool)
        if facts.parallel:
            live[over] = False
        who = np.asarray(acting)[:, None]
        acts = (who == np.arange(P)) | (who == P)
        # the generic writer keeps the defaults (all True) for agents not acting: the same values here
        obs = np.asarray(tensors, np.float32).reshape(n, P, -1)
        rows = batch_index(rows)  # a step's rows: a slice
        truncated = np.asarray(cut)[:, None]
        b.live[rows], b.seen[rows] = live, True
        b.term[rows], b.trunc[rows] = over[:, None] & ~truncated, truncated
        f.acting[rows] = acts
        f.reward[rows] = np.asarray(rewards, np.float32).reshape(n, P)
        chances = np.asarray(chance, np.float32)[:, None]
        for gi, g in enumerate(facts.groups):
            f.obs[gi][0][rows] = obs[:, g.index].reshape(n, len(g.agents), *game.shape)
            f.action_mask[gi][rows] = mask[:, g.index]
            for buf in f.infos[gi]:  # the one numeric info: the chance outcome
                buf[rows] = chances


def _left_out(game: Any) -> str | None:
    """Why the loaded ``game`` is not offered, or None."""
    pyspiel = _import_pyspiel()
    kind = game.get_type()
    if kind.dynamics not in (pyspiel.GameType.Dynamics.SEQUENTIAL, pyspiel.GameType.Dynamics.SIMULTANEOUS):
        return "mean-field game"
    if not (kind.provides_observation_tensor or kind.provides_information_state_tensor):
        return "no observation tensor"
    if kind.chance_mode == pyspiel.GameType.ChanceMode.SAMPLED_STOCHASTIC:
        return "sampled chance"
    if game.num_distinct_actions() < 1:
        return "no actions"
    return None


def _parameters(name: str) -> dict[str, Any]:
    """The keywords of game ``name``: its OpenSpiel parameters and ``render_mode``."""
    return {**_import_pyspiel().load_game(name).get_parameters(), "render_mode": None}


@functools.cache
def tasks() -> dict[str, Task]:
    """Every game offered (the OpenSpiel page of the docs says which), by its short name."""
    pyspiel = _import_pyspiel()
    found = {}
    with filtered_output("stderr", _LOAD_NOTICES):
        for kind in pyspiel.registered_games():
            try:
                game = pyspiel.load_game(kind.short_name)
            except (pyspiel.SpielError, IndexError):  # it needs parameters (nfg_game's missing file: IndexError)
                continue
            if _left_out(game) is not None:
                continue
            simultaneous = kind.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS
            aec = None if simultaneous else functools.partial(OpenSpielAEC, kind.short_name)
            parallel = functools.partial(OpenSpielParallel, kind.short_name) if simultaneous else None
            found[kind.short_name] = Task(kind.short_name, aec, parallel, __name__,
                                          keywords=functools.partial(_parameters, kind.short_name),
                                          render_modes=lambda: RENDER_MODES, family="openspiel")
    return found


class OpenSpielEnv(PettingZooEnv):
    """An OpenSpiel game by name, ``num_envs`` game states batched; the arguments are
    :class:`~marl_envs.backends.pettingzoo.PettingZooEnv`'s, the keywords the game's parameters."""

    family: ClassVar[str] = "openspiel"
    shard_class = GameShard
    _restoring: list[str] | None = None  # the states reset_to resets to, for the duration of its reset

    def game_states(self) -> list[str]:
        """Every env's game as it stands, serialized (``pyspiel.State.serialize()``), in batch order: what
        ``reset_to`` and ``pyspiel.Game.deserialize_state`` read back."""
        return self._call("states")

    def reset_to(self, states: Sequence[str], tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """``reset(tensordict)``, the envs reset (all, or those a ``_reset`` entry selects) set to the serialized
        games ``states`` (one per env, ``game_states()``'s) instead of new games: their rewards start from there,
        their step count from 0, chance outcomes after them drawn as after a reset.

        Raises:
            ValueError: not one state, a str, per env.
            InstanceError: OpenSpiel cannot read a state (its message).
        """
        states = list(states)
        if len(states) != self.num_envs or not all(isinstance(state, str) for state in states):
            kinds = ", ".join(sorted({type(state).__name__ for state in states}))  # every type given, not the first's
            raise ValueError(f"reset_to takes one serialized game state (a str, env.game_states()'s) per env: "
                             f"{self.num_envs} here, got {len(states)} ({kinds})")
        self._restoring = states
        try:
            return self.reset(tensordict)
        finally:
            self._restoring = None

    def _start(self, rows: list[int]) -> None:
        if self._restoring is None:
            super()._start(rows)
        else:  # reset_to: the saved games, the rows' pending seeds kept for their next new game
            self._call("restore", rows, [self._restoring[i] for i in rows])

    @classmethod
    def known_tasks(cls) -> dict[str, Task]:
        return tasks()

    @staticmethod
    def _library_horizon(env: Any) -> tuple[int, str] | None:
        """A game's ``horizon`` parameter (a time limit: ``markov_soccer``, ``laser_tag``, ``pig``, ...) as env steps,
        one per move of a player (or of all players at a simultaneous node)."""
        core = env.core
        if core.horizon is None:
            return None
        return core.horizon - _HORIZON_CHANCE_MOVES.get(core.game.get_type().short_name, 0), "horizon=N"

    @staticmethod
    def _library_bound(env: Any) -> int | None:
        """``max_game_length()`` of a game without a horizon: the most moves of its players, chance left out."""
        core = env.core
        return core.game.max_game_length() if core.horizon is None else None


def env_names() -> list[str]:
    """Every OpenSpiel game offered here."""
    return sorted(tasks())

