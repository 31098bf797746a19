"""Tensor specs: the shape, dtype, device and domain of every entry an environment reads or writes.

Shapes always include the batch: ``env.full_action_spec["agents", "action"].shape == (num_envs, n_agents, d)``.

>>> import torch
>>> spec = Bounded(low=-1.0, high=1.0, shape=(4, 2))
>>> spec.is_in(spec.rand())
True
>>> spec.project(torch.full((4, 2), 3.0))[0].tolist()
[1.0, 1.0]
"""

from __future__ import annotations

from ._core.composite import DONE_KEYS, Composite, complete_done_spec
from ._core.leaf_specs import (
    Binary, Bounded, Categorical, MultiCategorical, NestedKey, OneHot, TensorSpec, Unbounded, legal_choices,
)

__all__ = [
    "Binary",
    "Bounded",
    "Categorical",
    "Composite",
    "DONE_KEYS",
    "MultiCategorical",
    "NestedKey",
    "OneHot",
    "TensorSpec",
    "Unbounded",
    "legal_choices",
    "complete_done_spec",
]
