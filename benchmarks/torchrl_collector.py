"""TorchRL's Collector over our adapted envs against TorchRL's own wrappers, and the adapter's own cost.

    python benchmarks/torchrl_collector.py                  # all three comparisons (needs the torchrl venv)
    python benchmarks/torchrl_collector.py --only vmas      # one of: vmas, brax, adapter

Three comparisons, each run in this process with its loops taking turns (one batch, or one step, each in
rotating order), so that the load of a shared machine weighs on all of them alike:

1. ``vmas``: ``torchrl.collectors.Collector`` (random policy, ``frames_per_batch`` = num_envs x steps) over
   ``to_torchrl(marl_envs.make("vmas/balance", num_envs=4096))`` against the same collector over TorchRL's
   ``VmasEnv("balance", num_envs=4096)``. Under random actions balance episodes end often (the package
   falls), so both pay for partial resets: ours are vectorized, TorchRL's call VMAS ``reset_at`` per env.
2. ``brax``: the same collector over ``to_torchrl(marl_envs.make("brax/ant_4x2", backend="spring",
   num_envs=128))`` against TorchRL's single-agent ``BraxWrapper`` of Brax's ``ant`` (spring, batch 128;
   TorchRL cannot split a Brax robot into agents, and a split would only add work on its side). Neither has
   a time limit; both end episodes when the ant is unhealthy. TorchRL's JAX cache clearing is turned off
   (``cache_clear_frequency=False``), its fastest setting.
3. ``adapter``: ``step_and_maybe_reset`` loops on ``vmas/navigation`` (4096 envs, 3 agents, ``max_steps=100``)
   over our env and over ``to_torchrl`` of it, with the same pre-drawn random actions: what the adapter
   costs.

Each table row gives the time of the timed batches or steps (a warm-up batch is not timed), env-steps/s and
the ratio to the comparison's reference row.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from torchrl.collectors import Collector

import marl_envs
from marl_envs.torchrl import to_torchrl


def take_turns(loops: dict, rounds: int, warmup: int = 1) -> dict[str, float]:
    """Run ``rounds + warmup`` turns; each turn calls every loop once, in rotating order. Seconds per loop."""
    names = list(loops)
    seconds = dict.fromkeys(names, 0.0)
    for r in range(rounds + warmup):
        for k in range(len(names)):
            name = names[(k + r) % len(names)]
            start = time.perf_counter()
            loops[name]()
            if r >= warmup:
                seconds[name] += time.perf_counter() - start
    return seconds


def collector_loop(env, frames_per_batch: int, stats: dict):
    """One ``next()`` of a Collector per call; counts the episode ends it saw."""
    collector = Collector(env, None, frames_per_batch=frames_per_batch, total_frames=-1)
    batches = iter(collector)

    def run() -> None:
        batch = next(batches)
        stats["ends"] = stats.get("ends", 0) + int(batch.get(("next", "done")).sum())
        stats["frames"] = stats.get("frames", 0) + batch.numel()

    return run, collector


def table(title: str, rows: list[tuple[str, float, int]], reference: int) -> str:
    ref_rate = rows[reference][2] / rows[reference][1]
    lines = [f"\n{title}", f"| {'loop':<62} | {'s':>7} | {'env-steps/s':>12} | {'vs ref':>7} |",
             f"|{'-' * 64}|{'-' * 9}|{'-' * 14}|{'-' * 9}|"]
    for label, seconds, steps in rows:
        rate = steps / seconds
        lines.append(f"| {label:<62} | {seconds:7.2f} | {rate:12,.0f} | {rate / ref_rate:6.2f}x |")
    return "\n".join(lines)


def race(ours, theirs, frames: int, rounds: int, labels: tuple[str, str], title: str, digits: int) -> str:
    """A Collector over each env, taking turns; the table (theirs as the reference) with both ends rates."""
    stats = {"ours": {}, "theirs": {}}
    ours_run, c1 = collector_loop(ours, frames, stats["ours"])
    theirs_run, c2 = collector_loop(theirs, frames, stats["theirs"])
    seconds = take_turns({"ours": ours_run, "theirs": theirs_run}, rounds)
    c1.shutdown()
    c2.shutdown()
    rows = [(labels[1], seconds["theirs"], frames * rounds), (labels[0], seconds["ours"], frames * rounds)]
    ends = ", ".join(f"{name} {stats[who]['ends'] / stats[who]['frames']:.{digits}f}"
                     for name, who in (("ours", "ours"), ("TorchRL", "theirs")))
    return table(f"{title} (episode ends per env-step: {ends})", rows, 0)


def bench_vmas(num_envs: int, steps: int, rounds: int) -> str:
    from torchrl.envs.libs.vmas import VmasEnv as TorchRLVmasEnv

    frames = num_envs * steps
    ours = to_torchrl(marl_envs.make("vmas/balance", num_envs=num_envs, seed=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # VMAS's own deprecation chatter
        theirs = TorchRLVmasEnv("balance", num_envs=num_envs, seed=0, device="cpu")
    return race(ours, theirs, frames, rounds, ("to_torchrl(marl_envs.make('vmas/balance'))",
                                               "TorchRL VmasEnv('balance')"),
                f"Collector, vmas/balance, {num_envs} envs, {steps} steps a batch, {rounds} timed batches", 3)


def bench_brax(num_envs: int, steps: int, rounds: int) -> str:
    from brax import envs as brax_envs
    from torchrl.envs.libs.brax import BraxWrapper as TorchRLBraxWrapper

    frames = num_envs * steps
    ours = to_torchrl(marl_envs.make("brax/ant_4x2", backend="spring", num_envs=num_envs, max_steps=None))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Brax's "brax/envs is unmaintained" warning
        raw = brax_envs.get_environment("ant", backend="spring")
    theirs = TorchRLBraxWrapper(raw, batch_size=[num_envs], device="cpu", cache_clear_frequency=False)
    theirs.set_seed(0)
    return race(ours, theirs, frames, rounds, ("to_torchrl(marl_envs.make('brax/ant_4x2', backend='spring'))",
                                               "TorchRL BraxWrapper(ant, spring), single agent"),
                f"Collector, Brax ant, {num_envs} envs, {steps} steps a batch, {rounds} timed batches", 4)


def bench_adapter(num_envs: int, steps: int) -> str:
    env = marl_envs.make("vmas/navigation", num_envs=num_envs, n_agents=3, max_steps=100, seed=0)
    adapted = to_torchrl(env)
    generator = torch.Generator().manual_seed(0)
    plan = [env.full_action_spec.rand(generator=generator) for _ in range(steps + 1)]
    twin = marl_envs.make("vmas/navigation", num_envs=num_envs, n_agents=3, max_steps=100, seed=0)
    state = {"ours": twin.reset(), "adapted": adapted.reset()}
    t = {"ours": 0, "adapted": 0}

    def loop(name: str, target):
        def run() -> None:
            _, state[name] = target.step_and_maybe_reset(state[name].update(plan[t[name]]))
            t[name] += 1
        return run

    seconds = take_turns({"ours": loop("ours", twin), "adapted": loop("adapted", adapted)}, steps)
    rows = [
        ("marl_envs VmasEnv.step_and_maybe_reset", seconds["ours"], num_envs * steps),
        ("to_torchrl(env).step_and_maybe_reset", seconds["adapted"], num_envs * steps),
    ]
    ours_t, adapted_t = seconds["ours"], seconds["adapted"]
    return table(f"Adapter cost, vmas/navigation, {num_envs} envs, 3 agents, {steps} steps each (time ratio "
                 f"adapted / ours = {adapted_t / ours_t:.3f}x)", rows, 0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["vmas", "brax", "adapter"], action="append")
    p.add_argument("--rounds", type=int, default=6, help="timed collector batches per loop")
    p.add_argument("--steps", type=int, default=20, help="steps per collector batch")
    p.add_argument("--adapter-steps", type=int, default=200)
    args = p.parse_args(argv)
    which = args.only or ["vmas", "brax", "adapter"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if "vmas" in which:
        print(bench_vmas(4096, args.steps, args.rounds), flush=True)
    if "brax" in which:
        print(bench_brax(128, args.steps * 5, args.rounds), flush=True)
    if "adapter" in which:
        print(bench_adapter(4096, args.adapter_steps), flush=True)


if __name__ == "__main__":
    main()
