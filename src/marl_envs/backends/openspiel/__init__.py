"""OpenSpiel games, batched by the PettingZoo machinery: turn-based games through PettingZoo's AEC API,
simultaneous-move games through its parallel API.

>>> import marl_envs
>>> env = marl_envs.make("openspiel/kuhn_poker", num_envs=2, seed=0)
>>> env.group_map
{'agents': ['player_0', 'player_1']}
>>> env.reset()["agents", "action_mask"].shape
torch.Size([2, 2, 2])

Every game ``pyspiel.registered_games()`` lists that loads with its default parameters, has turn-based or
simultaneous moves, an observation (or information-state) tensor, and explicit chance outcomes (or none); its
parameters are keywords (``players=3``), checked against the game's own. Player ``p`` is the agent ``player_p``;
the players form one group, ``agents`` (their specs are equal). Each game state is one env:

- **Observations.** ``(group, "observation")`` is the player's ``observation_tensor`` (the
  ``information_state_tensor`` for games without one), shaped as the game declares; ``(group, "action_mask")``
  its legal actions (all True for a player with none at that node, whose action is ignored).
- **Turns.** A turn-based game's ``(group, "mask")`` marks the player to act; one step applies its action. A
  simultaneous node applies every player's action at once.
- **Chance.** Chance nodes are resolved inside ``reset`` and ``step``: outcome ``k`` of ``state.chance_outcomes()``
  drawn with probability ``p_k`` by ``numpy.random.default_rng(seed)`` of the instance (``rng.choice(len(outcomes),
  p=probabilities)``), so that a raw ``pyspiel`` loop drawing the same way is reproduced exactly.
  ``(group, "info", "chance")`` is the last outcome drawn in that reset or step (-1: none).
- **Rewards.** Each step's change of ``state.returns()``: the terminal returns for games that score at the end.
- **Ends.** The episode terminates at a terminal state. A game with a ``horizon`` parameter (``markov_soccer``,
  ``laser_tag``, ``pig``, ``cliff_walking``, ...) has a time limit: ``env.max_steps`` is that horizon in env steps
  (``horizon=N`` lengthens it), and a game it ends is *truncated*, not terminated (OpenSpiel ends both alike: the
  state is replayed in the same game with a longer horizon to tell them apart, once per episode). Any other game
  ends itself within ``game.max_game_length()`` moves: ``env.max_episode_length``, with ``env.max_steps`` None.

Left out, with the reason: mean-field games, games with neither tensor (their observations are strings), games
with sampled chance (``SAMPLED_STOCHASTIC``: the library draws the outcomes itself) and games that need parameters.
"""

from ..pettingzoo import family_record

BACKEND = family_record(__name__, "pyspiel", env_class="OpenSpielEnv", check_env=("openspiel/kuhn_poker", {}),
                        example=("openspiel/tic_tac_toe", {"render_mode": "rgb_array"}),
                        title="OpenSpiel", distributions=("open-spiel", "pettingzoo"), bench=f"{__name__}.bench",
                        docs="backends/openspiel.md")
__getattr__, __dir__ = BACKEND.lazy_attributes()
