r"""Beaver gates: products and ANDs of shared values, a round at a time.

Every AND and product is Beaver's protocol with a triple from the dealer
(:mod:`secure_auc.mpc.primitives.dealer`: the separate dealer process with TTP, rank 0
with TFP; AES-CTR streams, never CrypTen's providers): open :math:`e = x - a` and
:math:`f = y - b` (XOR for binary shares), then
:math:`[xy] = [c] + e[b] + f[a] + ef` (the public term added by one party).
All values a round opens — masked AND inputs, masked product inputs, the
masked bits :math:`z` — go out in one message per party
(:func:`open_masked`, :func:`.opening.open_all`: one all-gather of the parties'
shares, or a reduce-scatter and an all-gather for large openings among 3 or
more parties, instead of CrypTen's two collectives per gate).  Each opened value is masked by
a fresh uniformly random triple or bit that no single computing party knows
(with TFP, rank 0 knows them: it is trusted), so it is independent of the
data.

Triples are fetched in batches (:class:`Randomness`): one dealer request
serves several stages (with TTP each request is a round trip from rank 0 to
the dealer); their sizes depend only on the public :math:`n`, limbs and
number of parties.
"""

from __future__ import annotations

import torch

from ..comm import backend
from .opening import open_all
from .randomness import Randomness

__all__ = ["open_masked", "beaver_round", "paired_products", "and_gate", "not_gate"]


def open_masked(binary: list[torch.Tensor], arithmetic: list[torch.Tensor], bits: int | None = None):
    """Open masked values to every party: XOR-shared ``binary`` and
    additively shared ``arithmetic`` tensors (shares of this party, int64, or int32
    for Z_2^32), in one opening (:func:`.opening.open_all`).  Only
    for values masked with fresh one-time randomness.  Returns the opened tensors
    (two lists, same shapes).  ``bits``: int32 arithmetic values only, opened mod 2^bits."""
    opened = open_all(binary + arithmetic, xor=len(binary), bits=bits)
    nb = len(binary)
    return opened[:nb], opened[nb:]


def beaver_round(rnd: Randomness, ands=(), muls=(), masked_bits=(), bits: int | None = None):
    """One round: Beaver ANDs of the XOR-shared pairs ``ands``, Beaver products of
    the additively shared pairs ``muls`` (each pair of one shape and dtype: int64 for
    Z_2^64, int32 for Z_2^32, with triples of that ring), and opening of
    the already-masked XOR-shared ``masked_bits``.  Returns (ands, muls, opened bits).
    ``bits`` (products of int32 pairs only): the products are needed mod 2^bits only, and
    only the masked values mod 2^bits are opened (the products are then right mod 2^bits)."""
    rank = backend.rank()
    bin_open, bin_triples, ar_open, ar_triples = [], [], [], []
    for x, y in ands:
        a, b, c = (t.view(x.shape) for t in rnd.take("binary", x.numel()))
        bin_open += [x ^ a, y ^ b]
        bin_triples.append((a, b, c))
    for x, y in muls:
        kind = "mul32" if x.dtype == torch.int32 else "mul"
        a, b, c = (t.view(x.shape) for t in rnd.take(kind, x.numel()))
        ar_open += [x - a, y - b]
        ar_triples.append((a, b, c))
    opened_b, opened_a = open_masked(bin_open + list(masked_bits), ar_open, bits)
    and_out = []
    for i, (a, b, c) in enumerate(bin_triples):
        e, f = opened_b[2 * i], opened_b[2 * i + 1]
        z = c ^ (e & b) ^ (f & a)
        and_out.append(z ^ (e & f) if rank == 0 else z)
    mul_out = []
    for i, (a, b, c) in enumerate(ar_triples):
        e, f = opened_a[2 * i], opened_a[2 * i + 1]
        z = c + e * b + f * a
        mul_out.append(z + e * f if rank == 0 else z)
    return and_out, mul_out, opened_b[2 * len(bin_triples) :]


def paired_products(rnd: Randomness, x: torch.Tensor, y1: torch.Tensor, y2: torch.Tensor,
                    bits: int | None = None) -> list[torch.Tensor]:
    r"""[x y1] and [x y2] in one round, with one mask for the shared factor: a "pair"
    triple :math:`(a, b_1, b_2, c_1 = a b_1, c_2 = a b_2)` (``"pair32"`` for int32 shares)
    opens :math:`e = x - a`, :math:`f_i = y_i - b_i` (three values instead of two
    triples' four), and :math:`[x y_i] = [c_i] + e [b_i] + f_i [a] + e f_i`.  Each opened
    value is masked by its own fresh uniform mask.  ``bits``: as :func:`beaver_round`'s."""
    kind = "pair32" if x.dtype == torch.int32 else "pair"
    a, b1, b2, c1, c2 = (t.view(x.shape) for t in rnd.take(kind, x.numel()))
    _, (e, f1, f2) = open_masked([], [x - a, y1 - b1, y2 - b2], bits)
    out = []
    for b, c, f in ((b1, c1, f1), (b2, c2, f2)):
        z = c + e * b + f * a
        out.append(z + e * f if backend.rank() == 0 else z)
    return out


def and_gate(x: torch.Tensor, y: torch.Tensor, rnd: Randomness, muls=()):
    """x AND y (XOR shares); with ``muls``, also those products in the same round."""
    ands, prods, _ = beaver_round(rnd, [(x.contiguous(), y.contiguous())], muls)
    return (ands[0], prods) if muls else ands[0]


def not_gate(x: torch.Tensor, rank: int) -> torch.Tensor:
    """Share of NOT x: one party flips its share."""
    return x ^ -1 if rank == 0 else x
