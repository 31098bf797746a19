"""The ``marl-envs`` command: ``list``, ``info``, ``bench``, ``doctor`` and ``demo``.

Its exit status is ``EXIT_OK`` (0), ``EXIT_ERROR`` (1: the library refused, the message on stderr says why and
the fix) or ``EXIT_USAGE`` (2: argparse's, for a command line it cannot read); ``--help`` says so (``EPILOG``).
``list``, ``--help`` and ``--version`` import no backend (the names come from ``marl_envs._core.names``), nor the
modules of ``info`` and ``bench``, nor torch: ``import marl_envs`` loads what needs torch when first asked for.
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from collections.abc import Sequence
from typing import Any

from .. import registry
from .._version import __version__
from .._core.messages import unknown_name

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
EPILOG = """\
exit status:
  0  success (an empty list too: a note on stderr says why it is empty)
  1  the library refused: an unknown env or backend, a keyword the env does not take, a backend that is not
     installed, a bad value; the message on stderr names the fix; or doctor found an installed backend broken
  2  usage error: an unknown command or option, a missing argument, a keyword not written KEY=VALUE
"""
USER = "user"  # ``list user``: the envs registered with marl_envs.register


def keyword(pair: str) -> tuple[str, Any]:
    """``"n_agents=3"`` -> ``("n_agents", 3)``: the value read as a Python literal, else kept as a str
    (``device=cpu``).

    Raises:
        argparse.ArgumentTypeError: ``pair`` is not ``KEY=VALUE`` with ``KEY`` an identifier (argparse reports it
            as a usage error).
    """
    key, sep, raw = pair.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {pair!r} (e.g. n_agents=3)")
    try:
        return key, ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return key, raw


def parse_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    """``["n_agents=3", "device=cpu"]`` -> ``{"n_agents": 3, "device": "cpu"}`` (``keyword`` of each), for scripts
    taking KEY=VALUE words; a malformed one ends the program with ``EXIT_USAGE``, as in ``marl-envs``."""
    try:
        return dict(map(keyword, pairs))
    except argparse.ArgumentTypeError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def _empty_note(backend: str | None) -> str:
    """Why ``list [backend]`` printed no name, and what to do about it."""
    if backend == USER:
        return ("no envs registered with marl_envs.register(name, factory): a registration lasts for the Python "
                "process that makes it, so a new `marl-envs` process has none; in your own code, "
                "marl_envs.register(name, factory) adds one and marl_envs.available_envs('user') lists them")
    if backend is not None:
        return f"no {backend} envs: {backend} is installed but none of its envs builds here"
    extras = "|".join([*registry.available_backends(), "all"])
    return f"no envs: no backend is installed; install one with: pip install 'marl-envs[{extras}]'"


def _cmd_list(args: argparse.Namespace) -> None:
    choices = [*registry.available_backends(), USER]
    if args.backend is not None and args.backend not in choices:
        raise unknown_name("backend", args.backend, choices)
    names = registry.available_envs(args.backend)
    for name in names:
        print(name)
    if not names:
        print(_empty_note(args.backend), file=sys.stderr)
    elif args.backend is None:
        missing = [b for b in registry.available_backends() if not registry.backend_installed(b)]
        if missing:
            print(f"not installed, so not listed: {', '.join(missing)} (pip install 'marl-envs[{','.join(missing)}]')",
                  file=sys.stderr)


def _cmd_info(args: argparse.Namespace) -> None:
    # make first: a name of no family, or a name or value its family's check refuses, is refused without torch
    env = registry.make(args.name, **{"num_envs": 1, **dict(args.kwargs)})
    from .format import group_table, keyword_table, spec_table  # imported here: list, --help and --version need none

    try:
        print(f"{args.name}: {env}\n")
        print(group_table(env) + "\n")
        print(spec_table(env) + "\n")
        print(keyword_table(env, args.name.partition("/")[0]))
    finally:
        env.close()


def _cmd_bench(args: argparse.Namespace) -> None:
    from ..bench import format_bench, references, run

    backend = args.name.partition("/")[0]
    if backend not in registry.available_backends():  # the reference loops are the backends' own
        raise ValueError(f"bench times a backend's env against the backend's raw library; {args.name!r} is not a "
                         f"backend's env (backends: {', '.join(registry.available_backends())})")
    num_envs = args.num_envs or references(backend).default_num_envs
    rows = run(args.name, num_envs=num_envs, steps=args.steps, rounds=args.rounds, device=args.device,
               **dict(args.kwargs))
    print(format_bench(args.name, num_envs, args.steps, rows))
    if args.record:
        from ..bench import append_record, record

        command = " ".join(["marl-envs bench", args.name, *(f"{k}={v}" for k, v in args.kwargs),
                            f"--num-envs {num_envs} --steps {args.steps} --rounds {args.rounds}",
                            *([f"--device {args.device}"] if args.device != "cpu" else [])])
        append_record(args.record, record(args.name, num_envs, args.steps, args.rounds, args.device,
                                          dict(args.kwargs), rows, command))
        print(f"recorded in {args.record}")


def _cmd_demo(args: argparse.Namespace) -> None:
    from .demo import main as demo

    demo()


def _cmd_doctor(args: argparse.Namespace) -> int:
    from ..doctor import format_report, run

    report = run(backends=args.backend or None, devices=args.device or None)
    print(format_report(report))
    return EXIT_OK if report.ok else EXIT_ERROR


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="marl-envs", description="Batched multi-agent RL environments.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="list the envs marl_envs.make accepts")
    p.add_argument("backend", nargs="?", help=f"only this backend's envs: {', '.join(registry.available_backends())}, "
                   f"or {USER} (the envs marl_envs.register added in this process: none in a new one)")
    p.set_defaults(func=_cmd_list)
    p = sub.add_parser("info", help="group map, a table of every key (role, shape, dtype, spec, meaning) and every "
                       "keyword the env takes, with its default")
    p.add_argument("name", help="e.g. vmas/balance")
    p.add_argument("kwargs", nargs="*", type=keyword, metavar="KEY=VALUE",
                   help="keywords for make, e.g. n_agents=3 (values read as Python literals)")
    p.set_defaults(func=_cmd_info)
    p = sub.add_parser("bench", help="env-steps/s of our env against the raw backend")
    p.add_argument("name", help="e.g. vmas/navigation")
    p.add_argument("kwargs", nargs="*", type=keyword, metavar="KEY=VALUE",
                   help="keywords for the env, e.g. backend=spring (brax)")
    p.add_argument("--num-envs", type=int, help="default: the backend's (4096 vmas; 128 brax and playground; 8 "
                   "pettingzoo and the CPU families; 1024 jaxmarl, gymnax and jumanji)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5, help="loops take turns over this many chunks of the steps")
    p.add_argument("--device", default="cpu")
    p.add_argument("--record", metavar="FILE", help="append the run as a JSON record to FILE (one a line; the docs' "
                                                     "performance page renders benchmarks/results.jsonl)")
    p.set_defaults(func=_cmd_bench)
    p = sub.add_parser("doctor", help="versions, devices, and each installed backend built and stepped on each "
                       "device (exit status 1 if one is broken)")
    p.add_argument("--backend", action="append", help="check only this backend (repeatable); default: all installed")
    p.add_argument("--device", action="append", help="check only this device (repeatable); default: every device "
                   "torch can use")
    p.set_defaults(func=_cmd_doctor)
    p = sub.add_parser("demo", help="a tour of the library: envs by name, their specs, a batched rollout")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``marl-envs`` on ``argv`` (default ``sys.argv[1:]``) and return its exit status (``EPILOG``)."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        # argparse takes a command's KEY=VALUE words only before its options: the ones after them come back here
        keywords = [word for word in extra if "=" in word and not word.startswith("-")]
        if keywords and hasattr(args, "kwargs"):
            try:
                args.kwargs = [*args.kwargs, *map(keyword, keywords)]
            except argparse.ArgumentTypeError as err:
                parser.error(str(err))
            extra = [word for word in extra if word not in keywords]
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as done:  # argparse exits: 0 after --help or --version, 2 for a usage error (reported)
        return EXIT_OK if done.code is None else int(done.code)
    start = time.perf_counter()
    try:
        status = args.func(args)
    except (ValueError, ImportError, TypeError, KeyError) as err:
        # a KeyError's str() is a repr
        message = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
        print(f"error: {message}", file=sys.stderr)
        return EXIT_ERROR
    if args.command == "demo":
        print(f"\ndone in {time.perf_counter() - start:.0f} s")
    return EXIT_OK if status is None else status

