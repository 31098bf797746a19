"""The JAX families' step never waits for the device: proved on the CPU through the device code path.

``device_path=True`` makes an env on the CPU take exactly the code it takes on a GPU. Every host read of
array data is counted there (torch's and JAX's ways of reading an array's values on the host); a step that reads
nothing never waits for the device. The compiled step is also exported for CUDA and searched for conditionals
(XLA reads a conditional's predicate on the host on a GPU), and run under JAX's guard against implicit
host-to-device copies.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import marl_envs  # noqa: E402
from marl_envs.backends.jax import _executor  # noqa: E402

FAMILIES = {  # one env of each JAX family, small and quick to compile
    "gymnax": ("gymnax/CartPole-v1", {}),
    "jaxmarl": ("jaxmarl/MPE_simple_spread_v3", {}),
    "jaxmarl_smax": ("jaxmarl/HeuristicEnemySMAX", {"scenario": "3m"}),  # masks, own ends, the root "state"
    "brax": ("brax/fast", {}),
    "jumanji": ("jumanji/LevelBasedForaging-v0", {}),
    "playground": ("playground/CartpoleBalance", {}),  # a split robot compiles a minute longer: the same code path
    "custom_env": ("docs/custom_env.md", {}),  # the user's JAX env of the docs, built from the page's code
}
B = 3
DOCS = Path(__file__).parents[2] / "docs" / "custom_env.md"


def docs_jax_env() -> dict:
    """The namespace of the blocks of ``docs/custom_env.md``'s section on an env written in JAX, run in order (with
    the specs and ``marl_envs`` the page imports before it)."""
    from marl_envs.specs import Bounded, Composite, Unbounded

    text = DOCS.read_text()
    section = text[text.index("## An env written in JAX"):]
    section = section[:section.index("\n## ", 1)]
    namespace = {"marl_envs": marl_envs, "Bounded": Bounded, "Composite": Composite, "Unbounded": Unbounded}
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        exec(compile(block, f"{DOCS.name}[JAX]", "exec"), namespace)
    return namespace


@pytest.fixture(scope="module", params=list(FAMILIES))
def device_env(request):
    name, kwargs = FAMILIES[request.param]
    if name.startswith("docs/"):
        return docs_jax_env()["JaxRendezvous"](num_envs=B, max_steps=4, device_path=True)
    backend = name.split("/")[0]
    if not marl_envs.registry.backend_installed(backend):  # not importorskip: the backend prepares MuJoCo
        pytest.skip(f"{backend} is not installed")
    env = marl_envs.make(name, num_envs=B, seed=0, max_steps=4, device_path=True, **kwargs)
    assert env.device_path and env._deferred  # the device path, and its default check
    return env


class HostReads:
    """Counts the host reads of array data while active: ``counts`` by the method that read (torch's and JAX's
    methods, NumPy's conversions of a JAX array)."""

    TORCH = ("__bool__", "item", "tolist", "numpy", "nonzero", "__array__", "__int__", "__float__", "__index__")
    JAX = ("__array__", "__bool__", "__int__", "__float__", "__index__", "item", "tolist", "block_until_ready",
           "_value")

    def __init__(self, monkeypatch):
        self.counts: Counter = Counter()
        self.polls = 0
        self._polling = False
        array_type = type(jax.numpy.zeros(1))
        for name in self.TORCH:
            self._wrap(monkeypatch, torch.Tensor, name, f"torch.{name}")
        for name in self.JAX:
            self._wrap(monkeypatch, array_type, name, f"jax.{name}")
        self._wrap_function(monkeypatch, jax, "device_get", "jax.device_get")
        self._wrap_function(monkeypatch, jax, "block_until_ready", "jax.block_until_ready")
        for name in ("asarray", "array", "asanyarray", "ascontiguousarray", "copyto"):  # JAX's arrays hand NumPy
            self._wrap_function(monkeypatch, np, name, f"numpy.{name}", only=array_type)  # their buffer in C
        original = _executor.read_computed

        def read_computed_record(array):  # the deferred check's flag: read only once computed, so it never waits
            assert array.is_ready()
            self.polls += 1
            self._polling = True
            try:
                return original(array)
            finally:
                self._polling = False

        monkeypatch.setattr(_executor, "read_computed", read_computed_record)
        self.active = False

    def _count(self, label):
        if self.active and not self._polling:
            self.counts[label] += 1

    def _wrap(self, monkeypatch, owner, name, label):
        original = getattr(owner, name, None)
        if original is None:
            return
        if isinstance(original, property):
            def getter(obj, _get=original.fget):
                self._count(label)
                return _get(obj)
            monkeypatch.setattr(owner, name, property(getter))
            return

        def wrapped(*args, _original=original, **kwargs):
            self._count(label)
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapped)

    def _wrap_function(self, monkeypatch, module, name, label, only=None):
        original = getattr(module, name)

        def wrapped(*args, **kwargs):
            if only is None or any(isinstance(a, only) for a in args):
                self._count(label)
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapped)

    @contextlib.contextmanager
    def counting(self):
        self.active = True
        try:
            yield self.counts
        finally:
            self.active = False


def _warm(env):
    """Compile every program (and take the first reads of a fresh env) before counting."""
    td = env.rand_action(env.reset())
    env.step(td.clone())
    td, root = env.step_and_maybe_reset(td)
    env.rollout(3, break_when_any_done=False)
    return env.rand_action(root)


def test_no_host_read_in_step_step_and_maybe_reset_and_rollout(device_env, monkeypatch):
    env = device_env
    td = _warm(env)
    reads = HostReads(monkeypatch)
    with reads.counting() as counts:
        env.step(td.clone())
    assert not counts, f"env.step read arrays on the host: {dict(counts)}"
    with reads.counting() as counts:
        for _ in range(6):  # max_steps=4: episode ends and resets among them
            td, root = env.step_and_maybe_reset(td)
            td = env.rand_action(root)
    assert not counts, f"env.step_and_maybe_reset read arrays on the host: {dict(counts)}"
    with reads.counting() as counts:
        data = env.rollout(6, break_when_any_done=False)
    assert not counts, f"env.rollout read arrays on the host: {dict(counts)}"
    assert data["next", "truncated"][:, 3].all()  # the time limit was told, on the device
    assert reads.polls > 0  # the deferred check's flag was read, never before it was computed


def test_the_reads_are_counted(device_env, monkeypatch):
    """The counter sees a read where there is one: a test that could not fail would prove nothing."""
    env = device_env
    td = _warm(env)
    reads = HostReads(monkeypatch)
    with reads.counting() as counts:
        data = env.step(td)
        bool(data["next", "done"].any())
        np.asarray(env._executor.carried()[1])
    assert counts["torch.__bool__"] == 1 and counts["numpy.asarray"] == 1


def test_the_step_holds_no_conditional_when_compiled_for_cuda(device_env):
    """XLA copies a conditional's predicate to the host and waits for it on a GPU: the step exported for CUDA
    (step, done rules, time limit, auto-reset, the deferred check) must hold none."""
    env = device_env
    for name in ("step", "step_reset"):
        text = env.export_program(name, platform="cuda").mlir_module()
        conditionals = text.count("stablehlo.case") + text.count("stablehlo.if")
        assert conditionals == 0, name
    assert not env._model.resets_when_needed  # only a reset that settles the model (Playground's CheetahRun) has one


def test_steps_make_no_implicit_host_to_device_copy(device_env):
    env = device_env
    td = _warm(env)
    with jax.transfer_guard_host_to_device("disallow"):
        for _ in range(5):
            td, root = env.step_and_maybe_reset(td)
            td = env.rand_action(root)
        env.step(td)


def test_the_documented_jax_env_keeps_the_contract_and_names_a_misshapen_output():
    """The docs' own JAX env (``docs/custom_env.md``): every promise of the contract on both code paths; the
    misshapen model of the page refused when its env is built, the output, its shape and the expected one named."""
    namespace = docs_jax_env()
    for device_path in (False, True):
        marl_envs.check_env_specs(namespace["JaxRendezvous"](num_envs=B, max_steps=5, device_path=device_path), seed=0)
    with pytest.raises(ValueError, match=r"Misshapen.step_one's \('agents', 'reward'\) has shape \(3,\) \(3 values\); "
                                         r"expected \(3, 1\), its spec's shape without the batch dim"):
        namespace["MisshapenRendezvous"](num_envs=B)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool, torch.int32, torch.int64])
def test_the_device_paths_hand_offs_are_jax_and_torchs_own(dtype):
    """``Transfer`` with DLPack gives what ``jax.dlpack.from_dlpack`` and ``torch.from_dlpack`` give, sharing the
    memory both ways (int64 becomes JAX's int32, as JAX's own function makes it)."""
    from marl_envs.backends.jax import Transfer

    io = Transfer(torch.device("cpu"), dlpack=True)
    tensor = (torch.arange(12) % 3).reshape(4, 3).to(dtype)
    array, public = io.to_jax(tensor), jax.dlpack.from_dlpack(tensor)
    assert array.dtype == public.dtype and array.sharding == public.sharding and array.committed == public.committed
    np.testing.assert_array_equal(np.asarray(array), np.asarray(public))
    if dtype != torch.int64:
        assert array.unsafe_buffer_pointer() == tensor.data_ptr()
    back = io.to_torch(array)
    assert back.dtype == torch.from_dlpack(array).dtype and back.data_ptr() == array.unsafe_buffer_pointer()
    assert torch.equal(back, torch.from_dlpack(public))


# -- bad actions, in each mode ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cartpole():
    pytest.importorskip("gymnax")
    return marl_envs.make("gymnax/CartPole-v1", num_envs=B, seed=0)


def _bad(env):
    td = env.rand_action(env.reset())
    action = td["action"].clone()
    action[1] = 7  # CartPole has 2 actions
    td["action"] = action
    return td


def test_deferred_check_raises_at_the_next_call_and_leaves_the_env_unadvanced(cartpole):
    env = cartpole
    env.validate_actions = "deferred"
    try:
        td = _bad(env)
        before = td["observation"].clone()
        td, root = env.step_and_maybe_reset(td)
        nxt = td["next"]
        assert torch.isnan(nxt["observation"][1]).all() and torch.isnan(nxt["reward"][1]).all()
        assert not nxt["done"][1].any()
        assert torch.equal(root["observation"][1].isnan(), torch.ones(4, dtype=torch.bool))
        assert torch.isfinite(nxt["observation"][[0, 2]]).all()  # the other envs stepped
        with pytest.raises(ValueError, match=r"action 'action' of env 1 at step \d+ \(counted from the env's build\) "
                                             r"was 7\.0 .*expected integers in \[0, 2\).*validate_actions='deferred' "
                                             r"left that env where it was"):
            env.step(env.rand_action(root))
        # the env was not advanced: the state is the one before the bad step
        np.testing.assert_array_equal(np.asarray(env._env_state(1).x), before[1, 0].numpy())
        env.step(env.rand_action(env.reset()))  # raised once: the flag is cleared
    finally:
        env.validate_actions = True


def test_immediate_check_raises_before_the_step(cartpole):
    env = cartpole
    env.validate_actions = "immediate"
    try:
        td = _bad(env)
        with pytest.raises(ValueError, match=r"action 'action' has 1 invalid value\(s\), e\.g\. \[7\] at index \[1\]; "
                                             r"expected integers in \[0, 2\)"):
            env.step(td)
        assert "next" not in td.keys()
    finally:
        env.validate_actions = True


def test_no_check_passes_the_action_to_the_env(cartpole):
    env = cartpole
    env.validate_actions = False
    try:
        td = env.step(_bad(env))
        assert torch.isfinite(td["next", "observation"]).all()  # gymnax reads 7 as "push right"
        env.step(env.rand_action(env.reset()))
    finally:
        env.validate_actions = True


def test_validate_actions_values_are_checked(cartpole):
    with pytest.raises(ValueError, match=r"validate_actions must be True, False, 'immediate' or 'deferred', got 'soon'"):
        cartpole.validate_actions = "soon"
    assert cartpole.validate_actions is True and cartpole._deferred  # the JAX families' default: deferred


def test_deferred_is_for_the_jax_families():
    env = marl_envs.make("vmas/navigation", num_envs=2)
    with pytest.raises(ValueError, match=r"cannot check actions inside its step \(validate_actions='deferred' is "
                                         r"for the JAX families\)"):
        env.validate_actions = "deferred"
    assert not env._deferred
