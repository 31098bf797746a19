"""Independent PPO (IPPO) for any env ``marl_envs.make`` accepts: per group, one policy and one value head, each
shared by the group's agents. Every key comes from the env. examples/mappo.py is the full version.

    python examples/ippo_minimal.py                                    # vmas/navigation, 3 agents
    python examples/ippo_minimal.py --env vmas/balance --env-kwargs n_agents=3 max_steps=100
    python examples/ippo_minimal.py --env gymnax/CartPole-v1          # one agent: its keys are at the root
"""

import argparse

import torch
from torch import nn

import marl_envs
from marl_envs.cli import parse_kwargs
from marl_envs.specs import Bounded, Categorical

ENV_KWARGS = {"vmas/navigation": {"n_agents": 3, "max_steps": 100}}  # VMAS episodes only end at a max_steps


def prefix(key) -> tuple:
    """``(group,)`` for a group's key, ``()`` for a root key (a single-agent env's)."""
    return key[:-1] if isinstance(key, tuple) else ()


def mlp(n_in: int, n_out: int, width: int = 64) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, n_out))


class Group(nn.Module):
    """The agents under one action key: a policy and a value head, each shared by the group's agents."""

    def __init__(self, env: marl_envs.EnvBase, action_key):
        super().__init__()
        group = prefix(action_key)
        self.action, self.spec = action_key, env.full_action_spec[action_key]
        self.reward = next(key for key in env.reward_keys if prefix(key) == group)
        self.obs, mask = (*group, "observation"), (*group, "action_mask")
        self.mask = mask if mask in env.observation_keys else None
        self.sample, self.log_prob, self.adv, self.ret = [(*group, k) for k in ("sample", "log_prob", "adv", "ret")]
        obs_shape = env.full_observation_spec[self.obs].shape[1 + len(group):]  # past (envs, agents)
        self.obs_dims, self.value = len(obs_shape), mlp(obs_shape.numel(), 1)
        if isinstance(self.spec, Categorical):
            self.pi = mlp(obs_shape.numel(), self.spec.n)
        elif isinstance(self.spec, Bounded):
            self.pi = mlp(obs_shape.numel(), self.spec.shape[-1])
            self.log_std = nn.Parameter(torch.zeros(self.spec.shape[-1]))
        else:
            raise TypeError(f"{action_key}: ippo_minimal.py takes Categorical or Bounded actions, got {self.spec}")

    def forward(self, td):
        """The action distribution and the values, from the group's entries of ``td``."""
        obs = td[self.obs].float().flatten(-self.obs_dims)
        out, value = self.pi(obs), self.value(obs)
        if isinstance(self.spec, Bounded):
            return torch.distributions.Independent(torch.distributions.Normal(out, self.log_std.exp()), 1), value
        if self.mask is not None:  # a forbidden choice gets probability 0: the env would refuse it
            out = out.masked_fill(~td[self.mask], -1e9)
        return torch.distributions.Categorical(logits=out), value

    @torch.no_grad()
    def act(self, td):
        dist, _ = self(td)
        sample = dist.sample()
        td[self.sample], td[self.log_prob] = sample, dist.log_prob(sample)
        bounded = isinstance(self.spec, Bounded)  # the env takes the Gaussian sample clipped to its bounds
        td[self.action] = sample.clamp(self.spec.low[0], self.spec.high[0]) if bounded else sample
        return td

    def gae(self, data, gamma: float = 0.99, lmbda: float = 0.95) -> None:
        """Advantages and value targets into ``data`` (envs, T). The env is the unit of episodes: its root ``done``
        ends the chain, its root ``terminated`` (an end that is no time limit) the bootstrap."""
        reward = data["next", self.reward]
        with torch.no_grad():
            value, next_value = self(data)[1], self(data["next"])[1]
        shape = (*reward.shape[:2], *[1] * (reward.ndim - 2))  # (envs, T, 1, 1) against a group's (envs, T, n, 1)
        done, terminated = [data["next", key].view(shape) for key in ("done", "terminated")]
        advantage, running = torch.zeros_like(reward), torch.zeros_like(reward[:, 0])
        for t in reversed(range(reward.shape[1])):
            delta = reward[:, t] + gamma * next_value[:, t] * ~terminated[:, t] - value[:, t]
            advantage[:, t] = running = delta + gamma * lmbda * ~done[:, t] * running
        data[self.adv], data[self.ret] = advantage, advantage + value

    def loss(self, batch, clip: float = 0.2):
        """The clipped PPO objective and the value error."""
        dist, value = self(batch)
        advantage = batch[self.adv]
        ratio = (dist.log_prob(batch[self.sample]) - batch[self.log_prob]).exp().unsqueeze(-1)
        policy = -torch.min(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage).mean()
        return policy + (value - batch[self.ret]).pow(2).mean()


def mean_episode_reward(env, data) -> float:
    """Finished episodes' returns (summed over steps, averaged over each group's agents, then over groups)."""
    reward = sum(data["next", k].flatten(2).mean(-1) for k in env.reward_keys) / len(env.reward_keys)  # (envs, T)
    done = data["next", env.done_key].squeeze(-1)
    finished = done.flip(1).cumsum(1).flip(1) > 0  # steps up to each env's last episode end
    return ((reward * finished).sum() / done.sum()).item()  # nan where no episode ended


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="vmas/navigation")
    p.add_argument("--env-kwargs", nargs="*", metavar="KEY=VALUE", help="for marl_envs.make (default: ENV_KWARGS)")
    p.add_argument("--frames", type=int, default=120_000)
    p.add_argument("--num-envs", type=int, default=60)
    p.add_argument("--steps", type=int, help="steps per env per iteration (default: the env's max_steps, else 100)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--minibatch", type=int, default=600, help="(env, step) samples per gradient step")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small networks: one thread is as fast, and a seed repeats on any machine
    kwargs = ENV_KWARGS.get(args.env, {}) if args.env_kwargs is None else parse_kwargs(args.env_kwargs)
    env = marl_envs.make(args.env, num_envs=args.num_envs, seed=args.seed, **kwargs)
    groups = nn.ModuleList(Group(env, key) for key in env.action_keys)
    optim = torch.optim.Adam(groups.parameters(), lr=args.lr)

    def policy(td):
        return [group.act(td) for group in groups][-1]  # each group writes its entries into td

    steps = args.steps or env.max_steps or 100  # whole episodes where they have a length limit
    iterations = max(1, args.frames // (args.num_envs * steps))
    for iteration in range(iterations):
        data = env.rollout(steps, policy, break_when_any_done=False)  # (envs, steps), from fresh episodes
        for group in groups:
            group.gae(data)
        flat = data.reshape(-1)
        for _ in range(args.epochs):
            for idx in torch.randperm(len(flat)).split(args.minibatch):
                loss = sum(group.loss(flat[idx]) for group in groups)
                optim.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(groups.parameters(), 1.0)
                optim.step()
        trained = mean_episode_reward(env, data)
        print(f"frames {(iteration + 1) * data.numel():>7}  mean episode reward {trained:.3f}")

    env.set_seed(args.seed + 1)  # the same frames of uniformly random actions, as a reference
    random = sum(mean_episode_reward(env, env.rollout(steps, env.rand_action, break_when_any_done=False))
                 for _ in range(iterations)) / iterations
    print(f"trained {trained:.3f}, random policy {random:.3f} (mean episode reward)")
    torch.set_num_threads(threads)  # the caller's count back (tests call main in-process)
    return {"frames": iterations * data.numel(), "final_reward": trained, "random_reward": random}


if __name__ == "__main__":
    main()
