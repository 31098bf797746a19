"""Measure the parts of the data-parallel scaling model of docs/scaling.md, for one rank count.

Per rank: collection throughput (the MAPPO policy of examples/mappo.py acting in ``--num-envs`` envs,
``step_and_maybe_reset``), the time of one PPO gradient step on the per-rank share of a minibatch (and on the
shares of 1 to 16 ranks), and the time of one all-reduce of the gradients of every parameter the MAPPO update
trains. Each figure is the fastest of several tries (the machine may be shared); the run's collection rate is
every rank's frames over the slowest rank's time. Rank 0 prints a table (and ``--json`` writes it).

    python benchmarks/scaling.py --env vmas/navigation --num-envs 30
    torchrun --standalone --nproc_per_node 2 benchmarks/scaling.py --env vmas/navigation --num-envs 30
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch import distributed as dist

import marl_envs
from marl_envs import distributed
from marl_envs.cli import parse_kwargs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from _common import PRESETS, as_tuple, gae  # noqa: E402
from mappo import Agents  # noqa: E402  (the example's policies and critics)


def collect(env, td, act, steps: int):
    """``steps`` steps of ``env.step_and_maybe_reset(act(td))``: the (B, T) batch and the root to go on from."""
    out = []
    for _ in range(steps):
        td, td_next = env.step_and_maybe_reset(act(td))
        out.append(td)
        td = td_next
    return torch.stack(out, dim=1), td


def advantages(agents, data) -> None:
    """examples/mappo.py's GAE, into ``data``."""
    for g, critic in zip(agents.groups, agents.critics):
        value, next_value = critic(g, data), critic(g, data.get("next"))
        reward = data.get(("next", *as_tuple(g.reward)))
        done, terminated = (g.ended(data.get("next"), name, reward) for name in ("done", "terminated"))
        advantage = gae(reward, value, next_value, done, terminated, 0.99, 0.9)
        data.set(g.advantage, advantage)
        data.set(g.target, advantage + value)


def ppo_loss(agents, mb, clip: float = 0.2, entropy_coef: float = 1e-4) -> torch.Tensor:
    """examples/mappo.py's PPO loss of a minibatch (its default settings)."""
    loss = 0.0
    for g, policy, critic in zip(agents.groups, agents.policies, agents.critics):
        log_prob, entropy = policy.score(policy.dist(g.obs(mb), g.action_mask(mb)), mb.get(g.sample))
        ratio = (log_prob - mb.get(g.log_prob)).exp()
        advantage = mb.get(g.advantage)
        policy_loss = -torch.minimum(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage).mean()
        value_loss = torch.nn.functional.smooth_l1_loss(critic(g, mb), mb.get(g.target))
        loss = loss + policy_loss + value_loss - entropy_coef * entropy.mean()
    return loss


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="vmas/navigation")
    p.add_argument("--env-kwargs", nargs="*", default=None, metavar="KEY=VALUE")
    p.add_argument("--num-envs", type=int, default=30, help="envs per rank")
    p.add_argument("--steps", type=int, default=100, help="steps per collected batch")
    p.add_argument("--batches", type=int, default=5, help="timed batches (after one untimed); the fastest counts")
    p.add_argument("--minibatch", type=int, default=400, help="samples per gradient step, all ranks together")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--reps", type=int, default=100, help="timed gradient steps and all-reduces; the fastest counts")
    p.add_argument("--threads", type=int, default=None, help="torch threads per rank (default: torch's)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here (rank 0)")
    args = p.parse_args(argv)
    preset = PRESETS.get(args.env, {}).get("env_kwargs", {})
    args.env_kwargs = parse_kwargs(args.env_kwargs) if args.env_kwargs is not None else dict(preset)
    return args


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_ms(fn, reps: int, device: torch.device) -> float:
    """The fastest of ``reps`` calls, in ms: on a shared machine the one least disturbed by other work."""
    fn()  # warm-up
    times = []
    for _ in range(reps):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return 1e3 * min(times)


def bench(args: argparse.Namespace) -> dict:
    info = distributed.rank_info()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = distributed.rank_device(info) if info.launched else torch.device("cpu")
    distributed.init_process_group(device, info)
    seed = distributed.rank_seed(0, info.rank, info.world_size)
    torch.manual_seed(seed)
    env = marl_envs.make(args.env, num_envs=args.num_envs, device=device, **args.env_kwargs)
    env.set_seed(seed)
    loss_fn = Agents(env, args.hidden, centralised=True).to(device)
    act = loss_fn.act

    # collection: every rank starts together; the run's rate is all frames over the slowest rank's time
    with torch.no_grad():
        data, td = collect(env, env.reset(), act, args.steps)
        if info.world_size > 1:
            dist.barrier()
        seconds = float("inf")  # the fastest batch
        for _ in range(args.batches):
            _sync(device)
            start = time.perf_counter()
            data, td = collect(env, td, act, args.steps)
            _sync(device)
            seconds = min(seconds, time.perf_counter() - start)
        advantages(loss_fn, data)
    frames = args.steps * args.num_envs
    slowest = torch.tensor([seconds], device=device)
    if info.world_size > 1:
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)

    # one PPO gradient step on this rank's share of a minibatch (forward, backward, Adam), no communication
    optim = torch.optim.Adam(loss_fn.parameters(), lr=3e-4)
    flat = data.reshape(-1)
    share = args.minibatch // info.world_size
    generator = torch.Generator(device=device).manual_seed(seed)

    def grad_step(samples: int) -> None:
        idx = torch.randint(flat.shape[0], (samples,), generator=generator, device=device)
        loss = ppo_loss(loss_fn, flat[idx])
        optim.zero_grad()
        loss.backward()
        optim.step()

    step_ms = _best_ms(lambda: grad_step(share), args.reps, device)
    # the same step on the shares of 1, 2, 4, 8 and 16 ranks (the compute term of the scaling model)
    by_samples = {n: round(_best_ms(lambda n=n: grad_step(n), args.reps, device), 3)
                  for n in (args.minibatch // ranks for ranks in (1, 2, 4, 8, 16))}

    # the all-reduce DDP does per gradient step: every trained parameter's gradient, float32
    n_params = sum(p.numel() for p in loss_fn.parameters())
    allreduce_ms = latency_ms = None
    if info.world_size > 1:
        grads, one = torch.randn(n_params, device=device), torch.ones(1, device=device)
        allreduce_ms = _best_ms(lambda: dist.all_reduce(grads), args.reps, device)
        latency_ms = _best_ms(lambda: dist.all_reduce(one), args.reps, device)  # the fixed cost of a call
    result = {
        "env": args.env, "device": str(device), "world_size": info.world_size, "num_envs_per_rank": args.num_envs,
        "threads_per_rank": torch.get_num_threads(),
        "backend": dist.get_backend() if info.world_size > 1 else None,
        "collect_fps_per_rank": round(frames / seconds),
        "collect_fps_total": round(info.world_size * frames / slowest.item()),
        "minibatch_per_rank": share, "grad_step_ms": round(step_ms, 3), "grad_step_ms_by_samples": by_samples,
        "params": n_params, "allreduce_ms": None if allreduce_ms is None else round(allreduce_ms, 3),
        "allreduce_one_float_ms": None if latency_ms is None else round(latency_ms, 3),
    }
    env.close()
    rates = [result["collect_fps_per_rank"]]
    if info.world_size > 1:  # every rank's own collection rate
        rates = [None] * info.world_size
        dist.all_gather_object(rates, result["collect_fps_per_rank"])
        dist.destroy_process_group()
    result["collect_fps_per_rank"] = rates
    return result


def main(argv=None) -> dict:
    args = parse_args(argv)
    result = bench(args)
    if distributed.rank_info().is_main:
        width = max(len(k) for k in result)
        print("\n".join(f"{k:<{width}}  {v}" for k, v in result.items()))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
