"""Sphinx extension: ``{cli-help}`` prints the ``marl-envs`` command's help, read from its argparse parser.

In a Markdown page::

    ```{cli-help}
    ```

renders ``marl-envs --help`` and then each sub-command's help, so the reference never drifts from the code.
"""

from __future__ import annotations

import argparse

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def _help(parser: argparse.ArgumentParser) -> str:
    return parser.format_help().rstrip()


class CliHelp(SphinxDirective):
    """The help of ``marl-envs`` and of each of its sub-commands, as literal blocks under headings."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from marl_envs.cli import build_parser

        parser = build_parser()
        out: list[nodes.Node] = [nodes.literal_block(text=_help(parser), language="text")]
        for action in parser._subparsers._group_actions:  # argparse keeps sub-parsers only there
            for name, sub in action.choices.items():
                out.append(nodes.rubric(text=f"marl-envs {name}", ids=[f"cli-{name}"]))
                out.append(nodes.literal_block(text=_help(sub), language="text"))
        return out


def setup(app):
    app.add_directive("cli-help", CliHelp)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
