"""MAPPO written with TorchRL's own components, on any env ``marl_envs.make`` accepts.

The env is ``marl_envs.torchrl.to_torchrl(marl_envs.make(...))`` under a ``TransformedEnv`` with ``RewardSum``;
everything else is TorchRL's: ``Collector``, ``MultiAgentMLP`` policies (one per group, parameters shared inside
the group) with ``ProbabilisticActor`` + ``TanhNormal`` (continuous) or a (masked) categorical, centralised
``MultiAgentMLP`` critics, ``ClipPPOLoss`` + ``GAE``, a ``ReplayBuffer`` sampling minibatches without replacement.
Every key (actions, rewards, done flags, observations, action masks) is read from the env.

    python examples/mappo_torchrl.py --env vmas/navigation --out runs/torchrl_navigation
    python examples/mappo_torchrl.py --env brax/ant_4x2 --out runs/torchrl_ant

Writes ``OUT/metrics.csv`` (frames, rewards and the env's infos at episode ends: SMAX's ``won`` is the win rate),
``OUT/timings.csv`` (wall times), ``OUT/summary.json`` (final mean episode reward, the same for a random policy,
wall time) and ``OUT/learning_curve.png``; ``OUT/checkpoint.pt`` every ``--checkpoint-every`` iterations, from
which ``--resume OUT`` continues a stopped or killed run (as ``examples/mappo.py``). Needs the torchrl extra
(``pip install 'marl-envs[torchrl]'``).

On N processes, CPUs or GPUs, as ``examples/mappo.py`` (``docs/scaling.md``):

    torchrun --standalone --nproc_per_node 2 examples/mappo_torchrl.py --env vmas/navigation --num-envs 30

Every rank builds ``--num-envs`` envs seeded per rank (on ``cuda:LOCAL_RANK`` when CUDA is available and no
``--device`` is given), starts from rank 0's parameters and averages its gradients with the others' before each
step, so every rank holds the same parameters (checked at the end); ``--frames`` and ``--minibatch`` count over
all ranks, episode statistics are summed over ranks, and rank 0 alone writes the files.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import distributed as dist
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import Bounded, Categorical, OneHot
from torchrl.data.replay_buffers import ReplayBuffer
from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
from torchrl.data.replay_buffers.storages import LazyTensorStorage
from torchrl.envs import DTypeCastTransform, FlattenObservation, RewardSum, TransformedEnv
from torchrl.modules import (
    MLP,
    MaskedCategorical,
    MaskedOneHotCategorical,
    MultiAgentMLP,
    OneHotCategorical,
    ProbabilisticActor,
    TanhNormal,
)
from torchrl.objectives import ClipPPOLoss, ValueEstimators

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common.py, from any working directory
from _common import (  # noqa: E402  (bookkeeping shared with mappo.py: checkpoints, metrics.csv, the plot)
    NOT_METRICS, add_checkpoint_arguments, as_tuple, check_random_frames, load_checkpoint, resumed_args,
    save_checkpoint, write_metrics, write_outputs,
)

import marl_envs
from marl_envs import distributed
from marl_envs.cli import parse_kwargs
from marl_envs.torchrl import COLLECTOR_KWARGS, to_torchrl

# Per-env settings (as in examples/mappo.py, for the envs listed); anything else gets the generic defaults.
PRESETS: dict[str, dict] = {
    "vmas/navigation": {"env_kwargs": {"n_agents": 3, "max_steps": 100}, "num_envs": 60, "frames": 120_000},
    "vmas/balance": {"env_kwargs": {"n_agents": 3, "max_steps": 100}, "num_envs": 60, "frames": 120_000},
    "brax/ant_4x2": {"env_kwargs": {"backend": "spring", "max_steps": 250}, "num_envs": 64, "frames": 400_000,
                     "steps_per_batch": 100, "epochs": 10, "minibatch": 1600},
}
GENERIC = {"env_kwargs": {}, "num_envs": 32, "frames": 60_000, "steps_per_batch": None, "epochs": 30,
           "minibatch": 400}


class Group:
    """The keys of one group (or of the root, for a single-agent env), all read from the env."""

    def __init__(self, env, action_key):
        self.action = action_key
        self.prefix = as_tuple(action_key)[:-1]
        self.name = self.prefix[0] if self.prefix else "agent"
        self.n_agents = len(env.group_map[self.name]) if self.prefix else 1
        at = (lambda name: (*self.prefix, name)) if self.prefix else (lambda name: name)
        self.reward = next(k for k in env.reward_keys if as_tuple(k)[:-1] == self.prefix)
        self.observation = at("observation")
        if self.observation not in env.observation_keys:
            raise ValueError(f"{self.name}: no {self.observation!r} entry; observation keys are {env.observation_keys}")
        self.mask = at("action_mask") if at("action_mask") in env.observation_keys else None
        # GAE reads the root done flags, expanded to (..., n_agents, 1), or-ed with the group's own if it has them.
        self.own_done = at("done") in env.done_keys
        self.done = at("done") if self.prefix else "done"
        self.terminated = at("terminated") if self.prefix else "terminated"
        self.log_prob, self.value = at("action_log_prob"), at("state_value")
        self.advantage, self.value_target = at("advantage"), at("value_target")
        self.episode_reward = at("episode_reward")
        # infos that measure play (not a game's chance outcome or player to act)
        self.infos = [k for k in env.observation_keys if as_tuple(k)[:len(self.prefix) + 1] == (*self.prefix, "info")
                      and as_tuple(k)[-1] not in NOT_METRICS]


def policy_module(env, g: Group, hidden: int) -> ProbabilisticActor:
    spec = env.full_action_spec[g.action]
    obs_dim = env.full_observation_spec[g.observation].shape[-1]
    continuous = isinstance(spec, Bounded)
    if not continuous and not isinstance(spec, (Categorical, OneHot)):
        raise TypeError(f"mappo_torchrl.py supports Bounded, Categorical and OneHot actions, got {type(spec).__name__}")
    n_out = 2 * spec.shape[-1] if continuous else spec.n
    if g.prefix:
        net = MultiAgentMLP(n_agent_inputs=obs_dim, n_agent_outputs=n_out, n_agents=g.n_agents, centralised=False,
                            share_params=True, depth=2, num_cells=hidden, activation_class=nn.Tanh)
    else:
        net = MLP(in_features=obs_dim, out_features=n_out, depth=2, num_cells=hidden, activation_class=nn.Tanh)
    at = (lambda name: (*g.prefix, name)) if g.prefix else (lambda name: name)
    if continuous:
        module = TensorDictModule(nn.Sequential(net, NormalParamExtractor()), in_keys=[g.observation],
                                  out_keys=[at("loc"), at("scale")])
        dist_keys, dist = {"loc": at("loc"), "scale": at("scale")}, TanhNormal
        # Bounds are per agent and dimension: the spec's first env holds them all.
        dist_kwargs = {"low": spec.space.low[0], "high": spec.space.high[0]}
    else:
        module = TensorDictModule(net, in_keys=[g.observation], out_keys=[at("logits")])
        dist_keys, dist_kwargs = {"logits": at("logits")}, {}
        if g.mask is not None:
            dist_keys["mask"] = g.mask
            dist = MaskedOneHotCategorical if isinstance(spec, OneHot) else MaskedCategorical
        else:
            dist = OneHotCategorical if isinstance(spec, OneHot) else torch.distributions.Categorical
    return ProbabilisticActor(
        module=module, spec=spec, in_keys=dist_keys, out_keys=[g.action], distribution_class=dist,
        distribution_kwargs=dist_kwargs, return_log_prob=True, log_prob_key=g.log_prob,
    )


def critic_module(env, g: Group, hidden: int, centralised: bool) -> TensorDictModule:
    obs_dim = env.full_observation_spec[g.observation].shape[-1]
    if g.prefix:
        net = MultiAgentMLP(n_agent_inputs=obs_dim, n_agent_outputs=1, n_agents=g.n_agents, centralised=centralised,
                            share_params=True, depth=2, num_cells=hidden, activation_class=nn.Tanh)
    else:
        net = MLP(in_features=obs_dim, out_features=1, depth=2, num_cells=hidden, activation_class=nn.Tanh)
    return TensorDictModule(net, in_keys=[g.observation], out_keys=[g.value])


def make_env(args):
    """The env under ``RewardSum``; an observation of more than one feature dim (a board's planes) flattened, and
    one of integers (a grid) cast to float, for the MLPs."""
    base = to_torchrl(marl_envs.make(args.env, num_envs=args.num_envs, device=args.device, **args.env_kwargs))
    groups = [Group(base, key) for key in base.action_keys]
    env = TransformedEnv(base, RewardSum(in_keys=[g.reward for g in groups],
                                         out_keys=[g.episode_reward for g in groups]))
    for g in groups:
        spec = base.full_observation_spec[g.observation]
        features = spec.ndim - base.batch_dims - (1 if g.prefix else 0)  # past (envs, agents)
        if not spec.dtype.is_floating_point:
            env.append_transform(DTypeCastTransform(spec.dtype, torch.float32, in_keys=[g.observation]))
        if features > 1:
            env.append_transform(FlattenObservation(-features, -1, in_keys=[g.observation]))
    return env, groups


def expand_done(data, groups: list[Group]) -> None:
    """Give each group the root done flags, shaped like its rewards (what GAE reads); a group with done flags of
    its own gets them or-ed in, since an agent's own flag may stay False where the env's episode ends (a SMAX unit
    alive when its side wins)."""
    for g in groups:
        if g.prefix:
            shape = data.get(("next", *as_tuple(g.reward))).shape
            for name, key in (("done", g.done), ("terminated", g.terminated)):
                flag = data.get(("next", name)).unsqueeze(-1).expand(shape)
                if g.own_done:
                    flag = flag | data.get(("next", *as_tuple(key)))
                data.set(("next", *as_tuple(key)), flag)


def episode_rewards(data, groups: list[Group], info: distributed.RankInfo | None = None, team: bool = False
                    ) -> dict[str, float]:
    """Per group: the mean over finished episodes (of every rank) of the per-agent return averaged over the agents
    (summed with ``team``: the team's return, as EPyMARL's tasks report it); nan if none finished."""
    done = data.get(("next", "done"))  # (..., 1): the env is the unit of episodes
    sums_counts = []
    for g in groups:
        returns = data.get(("next", *as_tuple(g.episode_reward)))
        per_agent = returns.flatten(len(done.shape) - 1)
        per_env = (per_agent.sum(-1) if team else per_agent.mean(-1)) if g.prefix else returns[..., 0]
        ended = per_env[done[..., 0]]
        sums_counts.append(torch.stack([ended.sum(), torch.tensor(float(ended.numel()), device=ended.device)]))
    totals = torch.stack(sums_counts)
    if info is not None and info.world_size > 1:
        dist.all_reduce(totals)
    return {g.name: s / c if c else float("nan") for g, (s, c) in zip(groups, totals.tolist())}


def episode_infos(data, groups: list[Group], info: distributed.RankInfo | None = None) -> dict[str, float]:
    """Each group's info entries averaged over the steps that end an episode (of every rank), as
    ``"<group>/<key>"``: SMAX's ``won`` is the win rate."""
    done = data.get(("next", "done"))[..., 0]
    names, sums_counts = [], []
    for g in groups:
        for key in g.infos:
            value = data.get(("next", *as_tuple(key)))
            per_env = value.flatten(done.ndim).float().mean(-1)[done]
            names.append(f"{g.name}/{'/'.join(as_tuple(key)[len(g.prefix) + 1:])}")
            sums_counts.append(torch.stack([per_env.sum(), torch.tensor(float(per_env.numel()), device=done.device)]))
    if not names:
        return {}
    totals = torch.stack(sums_counts)
    if info is not None and info.world_size > 1:
        dist.all_reduce(totals)
    return {name: s / c if c else float("nan") for name, (s, c) in zip(names, totals.tolist())}


def info_columns(infos: dict[str, float], groups: int) -> dict[str, float]:
    """Info means given as ``"<group>/<key>"`` as metrics columns: ``<key>`` for an env of one group, else
    ``<key>_<group>`` (the TorchRL variant's)."""
    columns = {}
    for name, value in infos.items():
        group, key = name.split("/", 1)
        columns[key if groups == 1 else f"{key}_{group}"] = value
    return columns


def mean_of(values) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else float("nan")


def random_policy_reward(args, frames: int, steps: int) -> tuple[float, int]:
    """The same accounting as training, over ``frames`` frames (whole batches) of the env's random actions; the
    mean episode reward and the frames."""
    env, groups = make_env(args)
    env.set_seed(12345)
    batch = args.num_envs * steps
    frames = max(1, frames // batch) * batch
    print(f"random policy: {frames:,} frames for the baseline (--random-frames)", flush=True)
    # the env's rand_action honours action masks (TorchRL's default random policy draws from the spec alone)
    collector = Collector(env, env.rand_action, frames_per_batch=batch, total_frames=frames, **COLLECTOR_KWARGS)
    rewards = [mean_of(episode_rewards(data, groups, team=args.team_return).values()) for data in collector]
    collector.shutdown()
    return mean_of(rewards), frames


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="vmas/navigation", help="any name marl_envs.make accepts")
    p.add_argument("--env-kwargs", nargs="*", default=None, metavar="KEY=VALUE", help="forwarded to marl_envs.make")
    p.add_argument("--num-envs", type=int)
    p.add_argument("--frames", type=int, help="env-steps to train for")
    p.add_argument("--steps-per-batch", type=int, help="steps per env per iteration (default: max_steps, or 100)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--minibatch", type=int, help="(env, step) samples per gradient step")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--lmbda", type=float, default=0.9)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--entropy", type=float, default=1e-4)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--normalize-advantage", action="store_true",
                   help="standardise the advantages of each minibatch (for sparse, small rewards: EPyMARL's tasks)")
    p.add_argument("--team-return", action="store_true",
                   help="report an episode's return as its agents' sum (EPyMARL's tasks), not their mean")
    p.add_argument("--ippo", action="store_true", help="decentralised critics (IPPO)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", help="default: cpu; under torchrun cuda:LOCAL_RANK when CUDA is available, else cpu")
    p.add_argument("--out", default=None, help="output folder (default runs/torchrl_<env>)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--random-frames", type=int, metavar="N", help="env-steps of random actions for the baseline "
                   "in summary.json (default: as many as one rank trained on; whole batches, one at least)")
    add_checkpoint_arguments(p)
    args = p.parse_args(argv)
    check_random_frames(p, args)
    if resumed_args(p, args):
        return args
    preset = {**GENERIC, **PRESETS.get(args.env, {})}
    args.env_kwargs = parse_kwargs(args.env_kwargs) if args.env_kwargs is not None else dict(preset["env_kwargs"])
    for name in ("num_envs", "frames", "steps_per_batch", "epochs", "minibatch"):
        if getattr(args, name) is None:
            setattr(args, name, preset[name])
    args.out = Path(args.out or Path("runs") / f"torchrl_{args.env.replace('/', '_')}")
    return args


def average_gradients(params: list[torch.Tensor], world_size: int) -> None:
    """Every rank's gradients replaced by their mean over ranks, in one collective call."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    for p, g in zip(params, flat.split([g.numel() for g in grads])):
        p.grad = g.view_as(p)


def check_ranks_agree(params: list[torch.Tensor]) -> None:
    """Raise if the ranks' parameters differ (gradients not averaged the same way on every rank)."""
    mine = torch.stack([torch.cat([p.detach().reshape(-1) for p in params]).double().sum()])
    lowest, highest = mine.clone(), mine.clone()
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    dist.all_reduce(highest, op=dist.ReduceOp.MAX)
    if not torch.equal(lowest, highest):
        raise RuntimeError(f"the ranks' parameters differ after training (sums {lowest.item()} to {highest.item()})")


def train(args) -> dict:
    info = distributed.rank_info()
    if args.device is None:  # under torchrun this rank's GPU when CUDA is there, else the CPU
        args.device = str(distributed.rank_device(info) if info.launched else torch.device("cpu"))
    if args.minibatch % info.world_size:
        raise ValueError(f"--minibatch {args.minibatch} counts samples over all {info.world_size} ranks; "
                         f"pass a multiple of {info.world_size}")
    joined = distributed.init_process_group(args.device, info)  # None outside torchrun
    seed = distributed.rank_seed(args.seed, info.rank, info.world_size)  # args.seed itself on rank 0
    torch.manual_seed(seed)
    env, groups = make_env(args)
    env.set_seed(seed)
    steps = args.steps_per_batch or env.base_env.env.max_steps or 100
    frames_per_batch = args.num_envs * steps
    iterations = max(1, args.frames // (info.world_size * frames_per_batch))
    minibatch = args.minibatch // info.world_size  # per rank
    actors = [policy_module(env, g, args.hidden) for g in groups]
    critics = [critic_module(env, g, args.hidden, centralised=not args.ippo) for g in groups]
    losses = []
    for g, actor, critic in zip(groups, actors, critics):
        loss = ClipPPOLoss(actor_network=actor, critic_network=critic, clip_epsilon=args.clip,
                           entropy_coeff=args.entropy, normalize_advantage=args.normalize_advantage,
                           # over the samples and the agents together, as examples/mappo.py: the one dim kept apart
                           # is the trailing 1
                           normalize_advantage_exclude_dims=(-1,))
        loss.set_keys(action=g.action, reward=g.reward, done=g.done, terminated=g.terminated,
                      sample_log_prob=g.log_prob, value=g.value, advantage=g.advantage, value_target=g.value_target)
        loss.make_value_estimator(ValueEstimators.GAE, gamma=args.gamma, lmbda=args.lmbda)
        losses.append(loss)
    params = list(dict.fromkeys(p for loss in losses for p in loss.parameters()))  # shared ones once
    if info.world_size > 1:  # every rank starts from rank 0's parameters
        for p in params:
            dist.broadcast(p.data, src=0)
    optim = torch.optim.Adam(params, lr=args.lr)
    model = nn.ModuleList(losses)  # the policies and critics (shared modules once in its state)
    rows, frames, done_iterations, spent = [], 0, 0, 0.0
    if args.resume:
        rows, frames, done_iterations, spent, _ = load_checkpoint(args, model, optim, info.world_size)
        env.set_seed(seed + done_iterations)  # fresh episodes: the envs' state is not in the checkpoint
    collector = Collector(env, TensorDictSequential(*actors), frames_per_batch=frames_per_batch,
                          total_frames=max(1, iterations - done_iterations) * frames_per_batch, device=args.device,
                          **COLLECTOR_KWARGS)
    buffer = ReplayBuffer(storage=LazyTensorStorage(frames_per_batch, device=args.device),
                          sampler=SamplerWithoutReplacement(), batch_size=minibatch)

    bar = None
    if not args.quiet and info.is_main:
        from tqdm import tqdm

        bar = tqdm(total=iterations * info.world_size * frames_per_batch, unit="frame", unit_scale=True,
                   desc=args.env, initial=frames, disable=None)  # None: a bar only on a terminal
    start = time.perf_counter() - spent  # wall time counts on from the checkpoint's
    for iteration, data in enumerate(collector, start=done_iterations):
        if iteration >= iterations:  # a run resumed after its last iteration: nothing left to train
            break
        expand_done(data, groups)
        with torch.no_grad():
            for loss in losses:
                loss.value_estimator(data, params=loss.critic_network_params,
                                     target_params=loss.target_critic_network_params)
        frames += data.numel() * info.world_size
        per_group = episode_rewards(data, groups, info, team=args.team_return)
        infos = episode_infos(data, groups, info)
        buffer.extend(data.reshape(-1))
        for _ in range(args.epochs):
            for _ in range(max(1, frames_per_batch // minibatch)):
                sample = buffer.sample()
                total = 0.0
                for loss in losses:
                    out = loss(sample)
                    total = total + out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                optim.zero_grad()
                total.backward()
                if info.world_size > 1:
                    average_gradients(params, info.world_size)
                nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                optim.step()
        collector.update_policy_weights_()
        wall = time.perf_counter() - start
        row = {"frames": frames, "mean_episode_reward": mean_of(per_group.values()), "wall_s": round(wall, 2)}
        if len(per_group) > 1:
            row.update({f"reward_{name}": value for name, value in per_group.items()})
        row.update(info_columns(infos, len(per_group)))
        rows.append(row)
        if info.is_main:
            write_metrics(args, rows)  # every iteration: a run stopped early still leaves its curve
            last = iteration + 1 == iterations  # a finished run keeps its end too: --resume --frames extends it
            if args.checkpoint_every and ((iteration + 1) % args.checkpoint_every == 0 or last):
                save_checkpoint(args, rows, frames, iteration + 1, wall, model, optim)
        if bar is not None:
            bar.update(data.numel() * info.world_size)
            bar.set_postfix(episode_reward=f"{row['mean_episode_reward']:.3f}")
    collector.shutdown()
    if bar is not None:
        bar.close()
    if joined:
        check_ranks_agree(params)
        dist.destroy_process_group()
    wall = time.perf_counter() - start
    finite = [r["mean_episode_reward"] for r in rows if not math.isnan(r["mean_episode_reward"])]
    summary = {
        "env": args.env, "env_kwargs": args.env_kwargs, "algorithm": "IPPO" if args.ippo else "MAPPO",
        "frames": frames, "wall_s": round(wall, 2),
        "final_mean_episode_reward": finite[-1] if finite else float("nan"), "seed": args.seed,
        "world_size": info.world_size,
    }
    if not info.is_main:
        return summary
    # the random baseline on rank 0 alone, by default over as many frames as one rank trained on
    random_frames = frames // info.world_size if args.random_frames is None else args.random_frames
    summary["random_policy_reward"], summary["random_policy_frames"] = random_policy_reward(args, random_frames, steps)
    write_outputs(args, rows, summary, title=f"{summary['algorithm']} (TorchRL) on {summary['env']} "
                                            f"({summary['wall_s']:.0f} s)")
    return summary


def main(argv=None) -> dict:
    args = parse_args(argv)
    summary = train(args)
    if "random_policy_reward" in summary:  # rank 0 (or the only process)
        print(json.dumps(summary, indent=2))
        print(f"learning curve: {args.out / 'learning_curve.png'}")
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
