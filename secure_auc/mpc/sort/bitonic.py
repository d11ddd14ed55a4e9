"""Batcher's bitonic sorting network over secret shares.

For n = 2^p the network has p (p + 1) / 2 stages.  Stage (k, j), for
k = 2, 4, ..., n and j = k/2, ..., 1, pairs every index i with i XOR j; the
pair (i, i ^ j), i < i ^ j, is sorted ascending if i AND k == 0, descending
otherwise.  Writing each pair as (a, b) with the wanted order key[a] <= key[b],
one stage is, for all n/2 pairs at once,

    c   = [key_a > key_b]            (one batched secure comparison, c in {0, 1})
    d   = c * (X_b - X_a)            (one batched multiplication, every column)
    X_a <- X_a + d,   X_b <- X_b - d

so the Python loop runs over stages only and every stage's work is one
vectorised comparison and one multiplication.  Which pairs are compared
depends only on n: the sequence of operations, and the (masked) values opened
inside CrypTen, are independent of the keys.  Nothing is opened in plaintext.

Keys with several limbs (hi, lo) compare lexicographically:
[a > b] = [hi_a > hi_b] + [hi_a == hi_b] [lo_a > lo_b].

The secret swap bits c of every stage are kept, so the permutation can be
undone on another secret vector (the ranks): replaying the stages in reverse
order with the same bits applies the inverse permutation, with
multiplications only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["bitonic_stages", "BitonicSort", "secure_eq"]


def secure_eq(x, y):
    """[x == y] elementwise, as 1 - [x < y] - [y < x] in one batched comparison.

    (CrypTen's own ``==`` among 2 parties returns a wrongly scaled result for
    integer-encoded tensors, so we do not use it.)
    """
    from .._crypten import crypten

    d = x - y
    return 1 - (crypten.stack([d, -d]) < 0).sum(0)


def bitonic_stages(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (a, b) index pairs of each stage for n = 2^p (public, data-independent)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"bitonic network size must be a power of two, got {n}")
    i = np.arange(n)
    stages = []
    k = 2
    while k <= n:
        j = k // 2
        while j >= 1:
            partner = i ^ j
            lo = i[partner > i]
            hi = lo ^ j
            asc = (lo & k) == 0
            a = np.where(asc, lo, hi)
            b = np.where(asc, hi, lo)
            stages.append((torch.from_numpy(a), torch.from_numpy(b)))
            j //= 2
        k *= 2
    return stages


def _greater(xa, xb, limbs: int):
    """[key_a > key_b] for keys in the first ``limbs`` columns (lexicographic)."""
    if limbs == 1:
        return xa[:, 0] > xb[:, 0]
    gt = xa[:, :limbs] > xb[:, :limbs]
    eq_hi = secure_eq(xa[:, 0], xb[:, 0])
    return gt[:, 0] + eq_hi * gt[:, 1]


@dataclass
class BitonicSort:
    """Sort the rows of a secret-shared (n, cols) tensor by its first ``limbs`` columns."""

    limbs: int = 1
    swaps: list = field(default_factory=list)

    def sort(self, x, progress=None):
        n = x.size(0)
        stages = bitonic_stages(n)
        self.swaps = []
        for s, (a, b) in enumerate(stages, 1):
            xa, xb = x[a], x[b]
            c = _greater(xa, xb, self.limbs)
            d = c.unsqueeze(1) * (xb - xa)
            x[a] = xa + d
            x[b] = xb - d
            self.swaps.append((a, b, c))
            if progress is not None:
                progress(s, len(stages))
        return x

    def unsort(self, y, progress=None):
        """Apply the inverse of the sorting permutation to a secret vector ``y`` (n,)."""
        total = len(self.swaps)
        for s, (a, b, c) in enumerate(reversed(self.swaps), 1):
            ya, yb = y[a], y[b]
            d = c * (yb - ya)
            y[a] = ya + d
            y[b] = yb - d
            if progress is not None:
                progress(s, total)
        return y
