"""The construction checks and messages every part of the library shares: names, keywords, devices, env indices
(the action checks of every step are ``marl_envs._core.actions``).

One wording each, so that a user meets the same message whether a registry name, a VMAS scenario, a Brax env
or a PettingZoo task is misspelled.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from .leaf_specs import ordinal_device
from .messages import accepted_keywords, check_kwargs, did_you_mean, keyword_error, unknown_name

__all__ = ["accepted_keywords", "available_devices", "check_device", "check_env_index", "check_kwargs",
           "checked_keywords", "did_you_mean", "env_keywords", "keyword_error", "unknown_name"]


def env_keywords(cls: type) -> list[str]:
    """The keywords an env class's ``__init__`` names (``num_envs``, ``device``, ``max_steps``, ...): its env-level
    keywords, the ones that are not the backend's own."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return [p.name for p in params if p.kind is p.KEYWORD_ONLY]


def checked_keywords(init: Callable[..., None]) -> Callable[..., None]:
    """Decorate an env class's ``__init__``: a keyword it does not take (also one misspelled so that a required
    keyword is missing, ``num_env=4``) raises the ``keyword_error`` naming the close match, and ``device`` is
    checked by ``check_device`` before the backend allocates on it. Keywords that ``**kwargs`` collects are the
    backend's to check (with ``env=env_keywords(cls)``)."""
    signature = inspect.signature(init)
    params = list(signature.parameters.values())[1:]
    named = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p.name for p in params if p.name in named and p.default is p.empty]
    open_ = any(p.kind is p.VAR_KEYWORD for p in params)  # other keywords are the backend's: maybe right

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            signature.bind(self, *args, **kwargs)
        except TypeError as err:
            unknown = [key for key in kwargs if key not in named]
            missing = [name for name in required[len(args):] if name not in kwargs]
            # with **kwargs, only a keyword close to a missing required one is taken for its typo (num_env=4)
            suspects = [key for key in unknown if not open_ or did_you_mean(key, missing, n=1)]
            if suspects:
                raise keyword_error(type(self).__name__, suspects[0], named) from None
            raise TypeError(f"{type(self).__name__}: {err}") from None
        if "device" in kwargs:
            check_device(kwargs["device"])
        init(self, *args, **kwargs)

    return checked


def check_device(device: Any) -> torch.device:
    """``torch.device(device)`` if torch can put tensors there, else a ``ValueError`` saying why and what can.

    One message for every backend: a device string torch does not parse, ``"cuda"`` on a CPU build of torch or
    a machine without a GPU, ``"cuda:3"`` where torch sees fewer GPUs.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {device!r} is not a device; expected 'cpu', 'cuda' or 'cuda:<index>' (or a "
                         f"torch.device); this machine has {available_devices()}") from None
    if dev.type == "cuda":
        if torch.version.cuda is None:
            raise ValueError(f"device {device!r} is not available: this torch ({torch.__version__}) is a CPU "
                             f"build; install a CUDA build of torch (make TORCH_SPEC=torch setup) or use "
                             f"device='cpu'")
        count = torch.cuda.device_count()
        if count == 0 or (dev.index is not None and dev.index >= count):
            raise ValueError(f"device {device!r} is not available: torch sees {count} CUDA device(s); this machine "
                             f"has {available_devices()}")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r} is not available: torch sees no MPS device; this machine has "
                         f"{available_devices()}")
    return ordinal_device(dev)


def available_devices() -> list[str]:
    """The devices torch can use here: ``["cpu", "cuda:0", ...]``."""
    cuda = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.version.cuda is not None else []
    return ["cpu", *cuda, *(["mps"] if torch.backends.mps.is_available() else [])]


def check_env_index(env_index: Any, num_envs: int) -> int:
    """``env_index`` if it is an int in ``[0, num_envs)``, else ``IndexError``."""
    if isinstance(env_index, bool) or not isinstance(env_index, int) or not 0 <= env_index < num_envs:
        raise IndexError(f"env_index must be an int in [0, {num_envs}), got {env_index!r}")
    return env_index
