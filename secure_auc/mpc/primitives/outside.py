r"""Secret-sharing rows held by input parties that do not compute (the helpers layout).

Set-up: input party (client host) :math:`h` draws a fresh 128-bit seed
:math:`s_{hp}` (from :mod:`secrets`) for every computing party :math:`p`
except its *correction party* :math:`c(h) = h \bmod w`, and sends it to
:math:`p` once.  To share a block :math:`t` of its rows :math:`x` (an integer
matrix), party :math:`p \ne c(h)` takes :math:`R_{hp,t}` = the AES-CTR stream
(:func:`.prg.ring`) of :math:`(s_{hp}, t)` as its share, and the host sends
:math:`c(h)` the correction :math:`x - \sum_{p \ne c(h)} R_{hp,t} \pmod{2^{64}}`.

Each share is uniformly random on its own and any :math:`w - 1` of them are
independent of :math:`x`, so computing parties that do not all collude learn
nothing.  The host's traffic is one correction per block, proportional to
its own rows, plus :math:`16 (w - 1)` bytes of seeds; the correction parties
rotate with :math:`h`, so they share the load.

The two ends are pure functions of the seeds and the corrections; moving them
is the caller's business (:mod:`..comm.inlinks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .prg import new_seed, ring

if TYPE_CHECKING:  # a computing party's shares are tensors; the host's end needs no torch
    import torch

__all__ = ["correction_party", "HostSharing", "OutsideShares"]


def correction_party(h: int, w: int) -> int:
    """The computing party that receives host ``h``'s corrections."""
    return h % w


def _pad(seed: bytes, block, shape) -> np.ndarray:
    return ring(seed, ("outside input", block), shape)


class HostSharing:
    """The input party's end: its seeds and the corrections of its blocks.

    Examples
    --------
    >>> import numpy as np
    >>> host = HostSharing(h=0, w=3)
    >>> x = np.arange(6, dtype=np.int64).reshape(3, 2)
    >>> corr = host.correction(x, "keys")
    >>> parties = [OutsideShares(p, 3, {0: host.seeds.get(p)}) for p in range(3)]
    >>> total = sum(s.shares("keys", [3], 2, {0: corr} if p == 0 else {}).numpy() for p, s in enumerate(parties))
    >>> bool((total == x).all())
    True
    """

    def __init__(self, h: int, w: int):
        self.h, self.w = h, w
        self.corrector = correction_party(h, w)
        self.seeds = {p: new_seed() for p in range(w) if p != self.corrector}

    def correction(self, x: np.ndarray, block) -> np.ndarray:
        """What the correction party receives for block ``block`` of rows ``x``."""
        out = np.array(x, dtype=np.int64, copy=True)
        for seed in self.seeds.values():
            out -= _pad(seed, block, out.shape)
        return out


class OutsideShares:
    """A computing party's end: its shares of every host's blocks, hosts in order.

    ``seeds[h]``: the seed host h sent this party, or None when this party is h's
    correction party."""

    def __init__(self, rank: int, w: int, seeds: dict[int, bytes | None]):
        self.rank, self.w = rank, w
        self.seeds = seeds

    def corrected_hosts(self) -> list[int]:
        """The hosts whose corrections this party receives."""
        return [h for h in sorted(self.seeds) if correction_party(h, self.w) == self.rank]

    def shares(self, block, sizes: list[int], cols: int, corrections: dict[int, np.ndarray], *,
               column_slice=None) -> torch.Tensor:
        """This party's (rows, cols) int64 shares of block ``block``, hosts concatenated
        (host h has ``sizes[h]`` rows, public).  ``corrections[h]``: host h's correction
        (for the hosts of :meth:`corrected_hosts`), of which ``column_slice`` (if given)
        holds this block's columns."""
        import torch  # the computing party's end (the host's, :class:`HostSharing`, needs no torch)

        parts = []
        for h, n in enumerate(sizes):
            if correction_party(h, self.w) == self.rank:
                c = corrections[h]
                part = c[:, column_slice] if column_slice is not None else c
                parts.append(np.ascontiguousarray(part, dtype=np.int64).reshape(n, cols))
            else:
                parts.append(_pad(self.seeds[h], block, (n, cols)))
        out = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return torch.from_numpy(out)
