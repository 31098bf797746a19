"""A pure-torch multi-group env written only against the backend hook (CONTRACT section 8)."""

from __future__ import annotations

import torch
from tensordict import TensorDict

import marl_envs
from marl_envs.specs import Bounded, Categorical, Composite, Unbounded


class PredatorPreyCount(marl_envs.EnvBase):
    """Two groups: ``predator`` (continuous 2-d actions) and ``prey`` (5 discrete actions, masked, own ends).

    Every env counts its steps; the prey group terminates when the count reaches a per-env random threshold
    and the env terminates with it. Action 4 of the prey is masked out on odd counts.
    """

    def __init__(self, *, num_envs: int, device="cpu", max_steps=None, group_map=None, n_predators: int = 2):
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps)
        B, n = num_envs, n_predators
        self.agent_names = [f"predator_{i}" for i in range(n)] + ["prey_0"]
        self.group_map = group_map or {"predator": self.agent_names[:n], "prey": ["prey_0"]}
        sizes = {g: len(m) for g, m in self.group_map.items()}
        self.full_observation_spec = Composite(
            predator=Composite(observation=Unbounded((B, sizes["predator"], 3), device=device), shape=(B, sizes["predator"]), device=device),
            prey=Composite(
                observation=Unbounded((B, 1, 3), device=device),
                action_mask=marl_envs.specs.Binary((B, 1, 5), device=device),
                shape=(B, 1), device=device,
            ),
            state=Unbounded((B, 4), device=device),
            shape=(B,), device=device,
        )
        self.full_action_spec = Composite(
            predator=Composite(action=Bounded(-1.0, 1.0, (B, sizes["predator"], 2), device=device), shape=(B, sizes["predator"]), device=device),
            prey=Composite(action=Categorical(5, (B, 1), device=device), shape=(B, 1), device=device),
            shape=(B,), device=device,
        )
        self.full_reward_spec = Composite(
            predator=Composite(reward=Unbounded((B, sizes["predator"], 1), device=device), shape=(B, sizes["predator"]), device=device),
            prey=Composite(reward=Unbounded((B, 1, 1), device=device), shape=(B, 1), device=device),
            shape=(B,), device=device,
        )
        self.full_done_spec = Composite(
            prey=Composite(terminated=marl_envs.specs.Binary((B, 1, 1), device=device), shape=(B, 1), device=device),
            shape=(B,), device=device,
        )
        self.count = torch.zeros(B, device=device)
        self.threshold = torch.zeros(B, device=device)
        self.rng = torch.Generator(device=device)
        self.rng.manual_seed(0)

    def _set_seed(self, seed: int) -> None:
        self.rng.manual_seed(seed)

    def _observe(self) -> TensorDict:
        B = self.num_envs
        n = len(self.group_map["predator"])
        base = torch.stack([self.count, self.threshold, self.count / 10], -1)
        odd = (self.count % 2 == 1).view(B, 1, 1)
        mask = torch.ones(B, 1, 5, dtype=torch.bool, device=self.device)
        mask[..., 4] = ~odd[..., 0]
        return TensorDict(
            {
                "predator": {"observation": base.unsqueeze(1).expand(B, n, 3) + torch.arange(n, device=self.device).view(1, n, 1)},
                "prey": {"observation": base.unsqueeze(1), "action_mask": mask},
                "state": torch.cat([base, self.count.unsqueeze(-1)], -1),
            },
            batch_size=self.batch_size,
        )

    def _reset(self, mask):
        fresh = torch.randint(3, 9, (self.num_envs,), generator=self.rng, device=self.device).float()
        if mask is None:
            self.count.zero_()
            self.threshold.copy_(fresh)
        else:
            self.count.masked_fill_(mask, 0)
            self.threshold.copy_(torch.where(mask, fresh, self.threshold))
        return self._observe()

    def _step(self, td):
        B = self.num_envs
        self.count += 1
        predator_action = td["predator", "action"]
        prey_action = td["prey", "action"]
        caught = self.count >= self.threshold
        out = self._observe()
        out["predator", "reward"] = predator_action.sum(-1, keepdim=True) + self.count.view(B, 1, 1)
        out["prey", "reward"] = prey_action.float().unsqueeze(-1) - self.count.view(B, 1, 1)
        out["prey", "terminated"] = caught.view(B, 1, 1)
        out["terminated"] = caught.view(B, 1)
        return out


class Drift(marl_envs.EnvBase):
    """One group ``agents``; each agent moves a point by its 1-d action; the env ends when any leaves [-3, 3].

    With ``single_agent=True`` the data sits at the root (``observation``, ``action``, ``reward``), like
    single-agent Brax envs.
    """

    def __init__(self, *, num_envs: int, n_agents: int = 2, device="cpu", max_steps=None, single_agent=False):
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps)
        B, n = num_envs, n_agents
        self.single_agent = single_agent
        if single_agent:
            n = 1
            self.full_observation_spec = Composite(observation=Unbounded((B, 1), device=device), shape=(B,), device=device)
            self.full_action_spec = Composite(action=Bounded(-1.0, 1.0, (B, 1), device=device), shape=(B,), device=device)
            self.full_reward_spec = Composite(reward=Unbounded((B, 1), device=device), shape=(B,), device=device)
        else:
            self.group_map = {"agents": [f"agent_{i}" for i in range(n)]}
            group = lambda **specs: Composite(specs, shape=(B, n), device=device)  # noqa: E731
            self.full_observation_spec = Composite(agents=group(observation=Unbounded((B, n, 1), device=device)), shape=(B,), device=device)
            self.full_action_spec = Composite(agents=group(action=Bounded(-1.0, 1.0, (B, n, 1), device=device)), shape=(B,), device=device)
            self.full_reward_spec = Composite(agents=group(reward=Unbounded((B, n, 1), device=device)), shape=(B,), device=device)
        self.pos = torch.zeros(B, n, 1, device=device)
        self.rng = torch.Generator(device=device)

    def _set_seed(self, seed):
        self.rng.manual_seed(seed)

    def _observe(self, reward=None):
        if self.single_agent:
            data = {"observation": self.pos[:, 0]}
            if reward is not None:
                data["reward"] = reward[:, 0]
        else:
            data = {"agents": {"observation": self.pos.clone()}}
            if reward is not None:
                data["agents"]["reward"] = reward
        return TensorDict(data, batch_size=self.batch_size)

    def _reset(self, mask):
        fresh = torch.rand(self.pos.shape, generator=self.rng, device=self.device) - 0.5
        self.pos = fresh if mask is None else torch.where(mask.view(-1, 1, 1), fresh, self.pos)
        return self._observe()

    def _step(self, td):
        action = td["action"].unsqueeze(1) if self.single_agent else td["agents", "action"]
        self.pos = self.pos + action
        out = self._observe(reward=-self.pos.abs())
        out["terminated"] = (self.pos.abs() > 3).flatten(1).any(-1, keepdim=True)
        return out


# Envs whose default configurations cost seconds per step or reset on a 2-core CPU (road_traffic's 20 cars,
# pollock's 45 entities, sampling's batched reset looping over 1600 grid cells in Python) run small in the
# sweeps; their default configurations run under --all.
SMALL_KWARGS = {
    "vmas/road_traffic": {"n_agents": 4},
    "vmas/pollock": {"n_agents": 3, "n_lines": 3, "n_boxes": 3},
    "vmas/sampling": {"grid_spacing": 0.25},
}


def cheapest_brax_kwargs(name: str) -> dict:
    """For ``brax/<name>``: Brax's spring pipeline (its fastest on CPU) where the env takes it, else nothing."""
    import warnings

    from marl_envs._core import keywords
    from marl_envs.backends.brax import scenes
    from marl_envs.backends.brax._compat import import_brax

    brax_envs = import_brax()  # quietly: Brax imports JAXopt, which warns (an error under filterwarnings=error)

    robot = scenes.SCENES[name].robot if name in scenes.SCENES else name
    accepted = keywords.declared("brax", robot)
    if accepted is not None and "backend" not in accepted:  # no physics pipeline (fast): we refuse the keyword
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            brax_envs.get_environment(robot, backend="spring")
        except ValueError:
            return {}
    return {"backend": "spring"}


def play_to_max_steps(env):
    """Random play (``step_and_maybe_reset``) to ``env.max_steps``, its last step without a reset (the instances as
    that step left them): the ``"next"`` data of the step that reaches it, which envs had not ended before it, and
    the ``"next"`` data of the step before (None when ``max_steps`` is 1)."""
    B = env.num_envs
    td, ended, before = env.reset(), torch.zeros(B, dtype=torch.bool, device=env.device), None
    for _ in range(env.max_steps - 1):
        td, root = env.step_and_maybe_reset(env.rand_action(td))
        before = td["next"]
        ended |= before["done"].reshape(B)
        td = root
    return env.step(env.rand_action(td))["next"], ~ended, before


class Outlive(marl_envs.EnvBase):
    """One group ``agents`` of 2 with ends of their own: ``agent_0`` terminates alone at the env's 2nd step (and stays
    done), the env at a per-env random step from 4 to 7, or at ``max_steps``. Observations: the step count, whether
    each agent is still in its episode, and the agent's index; reward 1 for action 1, else 0."""

    def __init__(self, *, num_envs: int, device="cpu", max_steps=None):
        super().__init__(num_envs=num_envs, device=device, max_steps=max_steps)
        B = num_envs
        self.group_map = {"agents": ["agent_0", "agent_1"]}
        group = lambda **specs: Composite(specs, shape=(B, 2), device=device)  # noqa: E731
        self.full_observation_spec = Composite(agents=group(observation=Unbounded((B, 2, 3), device=device)),
                                               shape=(B,), device=device)
        self.full_action_spec = Composite(agents=group(action=Categorical(3, (B, 2), device=device)), shape=(B,),
                                          device=device)
        self.full_reward_spec = Composite(agents=group(reward=Unbounded((B, 2, 1), device=device)), shape=(B,),
                                          device=device)
        self.full_done_spec = Composite(agents=group(terminated=marl_envs.specs.Binary((B, 2, 1), device=device)),
                                        shape=(B,), device=device)
        self.count = torch.zeros(B, device=device)
        self.threshold = torch.zeros(B, device=device)
        self.rng = torch.Generator(device=device)

    def _set_seed(self, seed):
        self.rng.manual_seed(seed)

    def _ended(self):
        return torch.stack([self.count >= 2, self.count >= self.threshold], -1)

    def _observe(self):
        B = self.num_envs
        alive = (~self._ended()).float()
        index = torch.arange(2, device=self.device).float().expand(B, 2)
        return TensorDict({"agents": {"observation": torch.stack([self.count.unsqueeze(-1).expand(B, 2), alive,
                                                                  index], -1)}}, batch_size=self.batch_size)

    def _reset(self, mask):
        fresh = torch.randint(4, 8, (self.num_envs,), generator=self.rng, device=self.device).float()
        mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device) if mask is None else mask
        self.count.masked_fill_(mask, 0)
        self.threshold.copy_(torch.where(mask, fresh, self.threshold))
        return self._observe()

    def _step(self, td):
        self.count += 1
        out = self._observe()
        ended = self._ended()
        ended[:, 0] |= ended[:, 1]
        out["agents", "reward"] = (td["agents", "action"] == 1).float().unsqueeze(-1)
        out["agents", "terminated"] = ended.unsqueeze(-1)
        out["terminated"] = ended[:, 1:]
        return out
