"""``EnvBase.rollout``: run a policy for a number of steps and stack the data along a "time" dim."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from tensordict import TensorDictBase

Policy = Callable[[TensorDictBase], TensorDictBase]


class Stepped(Protocol):
    """What a rollout calls of an env (``EnvBase``'s public methods)."""

    num_envs: int
    device: torch.device

    def reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase: ...

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase: ...

    def step(self, tensordict: TensorDictBase) -> TensorDictBase: ...

    def step_and_maybe_reset(self, tensordict: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]: ...

    def step_mdp(self, tensordict: TensorDictBase) -> TensorDictBase: ...


def rollout(
    env: Stepped,
    max_steps: int,
    policy: Policy | None = None,
    *,
    callback: Callable[[Stepped, TensorDictBase], None] | None = None,
    auto_reset: bool = True,
    tensordict: TensorDictBase | None = None,
    break_when_any_done: bool | None = None,
    break_when_all_done: bool | None = None,
) -> TensorDictBase:
    """Run up to ``max_steps`` steps of ``env`` (``EnvBase.rollout``, where ``env`` is the env itself) and stack
    them along a "time" dim.

    Modes:
        - ``break_when_any_done`` (the default unless ``break_when_all_done``): stop after the first step in
          which any env is done; no env is reset during the rollout.
        - ``break_when_all_done``: step with auto-reset until every env has been done at least once; the data
          of an env that has finished is frozen at its last step.
        - both False: exactly ``max_steps`` steps of ``step_and_maybe_reset``.

    Args:
        env: the environment.
        max_steps: the most steps to run.
        policy: ``td -> td`` writing the actions (e.g. a ``tensordict.nn.TensorDictModule``); ``None`` means
            uniformly random actions.
        callback: called as ``callback(env, td)`` after each step.
        auto_reset: reset every env first. With ``False``, ``tensordict`` is where the rollout starts.
        tensordict: the starting data when ``auto_reset=False``.

    Returns:
        A TensorDict of batch ``(num_envs, T)`` whose last dim is named ``"time"``.
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
    if break_when_all_done and break_when_any_done:
        raise ValueError("break_when_any_done and break_when_all_done are exclusive; set at most one to True")
    if break_when_any_done is None:
        break_when_any_done = not break_when_all_done
    if auto_reset:
        if tensordict is not None:
            raise ValueError("rollout got a tensordict with auto_reset=True; pass auto_reset=False to start from it")
        tensordict = env.reset()
    elif tensordict is None:
        raise ValueError("rollout(auto_reset=False) needs the tensordict to start from")
    act = policy if policy is not None else env.rand_action

    steps: list[TensorDictBase] = []
    finished = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    for _ in range(max_steps):
        tensordict = act(tensordict)
        if break_when_any_done:
            tensordict = env.step(tensordict)
            next_root = None
        else:
            tensordict, next_root = env.step_and_maybe_reset(tensordict)
        record = tensordict
        if break_when_all_done:
            if steps and bool(finished.any()):  # freeze the data of envs that finished before this step
                record = steps[-1].where(finished, tensordict)
            finished = finished | tensordict.get(("next", "done")).reshape(env.num_envs)
        steps.append(record)
        if callback is not None:
            callback(env, tensordict)
        if break_when_any_done:
            if bool(tensordict.get(("next", "done")).any()):
                break
            tensordict = env.step_mdp(tensordict)
        else:
            tensordict = next_root
            if break_when_all_done and bool(finished.all()):
                break
    out = torch.stack(steps, dim=1)
    out.names = [None, "time"]
    return out

