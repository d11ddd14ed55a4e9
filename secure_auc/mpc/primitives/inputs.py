r"""Secret-sharing the sources' rows with pairwise seeds (no communication per share).

Set-up: every source :math:`k` sends every other computing party :math:`p` a
fresh 128-bit seed :math:`s_{kp}` (from :mod:`secrets`).  To share a block
:math:`t` of its rows :math:`x` (an integer matrix), party :math:`p \ne k`
takes :math:`R_{kp,t}` = the AES-CTR stream (:func:`.prg.ring`) of :math:`(s_{kp}, t)` as its
share, and the source takes :math:`x - \sum_{p \ne k} R_{kp,t} \pmod{2^{64}}`.
Each non-source share is uniformly random and independent of :math:`x`; any
coalition without the source sees only such shares.  The radix sort shares
each round's key digits this way (CrypTen's ``cryptensor(src=...)`` would draw
two torch pads per party and row, about four times slower).
"""

from __future__ import annotations

import numpy as np
import torch

from ..comm import backend, p2p
from .prg import new_seed, ring, seed_to_tensor, tensor_to_seed

__all__ = ["SourceSharing"]


def _pad(seed: bytes, block, shape) -> torch.Tensor:
    return torch.from_numpy(ring(seed, ("input", block), shape))


class SourceSharing:
    """Share rows held by ``sources[k]`` (``sizes[k]`` rows each, public) among all
    computing parties, concatenated in source order."""

    def __init__(self, sizes: list[int], sources: list[int], wait: bool = True):
        """Sends this party's seeds; receives the others' now, or (``wait`` False) at the
        first :meth:`share` (meanwhile the party can send or wait for other messages)."""
        self.rank, self.world = backend.rank(), backend.world_size()
        self.sizes, self.sources = [int(n) for n in sizes], list(sources)
        self.seeds: dict[tuple[int, int], bytes] = {}
        self._sending = []
        for k, src in enumerate(self.sources):  # own seeds first: every seed travels in one message round
            if self.rank == src:
                for p in range(self.world):
                    if p != src:
                        seed = new_seed()
                        self.seeds[(k, p)] = seed
                        t = seed_to_tensor(seed)
                        self._sending.append((t, p2p.isend(t, p, p2p.TAG_SEED)))
        self._incoming = [(k, p2p.irecv((2,), src, p2p.TAG_SEED)) for k, src in enumerate(self.sources)
                          if self.rank != src]
        if wait:
            self._complete()

    def _complete(self) -> None:
        for k, (t, work) in self._incoming:
            work.wait()
            self.seeds[(k, self.rank)] = tensor_to_seed(t)
        self._incoming = []
        p2p.wait_all(w for _, w in self._sending)
        self._sending = []

    def resized(self, sizes: list[int]) -> "SourceSharing":
        """The same sources and seeds for blocks of ``sizes[k]`` rows (no message: blocks
        of every size draw from the seeds' streams under their own names)."""
        self._complete()
        out = object.__new__(SourceSharing)
        out.rank, out.world, out.sources, out.seeds = self.rank, self.world, self.sources, self.seeds
        out._incoming, out._sending = [], []
        out.sizes = [int(n) for n in sizes]
        return out

    def share(self, local, cols: int, block) -> torch.Tensor:
        """This party's shares (rows, cols) of every source's block ``block``.
        ``local``: this party's (sizes[k], cols) int64 rows if it is a source, else ignored."""
        self._complete()
        parts = []
        for k, (n_k, src) in enumerate(zip(self.sizes, self.sources)):
            if self.rank == src:
                x = torch.as_tensor(np.ascontiguousarray(local, dtype=np.int64)).reshape(n_k, cols).clone()
                for p in range(self.world):
                    if p != src:
                        x -= _pad(self.seeds[(k, p)], block, (n_k, cols))
                parts.append(x)
            else:
                parts.append(_pad(self.seeds[(k, self.rank)], block, (n_k, cols)))
        return torch.cat(parts, dim=0) if len(parts) > 1 else parts[0]
