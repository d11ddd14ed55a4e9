r"""Segmented copy-forward scan of secret shares: Blelloch's tree with a
Hillis-Steele top.

For flags :math:`f_j \in \{0, 1\}` (:math:`f_0 = 1`) and values :math:`v_j`,
the scan returns :math:`\mathrm{out}_j = v_i` for the last :math:`i \le j`
with :math:`f_i = 1`.  Pairs :math:`(f, v)` combine associatively, earlier
one first,

.. math::

    (f_1, v_1) \circ (f_2, v_2) = (f_1 + f_2 - f_1 f_2,\; v_1 + f_2 (v_2 - v_1))

(two products), with :math:`(0, 0)` as a left identity wherever a segment's
:math:`v` matters (a segment with :math:`f = 0` has no start, and its
:math:`v` is never selected).

Blelloch's scan pads to :math:`N = 2^p` rows with :math:`(0, 0)`, reduces up
the tree and passes exclusive prefixes down: :math:`N - 1` combines each way,
in :math:`p` rounds each.  The levels near the root hold few nodes but cost a
round each, so the up-sweep stops at blocks of :math:`H = N / c` rows
(:math:`c \le` ``top`` blocks): the :math:`c` block totals get their
exclusive prefixes by Hillis-Steele (:math:`\log_2 c` rounds of at most
:math:`c` combines: :math:`x_j \leftarrow x_{j-s} \circ x_j` for
:math:`s = 1, 2, 4, \dots`), which the down-sweep then passes into the
blocks.  The inclusive result is :math:`\mathrm{out}_j = e_j + f_j (v_j -
e_j)` for the exclusive prefix :math:`e_j`.  Rounds: :math:`2 \log_2 H +
\log_2 c + 1 = p + \log_2 H + 1` instead of :math:`2p + 1` (21 instead of 33
for :math:`N = 2^{16}` and :math:`c = 2^{12}`); products: about
:math:`4N + 2 c \log_2 c + n` per scanned row.  All products are Beaver
products (:func:`.beaver.beaver_round`); nothing else is opened.

Examples
--------
One party (its shares are the values): copy each segment's first value forward.

>>> import torch
>>> from secure_auc.mpc.primitives.scan import copy_forward, scan_rounds
>>> f = torch.tensor([[1, 0, 0, 1, 0]])
>>> copy_forward(f, f * torch.arange(5), rnd=None)
tensor([[0, 0, 0, 3, 3]])
>>> scan_rounds(1 << 16), scan_rounds(1 << 16, top=1)
(21, 33)
"""

from __future__ import annotations

import torch

from .beaver import beaver_round
from .randomness import Randomness

__all__ = ["copy_forward", "scan_plan", "scan_rounds", "TOP"]

TOP = 1 << 12  # at most this many blocks scanned by Hillis-Steele at the top of the tree


def _blocks(n: int, top: int) -> tuple[int, int]:
    """(N, H): the padded size and the block size where the up-sweep stops."""
    size = 1 << max(0, (n - 1).bit_length())
    block = 1
    while size // block > max(1, top):
        block *= 2
    return size, block


def scan_plan(k: int, n: int, top: int = TOP) -> list[int]:
    """The sizes of the triple batches :func:`copy_forward` takes, in order (two per
    combine round, then one), so the dealer can prepare each while the previous is used."""
    size, block = _blocks(n, top)
    levels, h = [], 1
    while h < block:
        levels.append(k * (size // (2 * h)))
        h *= 2
    c = size // block
    tops, s = [], 1
    while s < c:
        tops.append(k * (c - s))
        s *= 2
    return _twice(levels) + _twice(tops) + _twice(reversed(levels)) + [k * n]


def _twice(sizes) -> list[int]:
    """Each round's batch size twice (a round's two products take one batch each)."""
    return [x for x in sizes for _ in range(2)]


def scan_rounds(n: int, top: int = TOP) -> int:
    """Rounds of products :func:`copy_forward` takes for ``n`` rows."""
    return (len(scan_plan(1, n, top)) - 1) // 2 + 1


def _mul(rnd: Randomness | None, pairs):
    if rnd is None:  # one party, no randomness: its shares are the values
        return [x * y for x, y in pairs]
    _, out, _ = beaver_round(rnd, muls=[(x.contiguous(), y.contiguous()) for x, y in pairs])
    return out


def copy_forward(f: torch.Tensor, v: torch.Tensor, rnd: Randomness | None, top: int = TOP) -> torch.Tensor:
    """Shares (k, n) of the inclusive segmented copy-forward of (k, n) shares ``f``, ``v``
    (k independent rows scanned together), in the ring of their dtype (int64:
    Z_2^64, int32: Z_2^32).  ``rnd`` None: a single party, products computed in the clear.
    ``top``: at most this many blocks go to the Hillis-Steele step (1: Blelloch's
    scan alone)."""
    k, n = f.shape
    size, block = _blocks(n, top)
    F = torch.zeros((k, size), dtype=f.dtype)
    V = torch.zeros((k, size), dtype=f.dtype)
    F[:, :n], V[:, :n] = f, v
    h = 1
    while h < block:  # up-sweep: node R holds the combination of its subtree
        right = torch.arange(2 * h - 1, size, 2 * h)
        left = right - h
        fl, vl, fr, vr = F[:, left], V[:, left], F[:, right], V[:, right]
        p, q = _mul(rnd, [(fr, fl), (fr, vr - vl)])
        F[:, right], V[:, right] = fl + fr - p, vl + q
        h *= 2
    roots = torch.arange(block - 1, size, block)  # each block's total, then its exclusive prefix
    tf, tv = F[:, roots], V[:, roots]
    s = 1
    while s < roots.numel():  # Hillis-Steele: x_j <- x_{j-s} o x_j, inclusive
        fl, vl, fr, vr = tf[:, :-s], tv[:, :-s], tf[:, s:], tv[:, s:]
        p, q = _mul(rnd, [(fr, fl), (fr, vr - vl)])
        tf = torch.cat([tf[:, :s], fl + fr - p], dim=1)
        tv = torch.cat([tv[:, :s], vl + q], dim=1)
        s *= 2
    F[:, roots[1:]], V[:, roots[1:]] = tf[:, :-1], tv[:, :-1]  # exclusive: the blocks before
    F[:, roots[0]], V[:, roots[0]] = 0, 0
    h = block // 2
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
