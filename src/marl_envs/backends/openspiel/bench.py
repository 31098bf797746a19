"""The reference loop of OpenSpiel: as many ``pyspiel`` game states stepped by hand, each step reading what every
player needs (its observation tensor and legal actions), applying a random legal action of the acting player (every
player's at a simultaneous node), drawing chance outcomes with NumPy and starting a new game at a terminal state."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tensordict import TensorDictBase

from ._env import OpenSpielEnv
from ...bench import Loop, References
from ..pettingzoo.bench import with_workers


class _ByHand:
    def __init__(self, env: OpenSpielEnv, plan: Sequence[TensorDictBase]):
        import pyspiel

        self.game = pyspiel.load_game(env.task, dict(env.task_kwargs))
        self.tensor = ("observation_tensor" if self.game.get_type().provides_observation_tensor
                       else "information_state_tensor")
        self.players = range(self.game.num_players())
        self.rng = np.random.default_rng(0)
        self.states = [self._new() for _ in range(env.num_envs)]

    def _chance(self, state) -> None:
        while state.is_chance_node():
            outcomes, probabilities = zip(*state.chance_outcomes())
            state.apply_action(outcomes[self.rng.choice(len(outcomes), p=np.asarray(probabilities))])

    def _new(self):
        state = self.game.new_initial_state()
        self._chance(state)
        return state

    def __call__(self, steps: range) -> None:
        rng = self.rng
        for _ in steps:
            for i, state in enumerate(self.states):
                for p in self.players:  # what each player's policy reads
                    np.asarray(getattr(state, self.tensor)(p), np.float32)
                    state.legal_actions_mask(p)
                if state.is_simultaneous_node():
                    state.apply_actions([int(rng.choice(state.legal_actions(p))) for p in self.players])
                else:
                    state.apply_action(int(rng.choice(state.legal_actions())))
                self._chance(state)
                if state.is_terminal():
                    self.states[i] = self._new()

    def sync(self) -> None:
        """Nothing is queued: OpenSpiel steps synchronously."""


def _loops(env: OpenSpielEnv, plan: Sequence[TensorDictBase], chunks: Sequence[range]
           ) -> tuple[dict[str, Loop], dict[str, float]]:
    return with_workers(env, plan, {"raw pyspiel loop": _ByHand(env, plan)}), {}


#: One game state per batch entry: a small default batch.
BENCH = References(default_num_envs=8, loops=_loops)
