"""Per-env random streams of the VMAS backend.

VMAS draws its randomness from the global torch / numpy / python generators, swapped in and out around each
public call from one class-level slot shared by every ``Environment``. ``RngStreams`` gives each wrapped env
its own streams so interleaved envs never perturb each other: the ``main`` stream drives steps and full
resets (the one ``vmas`` itself would use, so a wrapped env replays raw VMAS exactly), and a separate ``reset``
stream drives masked resets, so a partial reset never shifts the randomness later steps draw.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Iterator

import numpy as np
import torch

__all__ = ["RngStreams"]


def _vmas_slot() -> list:
    from vmas.simulator.environment.environment import Environment

    return Environment.vmas_random_state


def _seeded_state(seed: int) -> list:
    """The (torch, numpy, python) generator states VMAS's own ``seed(seed)`` produces, made on generators of their
    own: seeding torch's global one would seed every CUDA device's too."""
    return [torch.Generator().manual_seed(seed).get_state(), np.random.RandomState(seed).get_state(),
            random.Random(seed).getstate()]


def _derived_seed(*parts: int | bytes) -> int:
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        digest.update(part if isinstance(part, bytes) else int(part).to_bytes(8, "little", signed=True))
    return int.from_bytes(digest.digest(), "little") % 2**32


class RngStreams:
    """Two private (torch, numpy, python[, cuda]) random streams of one VMAS env: ``main`` and ``reset``.

    ``use(stream)`` swaps a stream into VMAS's class-level slot (and the CUDA generator of the env's device)
    for the duration of a block and saves it back afterwards, leaving the slot as it was for anyone else.
    """

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        slot = _vmas_slot()
        # Adopt the state VMAS would use next, without drawing from it: wrapping does not advance it.
        self.main = list(slot[:3]) + ([torch.cuda.get_rng_state(self.device)] if self._cuda else [])
        self.reset = self._fresh(_derived_seed(slot[0].numpy().tobytes()))

    def _fresh(self, seed: int) -> list:
        state = _seeded_state(seed)
        if self._cuda:
            state.append(torch.Generator(device=self.device).manual_seed(seed).get_state())
        return state

    def seed(self, seed: int) -> None:
        """Seed ``main`` exactly as ``vmas.Environment.seed(seed)`` would; derive ``reset`` from it.

        numpy takes seeds in ``[0, 2**32)`` only, so other ints are reduced modulo ``2**32`` first.
        """
        seed %= 2**32
        self.main = self._fresh(seed)
        self.reset = self._fresh(_derived_seed(seed, 0x5EED))

    @contextlib.contextmanager
    def scratch(self) -> Iterator[None]:
        """Run a block on a throwaway copy of ``main``: the real streams draw nothing."""
        saved = self.main
        self.main = list(saved)
        try:
            with self.use("main"):
                yield
        finally:
            self.main = saved

    @contextlib.contextmanager
    def use(self, name: str) -> Iterator[None]:
        stream = getattr(self, name)
        slot = _vmas_slot()
        saved = list(slot)
        slot[:3] = stream[:3]
        if self._cuda:
            saved_cuda = torch.cuda.get_rng_state(self.device)
            torch.cuda.set_rng_state(stream[3], self.device)
        try:
            yield
        finally:
            stream[:3] = slot[:3]
            slot[:] = saved
            if self._cuda:
                stream[3] = torch.cuda.get_rng_state(self.device)
                torch.cuda.set_rng_state(saved_cuda, self.device)
