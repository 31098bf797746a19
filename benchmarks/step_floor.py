"""How much of a JAX-family step on the CPU is the library's own Python: ours against its floor, in turns.

    python benchmarks/step_floor.py                                  # gymnax/CartPole-v1, one env
    python benchmarks/step_floor.py jaxmarl/MPE_simple_spread_v3 --num-envs 8 --rounds 40

Four loops take turns ``--rounds`` times, ``--steps`` steps each (the median counts), on the same random actions:

- the backend's raw loop and its raw step driven from torch (the first two reference loops of ``marl-envs bench``);
- **the floor**: our env's own compiled step, called by hand: each action handed to it as a NumPy view, the output
  buffers as torch views, split into the entries, and the two TensorDicts of ``step_and_maybe_reset`` (``"next"``
  and the next root) built with TensorDict's unchecked constructor and nothing else: no checks, no flags read, no
  executor. What the contract's outputs cost at the least, on this step;
- ours: ``td, root = env.step_and_maybe_reset(td)``, each action written with ``td.set``, as in ``marl-envs bench``.

``ours / floor`` is the library's Python time past the least the outputs cost. This reads the library's internals
(the env's compiled step and the layout of its buffers): a tool for working on the step, not an example. It takes
an env on the CPU path (not ``device_path=True``) that computes its fresh starts in every step (not Brax's or
Playground's restarts on the host), without action masks.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from tensordict import TensorDict

import marl_envs
from marl_envs.bench import OursLoop, references
from marl_envs.cli.format import table


def floor_loop(env, plan):
    """The floor (see the module docstring): a ``loop(steps)`` over ``plan``'s actions."""
    out = env._executor
    if out.device_path or out.auto_reset != "fused" or out._masked:
        raise SystemExit(f"{env!r}: the floor takes an env on the CPU path, with fresh starts computed in every step, "
                         "and no action masks")
    step = out._compiled("step_reset")
    layout, B, device = out.programs.both_layout, env.batch_size, env.device
    keys = [(key,) if isinstance(key, str) else tuple(key) for key in out._description.action_keys]  # the step's order
    groups = {g: torch.Size((env.num_envs, len(agents))) for g, agents in env.group_map.items()}
    new = TensorDict._new_unsafe
    n_next = len(out.programs.step_entries.keys)

    def shape(entry_keys, first):
        """``(flat: [(name, index)], nested: [(group, batch, [(name, index)])])`` of entries ``first, ...``."""
        flat, nested = [], {}
        for i, key in enumerate(entry_keys, first):
            if len(key) > 2:
                raise SystemExit(f"the floor builds TensorDicts two levels deep; {key!r} is deeper")
            if len(key) == 1:
                flat.append((key[0], i))
            else:
                nested.setdefault(key[0], []).append((key[1], i))
        return flat, [(g, groups.get(g, B), entries) for g, entries in nested.items()]

    def build(tree, leaves):
        flat, nested = tree
        source = {name: leaves[i] for name, i in flat}
        for group, batch, entries in nested:
            source[group] = new({name: leaves[i] for name, i in entries}, batch_size=batch, device=device)
        return new(source, batch_size=B, device=device)

    next_tree = shape(out.programs.step_entries.keys, 0)
    root_tree = shape(list(out.programs.kept) + keys, n_next)
    state = {"td": env.reset()}

    def loop(steps: range) -> None:
        td = state["td"]
        for t in steps:
            actions = [plan[t].get(key) for key in keys]
            for key, action in zip(keys, actions):
                td.set(key, action)
            parts = [a.numpy().reshape(env.num_envs, -1) for a in actions]
            flat = (parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)).astype(np.float32)
            out._carry, out._record, buffers = step(out._carry, out._record, flat, out._limit)
            views = [torch.from_numpy(np.asarray(b)) for b in buffers]
            leaves = layout.cut(views) + actions
            td._set_str("next", build(next_tree, leaves), inplace=False, validated=True)
            td = build(root_tree, leaves)
        state["td"] = td

    return loop


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name", nargs="?", default="gymnax/CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    env = marl_envs.make(args.name, num_envs=args.num_envs, seed=0)
    generator = torch.Generator().manual_seed(0)
    plan = [env.full_action_spec.rand(generator=generator) for _ in range(args.steps)]
    chunk = range(args.steps)
    raw = list(references(args.name.partition("/")[0]).loops(env, plan, [chunk])[0].items())[:2]
    loops = {**{label: loop for label, loop in raw},
             "the floor: our compiled step, TensorDicts built by hand": floor_loop(env, plan),
             "ours: step_and_maybe_reset": OursLoop(env, plan)}
    sync = {label: getattr(loop, "sync", lambda: None) for label, loop in loops.items()}
    for label, loop in loops.items():  # warm-up
        loop(chunk)
        sync[label]()
    times = {label: [] for label in loops}
    for _ in range(args.rounds):
        for label, loop in loops.items():
            start = time.perf_counter()
            loop(chunk)
            sync[label]()
            times[label].append((time.perf_counter() - start) / args.steps)
    medians = {label: statistics.median(t) for label, t in times.items()}
    first, floor = medians[raw[0][0]], medians["the floor: our compiled step, TensorDicts built by hand"]
    rows = [(label, f"{m * 1e6:,.1f}", f"{m / first:.2f}", f"{m / floor:.2f}") for label, m in medians.items()]
    print(f"{args.name}: {args.num_envs} envs, {args.steps} steps a turn, median of {args.rounds} turns")
    print(table(("loop", "us a step", "time / raw loop", "time / floor"), rows))
    env.close()


if __name__ == "__main__":
    main()
