r"""Batcher's bitonic sorting network over secret shares, with a narrow comparison.

The network
-----------
For :math:`n = 2^p` the network has :math:`p(p+1)/2` stages.  Stage
:math:`(k, j)`, for :math:`k = 2, 4, \dots, n` and :math:`j = k/2, \dots, 1`,
pairs every index :math:`i` with :math:`i \oplus j`; the pair
:math:`(i, i \oplus j)`, :math:`i < i \oplus j`, is sorted ascending if
:math:`i \wedge k = 0` and descending otherwise.  Writing each pair as
:math:`(a, b)` with the wanted order :math:`[X]_a \le [X]_b`, one stage is,
for all :math:`n/2` pairs at once,

.. math::

    [c] = [X_b < X_a], \qquad [\delta] = [c]\,([X_b] - [X_a]), \qquad
    [X_a] \leftarrow [X_a] + [\delta], \quad [X_b] \leftarrow [X_b] - [\delta]

one batched secure comparison and one batched product, so the Python loop
runs over the stages only.  Which pairs are compared depends only on
:math:`n`, so the sequence of operations, the sizes of all messages and the
values opened (all of them masked by fresh one-time randomness, see below)
are independent of the keys: the network opens nothing.

Each stage applies a permutation :math:`\pi_s` that swaps the pairs with
:math:`c = 1`; :math:`\pi_s` is an involution, so the keys' permutation
:math:`\pi = \pi_S \cdots \pi_1` is undone by applying
:math:`\pi_1 \cdots \pi_S`: the secret bits :math:`[c]` of every stage are
kept (additively shared), and :meth:`BitonicSort.unsort` replays the stages
in reverse order on another secret vector (one product per stage, no
comparison).

The comparison is :func:`secure_auc.mpc.primitives.circuits.less_packed`, the
product and the B2A step are Beaver gates (:mod:`secure_auc.mpc.primitives`),
all with the dealer's randomness.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..comm import backend
from ..primitives.beaver import beaver_round
from ..primitives.b2a import open_bits
from ..primitives.circuits import COMPARE_BITS, less_packed
from ..primitives.randomness import Randomness

__all__ = ["bitonic_stages", "n_stages", "BitonicSort"]


def n_stages(n: int) -> int:
    """Number of stages of the bitonic network over n = 2^p rows: p (p + 1) / 2."""
    p = max(0, n.bit_length() - 1)
    return p * (p + 1) // 2


def bitonic_stages(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (a, b) index pairs of each stage for n = 2^p (public, data-independent):
    each stage wants key[a] <= key[b] for all its n/2 pairs."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"bitonic network size must be a power of two, got {n}")
    i = torch.arange(n)
    stages = []
    k = 2
    while k <= n:
        j = k // 2
        while j >= 1:
            lo = i[(i ^ j) > i]
            hi = lo ^ j
            asc = (lo & k) == 0
            stages.append((torch.where(asc, lo, hi), torch.where(asc, hi, lo)))
            j //= 2
        k *= 2
    return stages


def _reserve(rnd: Randomness, per_stage: dict[str, int], stages_left: int, budget: int) -> None:
    """Before a stage: reserve randomness for as many of the remaining stages as
    ``budget`` words (per kind) allow, so one provider request serves them all."""
    if per_stage:
        rnd.reserve({kind: words * max(1, min(stages_left, budget // max(1, words)))
                     for kind, words in per_stage.items()})


def _used_since(rnd: Randomness, before: dict[str, int]) -> dict[str, int]:
    """Words of each kind of randomness taken since ``before`` (a copy of ``rnd.used``): one
    stage's needs.  (All of ``rnd.used`` would count every earlier use of ``rnd`` too: the
    unsort after the sort and the mid-ranks would then ask the dealer for the whole run's
    worth of triples in one batch, 10 GB of them at 2^20 rows.)"""
    return {kind: words - before.get(kind, 0) for kind, words in rnd.used.items() if words > before.get(kind, 0)}


@dataclass
class BitonicSort:
    """Oblivious sort of the rows of integer-encoded (n, limbs) shared keys, n = 2^p,
    by its limbs (lexicographic); keeps every stage's secret swap bits for :meth:`unsort`.

    ``bits``: each limb difference must satisfy |d| < 2^(bits - 1).
    ``batch_words``: most words of each kind of randomness fetched per provider
    request (the stages' needs are learnt from the first stage).
    """

    bits: int = COMPARE_BITS
    batch_words: int = 1 << 21
    swaps: list = field(default_factory=list, repr=False)

    def sort(self, keys: torch.Tensor, rnd: Randomness, progress=None) -> torch.Tensor:
        """This party's shares of the sorted keys, from its (n, limbs) or (n,) int64 shares;
        ``rnd``: the dealer's randomness (:func:`dealer_randomness`);
        ``progress(stage, n_stages)`` after each stage."""
        rank = backend.rank()
        x = keys.clone()
        if x.dim() == 1:
            x = x.unsqueeze(1)
        pairs, limbs = x.shape[0] // 2, x.shape[1]
        stages = bitonic_stages(x.shape[0])
        self.swaps = []
        per_stage, before = {}, dict(rnd.used)
        for s, (a, b) in enumerate(stages, 1):
            _reserve(rnd, per_stage, len(stages) - s + 1, self.batch_words)
            xa, xb = x[a], x[b]
            d = xb - xa
            # r: a random bit shared both ways; r * d rides along with the comparison's first round
            r_arith, r_binary = rnd.take("b2a", pairs)
            r_cols = r_arith.unsqueeze(1).expand(-1, limbs).contiguous()
            packed, (rd,) = less_packed(d.t().contiguous(), self.bits, rnd, [(r_cols, d)])  # [key_b < key_a]
            z = open_bits(packed, r_binary, pairs, rnd)  # z = c xor r, public and uniformly random
            # c = z + (1 - 2z) r  and  c d = z d + (1 - 2z) r d
            c = (1 - 2 * z) * r_arith
            if rank == 0:
                c = c + z
            delta = z.unsqueeze(1) * d + (1 - 2 * z).unsqueeze(1) * rd
            x[a] = xa + delta
            x[b] = xb - delta
            self.swaps.append((a, b, c))
            if s == 1:
                per_stage = _used_since(rnd, before)
            if progress is not None:
                progress(s, len(stages))
        return x

    def unsort(self, values: torch.Tensor, rnd: Randomness, progress=None) -> torch.Tensor:
        """Apply the inverse of the sorting permutation to this party's shares of a secret
        (n,) or (n, cols) vector: rows in sorted order -> rows in input order.  One
        product per stage."""
        y = values.clone()
        total = len(self.swaps)
        per_stage, before = {}, dict(rnd.used)
        for s, (a, b, c) in enumerate(reversed(self.swaps), 1):
            _reserve(rnd, per_stage, total - s + 1, self.batch_words)
            ya, yb = y[a], y[b]
            cc = c if y.dim() == 1 else c.unsqueeze(1).expand(-1, y.shape[1]).contiguous()
            _, (delta,), _ = beaver_round(rnd, muls=[(cc, yb - ya)])
            y[a] = ya + delta
            y[b] = yb - delta
            if s == 1:
                per_stage = _used_since(rnd, before)
            if progress is not None:
                progress(s, total)
        return y
