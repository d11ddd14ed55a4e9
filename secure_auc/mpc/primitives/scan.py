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

Blelloch's scan pads to :math:`2^p` rows with :math:`(0, 0)`, reduces up
the tree and passes exclusive prefixes down: :math:`2^p - 1` combines each way,
in :math:`p` rounds each.  The levels near the root hold few nodes but cost a
round each, so the up-sweep stops at blocks of :math:`H` rows, the smallest
power of two that cuts the rows into :math:`c \le` ``top`` blocks, and the
rows are padded only to :math:`N = c H` (fewer than :math:`H` rows of padding
instead of up to :math:`n`; the same rounds as a tree of :math:`2^p`
rows): the :math:`c` block totals get their
exclusive prefixes by Hillis-Steele (:math:`\log_2 c` rounds of at most
:math:`c` combines: :math:`x_j \leftarrow x_{j-s} \circ x_j` for
:math:`s = 1, 2, 4, \dots`), which the down-sweep then passes into the
blocks.

Four savings on the plain tree, none of which opens anything else:

* *One mask for the shared factor.*  The two products of a combine,
  :math:`f_2 f_1` and :math:`f_2 (v_2 - v_1)`, share :math:`f_2`: one "pair"
  triple masks it once (:func:`.beaver.paired_products`), three opened values
  instead of four.
* *Values only on the way down.*  A right child's exclusive prefix is
  :math:`e \circ t_L` (its parent's, then the left sibling's total), whose
  value :math:`v_e + f_{t_L} (v_{t_L} - v_e)` needs the total's flag but not
  the prefix's: the down-sweep and the last Hillis-Steele level take one
  product per combine, not two.
* *Groups of* :math:`G = 4` *at the bottom.*  The down-sweep stops at groups of
  :math:`G = \min(4, H)` rows; each row's inclusive result is then
  :math:`\mathrm{out}_j = e_g \circ P_j`, :math:`e_g` its group's exclusive
  prefix and :math:`P_j` the row's inclusive prefix within the group
  (:math:`x_0`, :math:`x_0 \circ x_1`, :math:`x_0 \circ x_1 \circ x_2`,
  :math:`x_0 \circ \dots \circ x_3`): the up-sweep's first two levels already
  give all but the third, which rides in the second level's round
  (:math:`(x_0 \circ x_1) \circ x_2`, :math:`N / 4` combines more), and
  :math:`\mathrm{out}_j = v_{e_g} + f_{P_j} (v_{P_j} - v_{e_g})` is one
  product per row, as the plain tree's last step
  :math:`e_j + f_j (v_j - e_j)`.  The down-sweep's two lowest levels
  (:math:`3 N / 4` combines) are not needed.

Rounds: :math:`2 \log_2 H - \log_2 G + \log_2 c + 1` instead of :math:`2p + 1`
(19 instead of 33 for :math:`N = 2^{16}` and :math:`c = 2^{12}`); products:
about :math:`2.75 N + 2 c \log_2 c + n` per scanned row (the plain tree:
:math:`4N + n`).  All products are Beaver products
(:func:`.beaver.beaver_round`, :func:`.beaver.paired_products`); nothing else is opened.

Examples
--------
One party (its shares are the values): copy each segment's first value forward.

>>> import torch
>>> from secure_auc.mpc.primitives.scan import copy_forward, scan_rounds
>>> f = torch.tensor([[1, 0, 0, 1, 0]])
>>> copy_forward(f, f * torch.arange(5), rnd=None)
tensor([[0, 0, 0, 3, 3]])
>>> scan_rounds(1 << 16), scan_rounds(1 << 16, top=1)
(19, 31)
"""

from __future__ import annotations

import torch

from .beaver import beaver_round, paired_products
from .randomness import Randomness

__all__ = ["copy_forward", "scan_plan", "scan_products", "scan_rounds", "TOP"]

TOP = 1 << 12  # at most this many blocks scanned by Hillis-Steele at the top of the tree
GROUP = 4  # the down-sweep stops at groups of this many rows (or the block size, if smaller)


def _blocks(n: int, top: int) -> tuple[int, int]:
    """(N, H): the block size H where the up-sweep stops, the smallest power of two that
    cuts the n rows into at most ``top`` blocks, and the padded size N, n rounded up to
    whole blocks (fewer than H rows of padding)."""
    block = 1
    while -(-n // block) > max(1, top):
        block *= 2
    return -(-max(n, 1) // block) * block, block


def _schedule(n: int, top: int):
    """The scan's rounds, in order: (stage, nodes, products) per round of combines (each
    combine of ``nodes`` pairs per scanned row takes ``products`` batches of that many
    products), then ("final", n, 1)."""
    size, block = _blocks(n, top)
    group = min(GROUP, block)
    out, h = [], 1
    while h < block:  # up-sweep; at h = 2 (groups of 4) also the prefix of a group's first three rows
        out.append(("up", size // (2 * h) * (2 if h == 2 and group == 4 else 1), 2))
        h *= 2
    c, s = size // block, 1
    while s < c:  # Hillis-Steele; its last level needs no flag
        out.append(("top", c - s, 2 if 2 * s < c else 1))
        s *= 2
    h = block // 2
    while h >= group:  # down-sweep: only the values of the exclusive prefixes
        out.append(("down", size // (2 * h), 1))
        h //= 2
    return out + [("final", n, 1)]


def scan_plan(k: int, n: int, top: int = TOP) -> tuple[list[int], list[int]]:
    """The sizes of the batches of randomness :func:`copy_forward` takes, in order, so the
    dealer can prepare each while the previous is used: pairs of products with a shared
    factor (``"pair"`` kinds, one batch per round of two products) and single products
    (``"mul"`` kinds, one batch per round of one)."""
    rounds = _schedule(n, top)
    return ([k * nodes for _, nodes, products in rounds if products == 2],
            [k * nodes for _, nodes, products in rounds if products == 1])


def scan_products(k: int, n: int, top: int = TOP) -> int:
    """The products :func:`copy_forward` computes for ``k`` rows of ``n``."""
    pairs, singles = scan_plan(k, n, top)
    return 2 * sum(pairs) + sum(singles)


def scan_rounds(n: int, top: int = TOP) -> int:
    """Rounds of products :func:`copy_forward` takes for ``n`` rows."""
    return len(_schedule(n, top))


def _mul(rnd: Randomness | None, x: torch.Tensor, y: torch.Tensor, bits: int | None = None) -> torch.Tensor:
    if rnd is None:  # one party, no randomness: its shares are the values
        return x * y
    _, (out,), _ = beaver_round(rnd, muls=[(x.contiguous(), y.contiguous())], bits=bits)
    return out


def _mul_pair(rnd: Randomness | None, x: torch.Tensor, y1: torch.Tensor, y2: torch.Tensor,
              bits: int | None = None) -> list[torch.Tensor]:
    """x y1 and x y2 in one round, one mask for x (:func:`.beaver.paired_products`)."""
    if rnd is None:
        return [x * y1, x * y2]
    return paired_products(rnd, x.contiguous(), y1.contiguous(), y2.contiguous(), bits)


def copy_forward(f: torch.Tensor, v: torch.Tensor, rnd: Randomness | None, top: int = TOP,
                 bits: int | None = None) -> torch.Tensor:
    """Shares (k, n) of the inclusive segmented copy-forward of (k, n) shares ``f``, ``v``
    (k independent rows scanned together), in the ring of their dtype (int64:
    Z_2^64, int32: Z_2^32).  ``rnd`` None: a single party, products computed in the clear.
    ``top``: at most this many blocks go to the Hillis-Steele step (1: Blelloch's
    scan alone).  ``bits`` (int32 only): the result is needed mod 2^bits only; every
    product opens its masked values mod 2^bits (the low ceil(bits / 8) bytes of each
    share), and the result is right mod 2^bits."""
    k, n = f.shape
    size, block = _blocks(n, top)
    group = min(GROUP, block)
    F = torch.zeros((k, size), dtype=f.dtype)
    V = torch.zeros((k, size), dtype=f.dtype)
    F[:, :n], V[:, :n] = f, v
    PF, PV = F.clone(), V.clone()  # each row's inclusive prefix within its group
    h = 1
    while h < block:  # up-sweep: node R holds the combination of its subtree
        # the nodes as strided views (no index tensors, no gathers): right 2h-1, 4h-1, ...; left h before
        right, left = slice(2 * h - 1, None, 2 * h), slice(h - 1, None, 2 * h)
        fl, vl, fr, vr = F[:, left], V[:, left], F[:, right], V[:, right]
        third = h == 2 and group == 4  # and x_0 o x_1 o x_2 of each group: (left = x_0 o x_1) o x_2
        if third:
            fr, vr = torch.cat([fr, F[:, 2::4]], dim=1), torch.cat([vr, V[:, 2::4]], dim=1)
            fl, vl = torch.cat([fl, fl], dim=1), torch.cat([vl, vl], dim=1)
        p, q = _mul_pair(rnd, fr, fl, vr - vl, bits)
        fs, vs = fl + fr - p, vl + q
        m = size // (2 * h)
        if h < group:
            PF[:, right], PV[:, right] = fs[:, :m], vs[:, :m]
            if third:
                PF[:, 2::4], PV[:, 2::4] = fs[:, m:], vs[:, m:]
        F[:, right], V[:, right] = fs[:, :m], vs[:, :m]
        h *= 2
    roots = slice(block - 1, None, block)  # each block's total, then its exclusive prefix
    tf, tv = F[:, roots], V[:, roots]
    s, c = 1, size // block
    while s < c:  # Hillis-Steele: x_j <- x_{j-s} o x_j, inclusive
        fl, vl, fr, vr = tf[:, :-s], tv[:, :-s], tf[:, s:], tv[:, s:]
        if 2 * s < c:
            p, q = _mul_pair(rnd, fr, fl, vr - vl, bits)
            tf = torch.cat([tf[:, :s], fl + fr - p], dim=1)
        else:  # the last level: the flags are not used any more
            q = _mul(rnd, fr, vr - vl, bits)
        tv = torch.cat([tv[:, :s], vl + q], dim=1)
        s *= 2
    V[:, 2 * block - 1 :: block] = tv[:, :-1]  # exclusive: the blocks before
    V[:, block - 1] = 0
    h = block // 2
    while h >= group:  # down-sweep: node holds the value of the exclusive prefix before its subtree
        right, left = slice(2 * h - 1, None, 2 * h), slice(h - 1, None, 2 * h)
        fl, vl, vp = F[:, left], V[:, left], V[:, right]  # fl, vl: the left subtree's total (views)
        q = _mul(rnd, fl, vl - vp, bits)
        V[:, left] = vp  # left and right are disjoint: vp, a view of the right nodes, is unchanged
        V[:, right] = vp + q
        h //= 2
    e = V[:, group - 1 :: group].repeat_interleave(group, dim=1)[:, :n]  # each group's exclusive prefix
    del F, V
    q = _mul(rnd, PF[:, :n], PV[:, :n] - e, bits)
    return e + q
