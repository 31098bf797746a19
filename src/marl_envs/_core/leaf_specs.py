"""The leaf specs (one tensor each) and the shape helpers ``marl_envs.specs`` builds on; import them from there."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = [
    "Binary", "Bounded", "Categorical", "MultiCategorical", "NestedKey", "OneHot", "ShapeLike", "TensorSpec",
    "Unbounded", "legal_choices",
]

NestedKey = str | tuple[str, ...]
ShapeLike = int | Sequence[int] | torch.Size


def legal_choices(mask):
    """The choices an action mask (``(..., n)`` bools, ``True`` = allowed) lets an agent take: its own row, or every
    choice where the row allows none (an agent with no legal move, whose action the library ignores). The one rule of
    what is legal: sampling, the check before a step and the check inside a compiled step all read it. Any array with
    ``any``, ``~`` and ``|`` (torch, NumPy, JAX)."""
    return mask | ~mask.any(-1)[..., None]


def as_size(shape: ShapeLike) -> torch.Size:
    return torch.Size([shape]) if isinstance(shape, int) else torch.Size(shape)


def ordinal_device(device: torch.device | str | int | None) -> torch.device:
    """``torch.device(device)`` (the CPU for None) with the index made explicit where torch would fill it in:
    ``"cuda"`` is ``cuda:<current device>``, the device every tensor made there reports, so that a spec's device
    compares equal to its tensors' devices."""
    dev = torch.device(device if device is not None else "cpu")
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return dev


def as_tuple(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def key_str(key: NestedKey) -> str:
    return repr(key if isinstance(key, str) else tuple(key))


def expanded_shape(shape: tuple, current: torch.Size, what: str) -> torch.Size:
    """The shape ``expand(*shape)`` (or ``expand(shape)``) asks ``what`` of shape ``current`` for: it must end
    with ``current`` (new dims are leading)."""
    new_shape = as_size(shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
    if len(new_shape) < len(current) or new_shape[len(new_shape) - len(current) :] != current:
        raise ValueError(f"cannot expand {what} of shape {tuple(current)} to {tuple(new_shape)}")
    return new_shape


class TensorSpec:
    """Base class of the leaf specs: a tensor's shape (batch included), dtype and device."""

    def __init__(self, shape: ShapeLike, dtype: torch.dtype, device: torch.device | str | None = None):
        self.shape = as_size(shape)
        self.dtype = dtype
        self.device = ordinal_device(device)

    # -- domain ---------------------------------------------------------------------------------------
    def in_domain(self, value: torch.Tensor) -> torch.Tensor:
        """Elementwise bool tensor: value lies in the domain (dtype and shape already checked)."""
        return torch.ones((), dtype=torch.bool, device=value.device)

    def is_in(self, value: torch.Tensor) -> bool:
        """True if ``value`` has this spec's dtype, trailing shape and device, and lies in its domain."""
        if not isinstance(value, torch.Tensor) or value.dtype != self.dtype or value.device != self.device:
            return False
        if value.shape[value.ndim - len(self.shape) :] != self.shape or value.ndim < len(self.shape):
            return False
        return bool(self.in_domain(value).all())

    def project(self, value: torch.Tensor) -> torch.Tensor:
        """The closest value in the domain (identity for unbounded specs)."""
        return value.to(self.dtype)

    def rand(self, shape: ShapeLike = (), *, generator: torch.Generator | None = None) -> torch.Tensor:
        """A random value of shape ``(*shape, *self.shape)``."""
        raise NotImplementedError

    def zero(self, shape: ShapeLike = ()) -> torch.Tensor:
        """Zeros of shape ``(*shape, *self.shape)``."""
        return torch.zeros((*as_size(shape), *self.shape), dtype=self.dtype, device=self.device)

    # -- structure ------------------------------------------------------------------------------------
    def _fields(self) -> dict:
        """Constructor arguments other than shape and device."""
        return {"dtype": self.dtype}

    def _tensor_fields(self) -> dict[str, torch.Tensor]:
        """Fields holding tensors shaped like the spec (plus trailing dims), expanded and moved with it."""
        return {}

    def _rebuild(self, shape: torch.Size, device: torch.device, **tensors: torch.Tensor) -> TensorSpec:
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.shape, new.device = torch.Size(shape), ordinal_device(device)
        for name, tensor in tensors.items():
            setattr(new, name, tensor)
        return new

    def expand(self, *shape: int | Sequence[int]) -> TensorSpec:
        """Broadcast to ``shape``, which must end with the current shape (new dims are leading)."""
        new_shape = expanded_shape(shape, self.shape, "a spec")
        tensors = {}
        for name, tensor in self._tensor_fields().items():
            extra = tensor.shape[len(self.shape) :]
            tensors[name] = tensor.expand(*new_shape, *extra).clone()
        return self._rebuild(new_shape, self.device, **tensors)

    def clone(self) -> TensorSpec:
        return self._rebuild(self.shape, self.device, **{k: v.clone() for k, v in self._tensor_fields().items()})

    def to(self, device: torch.device | str) -> TensorSpec:
        return self._rebuild(self.shape, device, **{k: v.to(device) for k, v in self._tensor_fields().items()})

    def __eq__(self, other: object) -> bool:
        if type(self) is not type(other) or self.shape != other.shape or self.device != other.device:
            return False
        if self._fields() != other._fields():
            return False
        mine, theirs = self._tensor_fields(), other._tensor_fields()
        return mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in self._fields().items())
        return f"{type(self).__name__}(shape={tuple(self.shape)}, {fields}, device={self.device})"


class Unbounded(TensorSpec):
    """Any value of the dtype (float32 by default)."""

    def __init__(self, shape: ShapeLike = (), dtype: torch.dtype = torch.float32, device=None):
        super().__init__(shape, dtype, device)

    def rand(self, shape: ShapeLike = (), *, generator=None) -> torch.Tensor:
        full = (*as_size(shape), *self.shape)
        if self.dtype.is_floating_point:
            return torch.randn(full, generator=generator, device=self.device).to(self.dtype)
        if self.dtype == torch.bool:
            return torch.randint(0, 2, full, generator=generator, device=self.device).bool()
        return torch.randint(-100, 100, full, generator=generator, device=self.device).to(self.dtype)


class Bounded(TensorSpec):
    """Values in ``[low, high]`` elementwise; ``low``/``high`` broadcast to ``shape``."""

    def __init__(self, low, high, shape: ShapeLike | None = None, dtype: torch.dtype = torch.float32, device=None):
        low = torch.as_tensor(low, dtype=dtype, device=device)
        high = torch.as_tensor(high, dtype=dtype, device=device)
        if shape is None:
            shape = torch.broadcast_shapes(low.shape, high.shape)
        super().__init__(shape, dtype, device)
        try:
            self.low = low.expand(self.shape).clone()
            self.high = high.expand(self.shape).clone()
        except RuntimeError as err:
            raise ValueError(
                f"low {tuple(low.shape)} and high {tuple(high.shape)} do not broadcast to shape {tuple(self.shape)}"
            ) from err
        if bool((self.low > self.high).any()):
            raise ValueError(f"Bounded spec needs low <= high, got low={self.low} high={self.high}")
        # read once here: rand() then never reads the bounds on the host
        self._finite = bool((torch.isfinite(self.low) & torch.isfinite(self.high)).all())

    def _tensor_fields(self):
        return {"low": self.low, "high": self.high}

    def in_domain(self, value):
        return (value >= self.low) & (value <= self.high)

    def project(self, value):
        return torch.maximum(torch.minimum(value.to(self.dtype), self.high), self.low)

    def rand(self, shape: ShapeLike = (), *, generator=None) -> torch.Tensor:
        full = (*as_size(shape), *self.shape)
        low, high = self.low.expand(full), self.high.expand(full)
        if self.dtype.is_floating_point:
            u = torch.rand(full, generator=generator, device=self.device, dtype=self.dtype)
            value = low + (high - low) * u
            if not self._finite:  # half-open or unbounded dims: sample around the finite end
                finite = torch.isfinite(low) & torch.isfinite(high)
                normal = torch.randn(full, generator=generator, device=self.device, dtype=self.dtype)
                anchor = torch.where(torch.isfinite(low), low, torch.where(torch.isfinite(high), high, 0.0))
                value = torch.where(finite, value, self.project(anchor + normal))
            return value
        u = torch.rand(full, generator=generator, device=self.device, dtype=torch.float64)
        return (low.double() + ((high.double() - low.double() + 1) * u).floor()).to(self.dtype).minimum(high)


class _Discrete(TensorSpec):
    """Shared behaviour of specs over ``n`` choices with an optional mask of allowed choices."""

    n: int
    mask: torch.Tensor | None

    def _mask_shape(self) -> torch.Size:
        raise NotImplementedError

    def _set_mask(self, mask: torch.Tensor | None) -> None:
        if mask is not None:
            mask = torch.as_tensor(mask, dtype=torch.bool, device=self.device)
            try:
                mask = mask.expand(self._mask_shape()).clone()
            except RuntimeError as err:
                raise ValueError(
                    f"mask of shape {tuple(mask.shape)} does not fit a spec with mask shape "
                    f"{tuple(self._mask_shape())}"
                ) from err
        self.mask = mask

    def update_mask(self, mask: torch.Tensor | None) -> None:
        """Set the allowed choices (``True`` = allowed); ``None`` allows every choice."""
        self._set_mask(mask)

    def _tensor_fields(self):
        return {} if self.mask is None else {"mask": self.mask}

    def _rebuild(self, shape, device, **tensors):
        tensors.setdefault("mask", None)
        return super()._rebuild(shape, device, **tensors)

    def _fields(self):
        return {"n": self.n, "dtype": self.dtype}

    def _sample_index(self, shape: ShapeLike, generator, mask: torch.Tensor | None) -> torch.Tensor:
        """Uniform choice in ``[0, n)`` of shape ``(*shape, *self._choice_shape)``, respecting ``mask``."""
        mask = self.mask if mask is None else mask
        lead = as_size(shape)
        if mask is None:
            return torch.randint(0, self.n, (*lead, *self._mask_shape()[:-1]), generator=generator, device=self.device)
        mask = mask.expand(*lead, *self._mask_shape())
        weights = legal_choices(mask.reshape(-1, self.n)).float()
        return torch.multinomial(weights, 1, generator=generator).reshape(mask.shape[:-1])


class Categorical(_Discrete):
    """An integer in ``[0, n)`` per element of ``shape``; ``mask`` has shape ``(*shape, n)``."""

    def __init__(self, n: int, shape: ShapeLike = (), dtype: torch.dtype = torch.int64, device=None, mask=None):
        super().__init__(shape, dtype, device)
        self.n = int(n)
        self._set_mask(mask)

    def _mask_shape(self):
        return torch.Size((*self.shape, self.n))

    def in_domain(self, value):
        inside = (value >= 0) & (value < self.n)
        if self.mask is not None:
            allowed = legal_choices(self.mask).expand(*value.shape, self.n).gather(-1, value.long().clamp(0, self.n - 1)[..., None])
            inside = inside & allowed[..., 0]
        return inside

    def project(self, value):
        return value.round().clamp(0, self.n - 1).to(self.dtype)

    def rand(self, shape: ShapeLike = (), *, generator=None, mask=None) -> torch.Tensor:
        return self._sample_index(shape, generator, mask).to(self.dtype)


class OneHot(_Discrete):
    """A one-hot vector over ``n`` choices; ``shape`` ends with ``n`` and so does ``mask``."""

    def __init__(self, n: int, shape: ShapeLike | None = None, dtype: torch.dtype = torch.int64, device=None, mask=None):
        shape = (n,) if shape is None else shape
        super().__init__(shape, dtype, device)
        if not self.shape or self.shape[-1] != n:
            raise ValueError(f"OneHot shape must end with n={n}, got {tuple(self.shape)}")
        self.n = int(n)
        self._set_mask(mask)

    def _mask_shape(self):
        return self.shape

    def in_domain(self, value):
        ones = value == 1
        valid = ((value == 0) | ones).all(-1) & (ones.sum(-1) == 1)
        if self.mask is not None:
            valid = valid & (ones & legal_choices(self.mask)).any(-1)
        return valid

    def project(self, value):
        return torch.nn.functional.one_hot(value.float().argmax(-1), self.n).to(self.dtype)

    def rand(self, shape: ShapeLike = (), *, generator=None, mask=None) -> torch.Tensor:
        return torch.nn.functional.one_hot(self._sample_index(shape, generator, mask), self.n).to(self.dtype)

    def to_categorical(self, value: torch.Tensor) -> torch.Tensor:
        """Index of the hot entry."""
        return value.argmax(-1)


class Binary(TensorSpec):
    """0/1 values (``bool`` by default, as done flags)."""

    def __init__(self, shape: ShapeLike = (), dtype: torch.dtype = torch.bool, device=None):
        super().__init__(shape, dtype, device)

    def in_domain(self, value):
        return (value == 0) | (value == 1)

    def project(self, value):
        return (value > 0.5 if value.dtype.is_floating_point else value != 0).to(self.dtype)

    def rand(self, shape: ShapeLike = (), *, generator=None) -> torch.Tensor:
        full = (*as_size(shape), *self.shape)
        return torch.randint(0, 2, full, generator=generator, device=self.device).to(self.dtype)


class MultiCategorical(TensorSpec):
    """Several categorical choices; the last dim indexes them, choice ``i`` lies in ``[0, nvec[i])``."""

    def __init__(self, nvec: Sequence[int], shape: ShapeLike | None = None, dtype: torch.dtype = torch.int64, device=None):
        nvec_t = torch.as_tensor(list(nvec), dtype=torch.int64, device=device)
        shape = nvec_t.shape if shape is None else shape
        super().__init__(shape, dtype, device)
        if not self.shape or self.shape[-1] != nvec_t.numel():
            raise ValueError(f"MultiCategorical shape must end with len(nvec)={nvec_t.numel()}, got {tuple(self.shape)}")
        self.nvec = nvec_t.expand(self.shape).clone()

    def _tensor_fields(self):
        return {"nvec": self.nvec}

    def in_domain(self, value):
        return (value >= 0) & (value < self.nvec)

    def project(self, value):
        return torch.minimum(value.round().clamp_min(0), self.nvec - 1).to(self.dtype)

    def rand(self, shape: ShapeLike = (), *, generator=None) -> torch.Tensor:
        full = (*as_size(shape), *self.shape)
        u = torch.rand(full, generator=generator, device=self.device, dtype=torch.float64)
        return (u * self.nvec.expand(full)).floor().long().minimum(self.nvec - 1).to(self.dtype)
