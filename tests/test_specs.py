import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from marl_envs.specs import Binary, Bounded, Categorical, Composite, MultiCategorical, OneHot, Unbounded

shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)
floats = st.floats(-1e3, 1e3, allow_nan=False, width=32)


def leaf_specs():
    def bounded(shape, a, b):
        lo, hi = min(a, b), max(a, b)
        return Bounded(lo, hi, shape)

    return st.one_of(
        shapes.map(Unbounded),
        st.builds(bounded, shapes, floats, floats),
        st.builds(lambda s, n: Categorical(n, s), shapes, st.integers(1, 6)),
        st.builds(lambda s, n: OneHot(n, (*s, n)), shapes, st.integers(1, 6)),
        shapes.map(Binary),
        st.builds(lambda s, nvec: MultiCategorical(nvec, (*s, len(nvec))), shapes, st.lists(st.integers(1, 5), min_size=1, max_size=3)),
    )


@settings(max_examples=150, deadline=None)
@given(spec=leaf_specs(), seed=st.integers(0, 2**31))
def test_rand_is_in_and_project_is_identity_inside(spec, seed):
    gen = torch.Generator().manual_seed(seed)
    value = spec.rand(generator=gen)
    assert value.shape == spec.shape and value.dtype == spec.dtype
    assert spec.is_in(value)
    assert torch.equal(spec.project(value), value)
    assert spec.is_in(spec.rand((2,), generator=gen))


@settings(max_examples=150, deadline=None)
@given(spec=leaf_specs(), scale=st.floats(2, 100))
def test_project_lands_in_domain(spec, scale):
    junk = (torch.randn(spec.shape) * scale).to(spec.dtype if spec.dtype.is_floating_point else torch.float32)
    if not spec.dtype.is_floating_point:
        junk = junk.round().to(spec.dtype) if not isinstance(spec, Binary) else junk
    assert spec.is_in(spec.project(junk))


@settings(max_examples=60, deadline=None)
@given(spec=leaf_specs(), lead=shapes)
def test_expand_clone_eq(spec, lead):
    expanded = spec.expand(*lead, *spec.shape)
    assert expanded.shape == torch.Size((*lead, *spec.shape))
    assert expanded.is_in(expanded.rand())
    assert spec.clone() == spec and spec.clone() is not spec
    assert expanded != spec


@settings(max_examples=100, deadline=None)
@given(n=st.integers(2, 6), shape=shapes, data=st.data())
def test_masked_rand_respects_mask(n, shape, data):
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    if not mask.any():
        mask[0] = True
    cat = Categorical(n, shape, mask=mask)
    assert mask[cat.rand((50,))].all()
    hot = OneHot(n, (*shape, n), mask=mask)
    assert mask[hot.rand((50,)).argmax(-1)].all()
    assert cat.is_in(cat.rand()) and hot.is_in(hot.rand())


def test_mask_update_and_domain():
    spec = Categorical(3, (2,))
    spec.update_mask(torch.tensor([[True, False, False], [False, False, True]]))
    assert spec.rand((20,)).tolist() == [[0, 2]] * 20
    assert not spec.is_in(torch.tensor([1, 2]))
    spec.update_mask(None)
    assert spec.is_in(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"mask of shape \(4,\) does not fit a spec with mask shape \(2, 3\)"):
        spec.update_mask(torch.ones(4, dtype=torch.bool))


def test_is_in_rejects_wrong_dtype_shape_range():
    spec = Bounded(-1.0, 1.0, (3,))
    assert not spec.is_in(torch.zeros(3, dtype=torch.float64))
    assert not spec.is_in(torch.zeros(4))
    assert not spec.is_in(torch.tensor([0.0, 2.0, 0.0]))
    assert not Categorical(3).is_in(torch.tensor(3))
    assert not OneHot(3).is_in(torch.tensor([1, 1, 0]))
    assert not MultiCategorical([2, 3]).is_in(torch.tensor([1, 3]))


def test_bounded_validation():
    with pytest.raises(ValueError, match="Bounded spec needs low <= high"):
        Bounded(1.0, -1.0, (2,))
    with pytest.raises(ValueError, match=r"do not broadcast to shape \(2,\)"):
        Bounded(torch.zeros(3), 1.0, (2,))


def test_bounded_half_open_rand_in_domain():
    spec = Bounded(torch.tensor([0.0, -float("inf")]), torch.tensor([float("inf"), float("inf")]), (2,))
    assert spec.is_in(spec.rand((100,)))


def test_composite_nesting_and_values():
    spec = Composite(
        agents=Composite(observation=Unbounded((4, 3, 5)), action=Categorical(2, (4, 3)), shape=(4, 3)),
        done=Binary((4, 1)),
        shape=(4,),
    )
    assert spec.keys(True, True) == [("agents", "observation"), ("agents", "action"), "done"]
    assert spec.keys() == ["agents", "done"]
    assert ("agents", "action") in spec and ("agents", "nope") not in spec
    td = spec.rand()
    assert td.batch_size == (4,) and td["agents"].batch_size == (4, 3)
    assert spec.is_in(td)
    assert spec.is_in(spec.zero())
    td["agents", "action"] = torch.full((4, 3), 7)
    assert not spec.is_in(td)
    assert spec.is_in(spec.project(td))
    assert spec.expand(2, 4)["agents", "observation"].shape == (2, 4, 3, 5)
    assert spec.clone() == spec
    with pytest.raises(KeyError, match=r"no spec at key \('agents', 'reward'\)"):
        spec["agents", "reward"]
    with pytest.raises(ValueError, match=r"does not start with the batch shape \(4, 3\)"):
        spec["agents", "reward"] = Unbounded((3, 1))
    del spec["agents", "action"]
    assert ("agents", "action") not in spec


def test_cuda_without_an_index_is_the_current_gpu(monkeypatch):
    """Tensors made on ``"cuda"`` report ``cuda:<current>``; so do the specs, or no action would match its spec."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    cuda1 = torch.device("cuda", 1)
    assert Unbounded((2,), device="cuda").device == cuda1
    spec = Composite(obs=Unbounded((3, 2)), shape=(3,))
    assert spec.to("cuda").device == cuda1 and spec.to("cuda")["obs"].device == cuda1
    assert Composite(device="cuda:0").device == torch.device("cuda", 0)  # an explicit index stays
    assert Unbounded((2,)).device == torch.device("cpu")
