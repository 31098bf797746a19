"""The env contract every backend shares, each rule written once.

- ``env``: ``EnvBase``, the public methods (``reset``, ``step``, ``step_and_maybe_reset``, ``rollout``, ...), the
  keys and the step counting, over a backend's hook.
- ``outputs``: the output rules (the time limit, the done rules, the next root, the reset merge) and the default
  executor that applies them to a hook's TensorDicts.
- ``rollout``: ``rollout``'s break modes.
- ``agents``: agents into groups (``group_map``) and their nested keys.
- ``leaf_specs``: the spec leaves (shapes, devices, ``rand``, ``is_in``), under the public ``marl_envs.specs``.
- ``validate``: the checks every part shares: keywords of every env class, devices, actions.
- ``messages``: the name and keyword messages ("did you mean"), without torch: for the CLI's ``list`` and the
  backends' checks run before any library import.
- ``keywords``: the keywords of libraries that take ``**kwargs``, declared per library version.
- ``names``: each backend's env names without importing it (``names_snapshot.json`` per version, a user cache).
"""
