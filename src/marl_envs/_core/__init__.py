"""The env contract every backend shares, each rule written once.

- ``env``: ``EnvBase``, the public methods (``reset``, ``step``, ``step_and_maybe_reset``, ``rollout``, ...) over
  a backend's hook; ``spec_keys``: its group map, specs and the key lists read from them (the action-mask key and
  the reading of ``_reset`` among them).
- ``rules``: the output rules (the time limit, the done entries, the next root, the merge by env);
  ``executor``: the default executor that applies them to a hook's TensorDicts, and the executor contract.
- ``actions``: the action checks of every step; ``rollout``: ``rollout``'s break modes.
- ``agents``: agents into groups (``group_map``) and their nested keys.
- ``leaf_specs``, ``composite``: the specs (shapes, devices, ``rand``, ``is_in``), public as ``marl_envs.specs``.
- ``tensordicts``: TensorDict calls without the per-leaf checks that data built to fit would pass.
- ``validate``: the checks every part shares: keywords of every env class, devices.
- ``messages``: the name and keyword messages ("did you mean"), without torch: for the CLI's ``list`` and the
  backends' checks run before any library import.
- ``keywords``: the keywords of libraries that take ``**kwargs``, declared per library version.
- ``names``: each backend's env names without importing it (``names_snapshot.json`` per version, a user cache).
"""
