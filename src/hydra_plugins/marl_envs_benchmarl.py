"""BenchMARL's command line names every marl-envs env:
``python -m benchmarl.run algorithm=mappo task=marl_envs/vmas_balance``.

Hydra imports the modules of the ``hydra_plugins`` namespace before it composes a configuration. In a run of
BenchMARL (already imported then), this plugin adds our tasks to Hydra's config store and to BenchMARL's task
registry (``marl_envs.benchmarl.add_command_line_tasks``); in any other Hydra application it does nothing.
"""

from __future__ import annotations

import sys

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class MarlEnvsTasks(SearchPathPlugin):
    """Adds ``task=marl_envs/<name>`` for every env ``marl-envs list`` shows, in BenchMARL runs."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if "benchmarl" in sys.modules:
            from marl_envs.benchmarl import add_command_line_tasks

            add_command_line_tasks()
