r"""Segmented copy-forward scan of secret shares, work-efficient (Blelloch).

For flags :math:`f_j \in \{0, 1\}` (:math:`f_0 = 1`) and values :math:`v_j`,
the scan returns :math:`\mathrm{out}_j = v_i` for the last :math:`i \le j`
with :math:`f_i = 1`.  Pairs :math:`(f, v)` combine associatively, earlier
one first,

.. math::

    (f_1, v_1) \circ (f_2, v_2) = (f_1 + f_2 - f_1 f_2,\; v_1 + f_2 (v_2 - v_1))

(two products), with :math:`(0, 0)` as a left identity wherever a segment's
:math:`v` matters (a segment with :math:`f = 0` has no start, and its
:math:`v` is never selected).  Blelloch's scan pads to :math:`N = 2^p` rows
with :math:`(0, 0)`, reduces up the tree (:math:`N - 1` combines in
:math:`p` rounds), and passes exclusive prefixes down (:math:`N - 1` combines
in :math:`p` rounds); the inclusive result is
:math:`\mathrm{out}_j = e_j + f_j (v_j - e_j)` for the exclusive prefix
:math:`e_j`.  About :math:`4N + n` products per scanned row instead of
:math:`2 n \log_2 n` for Hillis-Steele, in :math:`2p + 1` rounds.  All
products are Beaver products (:func:`.beaver.beaver_round`); nothing else is
opened.
"""

from __future__ import annotations

import torch

from .beaver import beaver_round
from .randomness import Randomness

__all__ = ["copy_forward", "scan_plan"]


def _mul(rnd: Randomness, pairs):
    _, out, _ = beaver_round(rnd, muls=[(x.contiguous(), y.contiguous()) for x, y in pairs])
    return out


def scan_plan(k: int, n: int) -> list[int]:
    """The sizes of the triple batches :func:`copy_forward` takes, in order (two per
    combine round, then one), so the dealer can prepare each while the previous is used."""
    size = 1 << max(0, (n - 1).bit_length())
    levels = []
    h = 1
    while h < size:
        levels.append(k * (size // (2 * h)))
        h *= 2
    sweep = [c for c in levels for _ in range(2)]
    return sweep + [c for c in reversed(levels) for _ in range(2)] + [k * n]


def copy_forward(f: torch.Tensor, v: torch.Tensor, rnd: Randomness) -> torch.Tensor:
    """Shares (k, n) of the inclusive segmented copy-forward of (k, n) shares ``f``, ``v``
    (k independent rows scanned together), in the ring of their dtype (int64:
    Z_2^64, int32: Z_2^32)."""
    k, n = f.shape
    size = 1 << max(0, (n - 1).bit_length())
    F = torch.zeros((k, size), dtype=f.dtype)
    V = torch.zeros((k, size), dtype=f.dtype)
    F[:, :n], V[:, :n] = f, v
    h = 1
    while h < size:  # up-sweep: node R holds the combination of its subtree
        right = torch.arange(2 * h - 1, size, 2 * h)
        left = right - h
        fl, vl, fr, vr = F[:, left], V[:, left], F[:, right], V[:, right]
        p, q = _mul(rnd, [(fr, fl), (fr, vr - vl)])
        F[:, right], V[:, right] = fl + fr - p, vl + q
        h *= 2
    F[:, size - 1] = 0
    V[:, size - 1] = 0
    h = size // 2
    while h >= 1:  # down-sweep: node holds the exclusive prefix before its subtree
        right = torch.arange(2 * h - 1, size, 2 * h)
        left = right - h
        fl, vl, fp, vp = F[:, left], V[:, left], F[:, right], V[:, right]
        p, q = _mul(rnd, [(fp, fl), (fl, vl - vp)])
        F[:, left], V[:, left] = fp, vp
        F[:, right], V[:, right] = fp + fl - p, vp + q
        h //= 2
    del F
    e = V[:, :n]
    (q,) = _mul(rnd, [(f, v - e)])
    return e + q
