"""``python -m marl_envs.cli``: the ``marl-envs`` command."""

from . import main

raise SystemExit(main())
