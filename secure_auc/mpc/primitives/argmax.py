r"""Secure argmax: a tournament of comparisons on additive shares; only the index comes out.

The computing parties hold additive shares (:math:`\mathbb{Z}_{2^{64}}`) of :math:`T`
integers :math:`v_0, \dots, v_{T-1}` whose pairwise differences satisfy
:math:`|v_i - v_j| < 2^{63}`.  Each level of the tournament pairs neighbours
:math:`(v_{2i}, v_{2i+1})` (an odd one out goes up unchanged) and keeps, in shares,

.. math::

    c = [v_{2i} < v_{2i+1}], \qquad v' = v_{2i} + c\,(v_{2i+1} - v_{2i}), \qquad
    j' = j_{2i} + c\,(j_{2i+1} - j_{2i}),

where :math:`j` is the index (public at the start: rank 0 holds it, the others 0).
The comparison is the sign circuit of :mod:`.circuits` on all 64 bits of the
difference (:func:`.circuits.less_packed`), its bit converted to arithmetic shares
(:func:`.b2a.bit_to_arithmetic`), and both products take one Beaver round
(:func:`.beaver.beaver_round`).  The survivor of a level holds a contiguous block
of positions and the left block wins ties, so the result is the *lowest position*
among the maxima; a caller that wants ties broken at random permutes the
candidates first (:mod:`secure_auc.mpc.selection` does, with a permutation drawn
from :mod:`secrets`).

Nothing is opened on the way but Beaver-masked values and the B2A bits masked by
the dealer's random bits: the winner's value stays in shares.  Cost:
:math:`\lceil \log_2 T \rceil` levels of (one comparison, one B2A opening, one
product round), :math:`T - 1` comparisons in all.
"""

from __future__ import annotations

import torch

from ..comm import backend
from .b2a import bit_to_arithmetic
from .beaver import beaver_round
from .circuits import less_packed
from .randomness import dealer_randomness

__all__ = ["ARGMAX_BITS", "secure_argmax", "argmax_levels"]

ARGMAX_BITS = 64  # differences compared on all 64 bits: |v_i - v_j| < 2^63


def argmax_levels(candidates: int) -> int:
    """Levels of the tournament over ``candidates`` values: ceil(log2 T).

    >>> [argmax_levels(t) for t in (1, 2, 3, 100, 1000)]
    [0, 1, 2, 7, 10]
    """
    return max(0, int(candidates - 1).bit_length())


def secure_argmax(values: torch.Tensor, bits: int = ARGMAX_BITS) -> torch.Tensor:
    """This party's additive shares (shape (1,), int64) of the lowest index among the
    maxima of the shared values ``values`` (this party's int64 shares, shape (T,)).

    Every computing party calls it with its shares; all parties make the same calls
    (sizes depend on T only).  ``bits``: the differences satisfy |d| < 2^(bits - 1).
    """
    v = values.reshape(-1).to(torch.int64).clone()
    t = v.numel()
    if t == 0:
        raise ValueError("argmax of no values")
    idx = torch.arange(t, dtype=torch.int64) if backend.rank() == 0 else torch.zeros(t, dtype=torch.int64)
    if t == 1:
        return idx
    with dealer_randomness() as rnd:
        while v.numel() > 1:
            n = v.numel()
            h = n // 2
            a, b = v[0 : 2 * h : 2], v[1 : 2 * h : 2]
            ia, ib = idx[0 : 2 * h : 2], idx[1 : 2 * h : 2]
            packed, _ = less_packed((a - b).reshape(1, -1), bits, rnd)  # [a < b]: b wins only if strictly larger
            c = bit_to_arithmetic(packed, h, rnd)
            _, (dv, di), _ = beaver_round(rnd, muls=[(c, (b - a).contiguous()), (c.clone(), (ib - ia).contiguous())])
            nv, ni = a + dv, ia + di
            if n % 2:
                nv, ni = torch.cat([nv, v[-1:]]), torch.cat([ni, idx[-1:]])
            v, idx = nv, ni
    return idx
