"""One module per backend, imported lazily by ``marl_envs.registry`` (never by ``import marl_envs``)."""
