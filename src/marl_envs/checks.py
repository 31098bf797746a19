"""``check_env_specs``: the conformance checker every registered env passes in CI."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from ._env import EnvBase
from .specs import Composite, NestedKey

__all__ = ["check_env_specs"]


def _fail(key: NestedKey, what: str, expected: object, observed: object) -> AssertionError:
    return AssertionError(f"{key!r}: {what}: expected {expected}, observed {observed}")


def _check_entries(td: TensorDictBase, spec: Composite, where: str, time_dim: bool) -> None:
    """Every spec leaf is in ``td`` with the spec's shape (time dim inserted), dtype, device and domain."""
    present = set(td.keys(True, True))
    for key, leaf in spec.items(True, True):
        if key not in present:
            raise _fail(key, f"missing from the {where} data", "present", f"keys {sorted(map(str, present))}")
        value = td.get(key)
        shape = (*leaf.shape[:1], value.shape[1], *leaf.shape[1:]) if time_dim else tuple(leaf.shape)
        if tuple(value.shape) != tuple(shape):
            raise _fail(key, f"shape in the {where} data", tuple(shape), tuple(value.shape))
        if value.dtype != leaf.dtype:
            raise _fail(key, f"dtype in the {where} data", leaf.dtype, value.dtype)
        if value.device != leaf.device:
            raise _fail(key, f"device in the {where} data", leaf.device, value.device)
        steps = value.unbind(1) if time_dim else (value,)
        for t, step_value in enumerate(steps):
            if not leaf.is_in(step_value):
                at = f" at time {t}" if time_dim else ""
                raise _fail(key, f"value in the {where} data{at} lies outside its spec", leaf, step_value)


def _check_done_algebra(env: EnvBase, td: TensorDictBase, where: str) -> None:
    for key in env.done_keys:
        name = key if isinstance(key, str) else key[-1]
        if name != "done":
            continue
        prefix = () if isinstance(key, str) else key[:-1]
        done, term, trunc = (td.get((*prefix, n)) if prefix else td.get(n) for n in ("done", "terminated", "truncated"))
        if not torch.equal(done, term | trunc):
            raise _fail(key, f"done == terminated | truncated in the {where} data", term | trunc, done)


def _check_no_extra(td: TensorDictBase, allowed: set, where: str) -> None:
    extra = [k for k in td.keys(True, True) if k not in allowed]
    if extra:
        raise _fail(extra[0], f"entry in the {where} data that no spec declares", "declared in a full_*_spec", "present")


def check_env_specs(env: EnvBase, seed: int | None = None, steps: int = 3) -> None:
    """Check that ``env`` keeps every promise of the contract; raise ``AssertionError`` naming the key if not.

    Checks: reset and rollout data carry exactly the spec'd keys with their shapes, dtypes, devices and
    domains; done flags are False after a full reset; ``done == terminated | truncated`` at every level; a
    partial root ``_reset`` leaves the other envs' data untouched; with ``seed``, two rollouts with the same
    actions are identical.

    Args:
        env: the environment to check.
        seed: if given, also check determinism under ``env.set_seed(seed)``.
        steps: rollout length.
    """
    if seed is not None:
        env.set_seed(seed)
    obs_spec, done_spec = env.full_observation_spec, env.full_done_spec
    root_keys = set(obs_spec.keys(True, True)) | set(done_spec.keys(True, True)) | set(env.full_state_spec.keys(True, True))

    reset_td = env.reset()
    if reset_td.batch_size != env.batch_size:
        raise _fail("reset()", "batch size", tuple(env.batch_size), tuple(reset_td.batch_size))
    _check_entries(reset_td, obs_spec, "reset", False)
    _check_entries(reset_td, done_spec, "reset", False)
    _check_no_extra(reset_td, root_keys, "reset")
    _check_done_algebra(env, reset_td, "reset")
    if not env.allow_done_after_reset:
        for key in env.done_keys:
            if bool(reset_td.get(key).any()):
                raise _fail(key, "flag after a full reset", "all False", reset_td.get(key))

    stepped = env.rand_step(reset_td).get("next")
    for spec in (obs_spec, done_spec, env.full_reward_spec):
        _check_entries(stepped, spec, "step next", False)
    _check_no_extra(stepped, root_keys | set(env.reward_keys), "step next")
    _check_done_algebra(env, stepped, "step next")

    data = env.rollout(steps, break_when_any_done=False)
    if data.batch_size[0] != env.num_envs or data.batch_size[1] < 1:
        raise _fail("rollout", "batch size", f"({env.num_envs}, T)", tuple(data.batch_size))
    _check_entries(data, obs_spec, "rollout", True)
    _check_entries(data, done_spec, "rollout", True)
    _check_entries(data, env.full_action_spec, "rollout", True)
    _check_entries(data.get("next"), obs_spec, "rollout next", True)
    _check_entries(data.get("next"), done_spec, "rollout next", True)
    _check_entries(data.get("next"), env.full_reward_spec, "rollout next", True)
    action_keys = set(env.action_keys)
    _check_no_extra(data.exclude("next"), root_keys | action_keys, "rollout")
    _check_no_extra(data.get("next"), root_keys | set(env.reward_keys), "rollout next")
    _check_done_algebra(env, data.get("next"), "rollout next")

    _check_partial_reset(env)

    if seed is not None:
        _check_determinism(env, seed, steps)


def _check_partial_reset(env: EnvBase) -> None:
    td = env.reset()
    td = env.step_mdp(env.rand_step(td))
    mask = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    mask[::2] = True
    before = td.clone()
    td.set("_reset", mask.unsqueeze(-1))
    after = env.reset(td)
    for key in before.keys(True, True):
        old, new = before.get(key), after.get(key)
        if not torch.equal(old[~mask], new[~mask]):
            raise _fail(key, "value of an env not selected by a partial _reset", old[~mask], new[~mask])
    for key in after.keys(True, True):
        if isinstance(key, str) and key == "_reset" or isinstance(key, tuple) and key[-1] == "_reset":
            raise _fail(key, "entry after reset", "no _reset keys", "present")
    if not env.allow_done_after_reset:
        for key in env.done_keys:
            if bool(after.get(key)[mask].any()):
                raise _fail(key, "flag of an env reset by a partial _reset", "all False", after.get(key)[mask])


def _check_determinism(env: EnvBase, seed: int, steps: int) -> None:
    env.set_seed(seed)
    first = env.rollout(steps, break_when_any_done=False)
    recorded = first.select(*env.action_keys)

    def replay(td: TensorDictBase, _t=iter(range(steps))) -> TensorDictBase:
        return td.update(recorded[:, next(_t)])

    env.set_seed(seed)
    second = env.rollout(steps, replay, break_when_any_done=False)
    for key in first.keys(True, True):
        if not torch.equal(first.get(key), second.get(key)):
            raise _fail(key, f"value in two rollouts after set_seed({seed}) with the same actions",
                        first.get(key), second.get(key))

