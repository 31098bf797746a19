"""``check_env_specs``: the conformance checker every registered env passes in CI."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from ._core.env import EnvBase
from .specs import Composite, NestedKey

__all__ = ["check_env_specs"]

_CROSSING_STEPS = 32  # the longest default step_and_maybe_reset comparison run to reach a max_steps truncation
_HORIZON_STEPS = 1000  # the longest default random play to max_steps, to check the flags there


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
        *prefix, name = (key,) if isinstance(key, str) else key
        if name == "done":
            done, term, trunc = (td.get((*prefix, n)) for n in ("done", "terminated", "truncated"))
            if not torch.equal(done, term | trunc):
                raise _fail(key, f"done == terminated | truncated in the {where} data", term | trunc, done)


def _check_no_extra(td: TensorDictBase, allowed: set, where: str) -> None:
    extra = [k for k in td.keys(True, True) if k not in allowed]
    if extra:
        raise _fail(extra[0], f"entry in the {where} data that no spec declares", "declared in a full_*_spec",
                    "present")


def check_env_specs(env: EnvBase, seed: int | None = None, steps: int = 3, *, reset_steps: int | None = None,
                    horizon_steps: int = _HORIZON_STEPS) -> None:
    """Check that ``env`` keeps every promise of the contract; raise ``AssertionError`` naming the key if not.

    Checks: reset and rollout data carry exactly the spec'd keys with their shapes, dtypes, devices and
    domains; done flags are False after a full reset; ``done == terminated | truncated`` at every level; a
    partial root ``_reset`` leaves the other envs' data untouched. With ``seed``, also: two rollouts with the
    same actions are identical; and ``step_and_maybe_reset`` (the backend's fused ``_step_reset`` when it has
    one) gives, at every step, exactly (``torch.equal``, same keys: both paths run the same computation, so no
    tolerance) the ``"next"`` data and next root of ``step`` followed by ``reset(step_mdp(td))`` with
    ``"_reset"`` set from the root ``done``, which must leave ``td["next"]`` as it was. The actions are drawn
    once, honouring action masks, and replayed after the same ``set_seed(seed)``; when the comparison fails, a
    second replay tells a fused path that differs from an env that is not deterministic, and the message says
    which. An env with a time limit (``max_steps``, at most ``horizon_steps``) is played at random to it: there,
    every env not ended earlier is ``truncated`` at the root and in some agent of each group. (Whether it is also
    ``terminated`` cannot be told from outside: a true end may fall on that step, in every env of a fixed-length
    game; each backend's tests check its flags against its library.)

    The env is left usable (``reset`` it to start afresh).

    Args:
        env: the environment to check.
        seed: if given, also check determinism and ``step_and_maybe_reset`` under ``env.set_seed(seed)``.
        steps: rollout length.
        reset_steps: steps of the ``step_and_maybe_reset`` comparison. None: ``steps``, or ``max_steps + 1``
            when that is more and at most 32, so that a truncation and the first step after its reset are
            compared.
        horizon_steps: the longest time limit played to (0: none).

    Raises:
        AssertionError: a broken promise; the message names the key, the expected and the observed value.
        ValueError: ``reset_steps`` is not a positive int.
    """
    if reset_steps is None:
        limit = env.max_steps
        reset_steps = steps if limit is None or limit + 1 > _CROSSING_STEPS else max(steps, limit + 1)
    elif isinstance(reset_steps, bool) or not isinstance(reset_steps, int) or reset_steps < 1:
        raise ValueError(f"reset_steps must be a positive int or None, got {reset_steps!r}")
    if seed is not None:
        env.set_seed(seed)
    obs_spec, done_spec = env.full_observation_spec, env.full_done_spec
    root_keys = {key for spec in (obs_spec, done_spec, env.full_state_spec) for key in spec.keys(True, True)}

    reset_td = env.reset()
    if reset_td.batch_size != env.batch_size:
        raise _fail("reset()", "batch size", tuple(env.batch_size), tuple(reset_td.batch_size))
    for spec in (obs_spec, done_spec):
        _check_entries(reset_td, spec, "reset", False)
    _check_no_extra(reset_td, root_keys, "reset")
    _check_done_algebra(env, reset_td, "reset")
    if not env.allow_done_after_reset:
        for key in env.done_keys:
            if bool(reset_td.get(key).any()):
                raise _fail(key, "flag after a full reset", "all False", reset_td.get(key))

    stepped = _checked_step(env, env.rand_action(reset_td)).get("next")
    for spec in (obs_spec, done_spec, env.full_reward_spec):
        _check_entries(stepped, spec, "step next", False)
    _check_no_extra(stepped, root_keys | set(env.reward_keys), "step next")
    _check_done_algebra(env, stepped, "step next")

    data = env.rollout(steps, break_when_any_done=False)
    if data.batch_size[0] != env.num_envs or data.batch_size[1] < 1:
        raise _fail("rollout", "batch size", f"({env.num_envs}, T)", tuple(data.batch_size))
    nxt = data.get("next")
    for td, where, own in ((data, "rollout", env.full_action_spec), (nxt, "rollout next", env.full_reward_spec)):
        for spec in (obs_spec, done_spec, own):
            _check_entries(td, spec, where, True)
    _check_no_extra(data.exclude("next"), root_keys | set(env.action_keys), "rollout")
    _check_no_extra(nxt, root_keys | set(env.reward_keys), "rollout next")
    _check_done_algebra(env, nxt, "rollout next")

    _check_partial_reset(env)
    if env.max_steps is not None and env.max_steps <= horizon_steps:
        _check_horizon(env)

    if seed is not None:
        _check_determinism(env, seed, steps)
        _check_step_and_maybe_reset(env, seed, reset_steps)


def _checked_step(env: EnvBase, tensordict: TensorDictBase) -> TensorDictBase:
    """``env.step``, refusing a ``_step`` hook (a user's env) that omits the root ``"terminated"``: the library would
    read it as False in every step, and the env would never end on its own."""
    out = env.step(tensordict)
    for given in env._executor.given_done_keys() or ():
        if "terminated" not in given:
            raise _fail("terminated", f"entry of what {type(env).__name__}._step returns", "present (all False for "
                        "an env that never ends on its own: the library cannot tell an omission from 'never')",
                        f"absent; it gave the done entries {sorted(map(str, given))}")
    return out


def _check_partial_reset(env: EnvBase) -> None:
    before = env.step_mdp(env.rand_step(env.reset()))
    mask = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    mask[::2] = True
    after = env.reset(before.clone().set("_reset", mask.unsqueeze(-1)))
    for key in before.keys(True, True):
        old, new = before.get(key), after.get(key)
        if not torch.equal(old[~mask], new[~mask]):
            raise _fail(key, "value of an env not selected by a partial _reset", old[~mask], new[~mask])
    for key in after.keys(True, True):
        if (key if isinstance(key, str) else key[-1]) == "_reset":
            raise _fail(key, "entry after reset", "no _reset keys", "present")
    if not env.allow_done_after_reset:
        for key in env.done_keys:
            if bool(after.get(key)[mask].any()):
                raise _fail(key, "flag of an env reset by a partial _reset", "all False", after.get(key)[mask])


def _check_horizon(env: EnvBase) -> None:
    """Random play to ``max_steps``: the flags of the step that reaches it, in the envs not ended earlier."""
    limit, B = env.max_steps, env.num_envs
    td = env.reset()
    ended = torch.zeros(B, dtype=torch.bool, device=env.device)
    for _ in range(limit - 1):
        td, root = env.step_and_maybe_reset(env.rand_action(td))
        ended |= td.get(("next", "done")).reshape(B)
        td = root
    nxt = env.rand_step(td).get("next")
    going = ~ended
    if not bool(going.any()):
        return
    going_envs = going.nonzero().flatten().tolist()
    where = f"the step that reaches max_steps={limit}, in the envs not ended earlier ({going_envs})"
    for key in env.done_keys:
        if (key if isinstance(key, str) else key[-1]) != "truncated":
            continue
        value = nxt.get(key)[going].reshape(int(going.sum()), -1)
        if not bool(value.any(dim=1).all()):
            raise _fail(key, f"flag at {where}", "True (a time limit is a truncation)", value)


def _check_determinism(env: EnvBase, seed: int, steps: int) -> None:
    env.set_seed(seed)
    first = env.rollout(steps, break_when_any_done=False)
    recorded = first.select(*env.action_keys)
    against = f"after set_seed({seed}) with the same actions: the env is not deterministic"

    def replay(td: TensorDictBase, _t=iter(range(steps))) -> TensorDictBase:
        t = next(_t)
        # the data the recorded actions were drawn on: if they differ, replaying them could break an action mask
        _check_same(first[:, t].exclude("next", *env.action_keys), td.exclude(*env.action_keys),
                    f"data at step {t} in two rollouts", against)
        return td.update(recorded[:, t])

    env.set_seed(seed)
    _check_same(first, env.rollout(steps, replay, break_when_any_done=False), "two rollouts", against)


def _check_step_and_maybe_reset(env: EnvBase, seed: int, steps: int) -> None:
    """``step_and_maybe_reset`` against ``step`` then ``reset`` of the done envs, replaying the first pass's actions
    (see ``check_env_specs``); on a mismatch, a second replay tells an env that is not deterministic."""
    env.set_seed(seed)
    td, actions, fused = env.reset(), [], []
    for _ in range(steps):
        td = env.rand_action(td)
        actions.append(td.clone())  # the actions, and the data they were drawn on
        td, root = env.step_and_maybe_reset(td)
        fused.append((td.get("next").clone(), root.clone()))  # clones: an executor may reuse its buffers
        td = root

    replayed = _replay(env, seed, actions)
    against = f"against step() then reset() of the done envs after set_seed({seed})"
    try:
        _check_same_steps(replayed, fused, "step_and_maybe_reset {}", against)
    except AssertionError:
        _check_same_steps(replayed, _replay(env, seed, actions), "step() then reset() of the done envs, {}",
                          f"in two replays of the same actions after set_seed({seed}): the env is not deterministic")
        raise


def _replay(env: EnvBase, seed: int, actions: list[TensorDictBase]) -> list[tuple[TensorDictBase, TensorDictBase]]:
    """``(td["next"], next root)`` of each step of ``step`` then ``reset`` of the done envs (none reset when none is
    done, as in ``step_and_maybe_reset``) on ``actions`` and the roots they were drawn on. A replay stops where its
    data differ from those roots: its last next root already differs, and other data could break an action mask.
    ``td["next"]`` is read before the reset, which must leave it as it was (the done envs' terminal data)."""
    env.set_seed(seed)
    td, out = env.reset(), []
    _check_same(actions[0].exclude(*env.action_keys), td, "reset data",
                f"in two resets after set_seed({seed}): the env is not deterministic")
    for t, drawn in enumerate(actions):
        if t and _difference(drawn.exclude(*env.action_keys), td.exclude(*env.action_keys)) is not None:
            break
        td = env.step(td.update(drawn.select(*env.action_keys)))
        stepped = td.get("next").clone()
        root = env.step_mdp(td)
        done = root.get("done")
        if bool(done.any()):
            root.set("_reset", done.clone())
            root = env.reset(root)
            _check_same(stepped, td.get("next"), f"step's next data at step {t}",
                        "after reset(step_mdp(td)) of the done envs, which must leave it as it was")
        out.append((stepped, root.clone()))
        td = root
    return out


def _check_same_steps(expected: list, observed: list, what: str, against: str) -> None:
    """Per step, ``observed``'s ``next`` data and next root have ``expected``'s keys and equal values."""
    for t, (pair, other) in enumerate(zip(expected, observed)):
        for part, old_td, new_td in zip(("next data", "next root"), pair, other):
            _check_same(old_td, new_td, f"{what.format(part)} at step {t}", against)


def _check_same(expected: TensorDictBase, observed: TensorDictBase, where: str, against: str) -> None:
    """``observed`` has ``expected``'s keys and, per entry, equal values (``torch.equal``: the same computation)."""
    difference = _difference(expected, observed)
    if difference is not None:
        key, what, old, new = difference
        raise _fail(key, f"{what} of the {where} {against}", old, new)


def _difference(expected: TensorDictBase, observed: TensorDictBase) -> tuple[NestedKey, str, object, object] | None:
    """The first entry where ``observed`` differs from ``expected``: ``(key, what differs, expected, observed)``; a
    value in words: its first differing element and the envs (rows) that differ, not every tensor."""
    old_keys, new_keys = set(expected.keys(True, True)), set(observed.keys(True, True))
    for key in sorted(old_keys ^ new_keys, key=str):
        return key, "entry", "present" if key in old_keys else "absent", "present" if key in new_keys else "absent"
    for key in sorted(old_keys, key=str):
        old, new = expected.get(key), observed.get(key)
        if old.shape != new.shape or old.dtype != new.dtype:
            return key, "shape and dtype", (tuple(old.shape), old.dtype), (tuple(new.shape), new.dtype)
        if torch.equal(old, new):
            continue
        differs = (old != new) & ~(old.isnan() & new.isnan()) if old.is_floating_point() else old != new
        if bool(differs.any()):  # else NaN in the same places: no difference
            rows = differs.reshape(old.shape[0], -1).any(-1).nonzero().flatten().tolist()
            at = tuple(differs.nonzero()[0].tolist())
            envs = f"{len(rows)} of {old.shape[0]} envs differ ({rows[:8]}{', ...' if len(rows) > 8 else ''})"
            return key, "value", f"{old[at].item()} at index {at}", f"{new[at].item()}; {envs}"
    return None
