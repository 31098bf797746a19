"""The ``marl-envs`` command: ``list``, ``info``, ``bench`` and ``demo``."""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
import time
from collections.abc import Sequence

from . import registry
from ._format import group_table, spec_table
from .bench import format_bench, references, run


def parse_kwargs(pairs: Sequence[str]) -> dict:
    """``["n_agents=3", "device=cpu"]`` -> ``{"n_agents": 3, "device": "cpu"}`` (values parsed as Python literals)."""
    kwargs = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.isidentifier():
            raise SystemExit(f"error: expected KEY=VALUE, got {pair!r} (e.g. n_agents=3)")
        try:
            kwargs[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            kwargs[key] = raw
    return kwargs


def _cmd_list(args: argparse.Namespace) -> None:
    for name in registry.available_envs(args.backend):
        print(name)


def _cmd_info(args: argparse.Namespace) -> None:
    kwargs = {"num_envs": 1, **parse_kwargs(args.kwargs)}
    env = registry.make(args.name, **kwargs)
    print(f"{args.name}: {env}\n")
    print(group_table(env), "\n")
    print(spec_table(env))
    env.close()


def _cmd_bench(args: argparse.Namespace) -> None:
    num_envs = args.num_envs or references(args.name.partition("/")[0]).default_num_envs
    rows = run(args.name, num_envs=num_envs, steps=args.steps, rounds=args.rounds, device=args.device,
               **parse_kwargs(args.kwargs))
    print(format_bench(args.name, num_envs, args.steps, rows))


def _cmd_demo(args: argparse.Namespace) -> None:
    demo = importlib.import_module("marl_envs._demo")
    demo.main()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="marl-envs", description="Batched multi-agent RL environments.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list the envs marl_envs.make accepts")
    p.add_argument("backend", nargs="?", help="vmas, brax, pettingzoo or user")
    p.set_defaults(func=_cmd_list)
    p = sub.add_parser("info", help="group map and a table of every key of an env")
    p.add_argument("name", help="e.g. vmas/balance")
    p.add_argument("kwargs", nargs="*", help="KEY=VALUE keywords for make, e.g. n_agents=3")
    p.set_defaults(func=_cmd_info)
    p = sub.add_parser("bench", help="env-steps/s of our env against the raw backend")
    p.add_argument("name", help="e.g. vmas/navigation")
    p.add_argument("kwargs", nargs="*", help="KEY=VALUE keywords for the env, e.g. backend=spring (brax)")
    p.add_argument("--num-envs", type=int, help="default: the backend's (4096 vmas, 128 brax, 8 pettingzoo)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5, help="loops take turns over this many chunks of the steps")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=_cmd_bench)
    p = sub.add_parser("demo", help="a tour of the library: envs by name, their specs, a batched rollout")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    try:
        args.func(args)
    except (ValueError, ImportError, TypeError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "demo":
        print(f"\ndone in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
