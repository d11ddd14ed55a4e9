r"""Comparison circuits on the few bits they need.

Keys are integer limbs in a 32-bit range (:mod:`secure_auc.mpc.encoding`), so
the difference :math:`d` of two limbs satisfies :math:`|d| < 2^{\ell-1}` with
:math:`\ell = 33`, and :math:`[d < 0]` is bit :math:`\ell - 1` of
:math:`d \bmod 2^\ell`.  CrypTen's own ``<`` converts the whole 64-bit
additive sharing to a binary one with a 64-bit adder per pair of parties (two
sequential adders for three parties) and keeps one bit of the result.  Here,
with the arithmetic shares :math:`d = \sum_{r=0}^{w-1} s_r \bmod 2^{64}` of
:math:`w` parties, only the low :math:`\ell` bits of each :math:`s_r` matter,
since bit :math:`\ell-1` of a sum depends only on the addends' bits
:math:`0..\ell-1`:

1. *Bit slicing* (local).  Each party writes the low :math:`\ell` bits of its
   share as :math:`\ell` bit planes; plane :math:`i` packs bit :math:`i` of 64
   elements into one word.  Party :math:`r`'s planes, with zeros at the other
   parties, are an XOR sharing of :math:`s_r` (every AND below masks its
   inputs with a fresh random triple, so no re-randomisation is needed).  All
   binary work is on :math:`\lceil n/64 \rceil` words per plane.
2. *Carry-save reduction* (only for :math:`w > 2`).  Three addends
   :math:`a, b, c` become two with the same sum mod :math:`2^\ell`:
   :math:`a \oplus b \oplus c` and :math:`2\,\mathrm{maj}(a, b, c)`, where
   :math:`\mathrm{maj}(a,b,c) = ((a \oplus c) \wedge (b \oplus c)) \oplus c`:
   one AND round per level, :math:`\lceil \log_{3/2}(w/2) \rceil` levels
   (1 for three parties, 2 for four).
3. *Carry into the top bit*.  For the final addends :math:`A, B` and
   :math:`m = \ell - 1`: :math:`g_i = A_i \wedge B_i`,
   :math:`p_i = A_i \oplus B_i` for :math:`i < m`, then a tree over adjacent
   groups (lo, hi) of bits,

   .. math::

       G = G_{hi} \oplus (P_{hi} \wedge G_{lo}), \qquad P = P_{hi} \wedge P_{lo}

   (XOR is OR here: a group cannot both generate and propagate), in
   :math:`\lceil \log_2 m \rceil` AND rounds; the carry into bit :math:`m`
   is the :math:`G` of all :math:`m` bits, and
   :math:`[d < 0] = A_m \oplus B_m \oplus G`.
4. *Lexicographic keys* (two limbs): with :math:`s_i = [d_i < 0]` and
   :math:`t_i = [-d_i < 0]` (mutually exclusive),
   :math:`[x < y] = s_1 \oplus (\lnot(s_1 \oplus t_1) \wedge s_2)`: one more
   AND round on a single plane.
5. *Bit to arithmetic, fused with the swap.*  With a random bit :math:`r`
   shared both ways (:math:`[r]^A`, :math:`[r]^B`, from the provider), open
   :math:`z = c \oplus r` (packed, 1 bit per pair); then
   :math:`c = z + (1 - 2z)\,r` and
   :math:`c\,D = z\,D + (1 - 2z)\,(r D)`, where the product :math:`r D` of the
   pair difference :math:`D = X_b - X_a` is computed in the comparison's first
   round (it does not depend on :math:`c`).

Rounds per stage: 7 for two parties, 8 for three, 9 for four (plus one for
two-limb keys); CrypTen's ``<`` followed by a product takes 9, 16 and 16.  The
AND gates carry about 93 bits per compared pair (CrypTen's: 13 x 64 bits for
two parties, 26 x 64 for three).

*Equality* (:func:`eq_masked`) needs no adder: a limb difference is 0 exactly
when it is 0 modulo :math:`2^{32}`, which the parties test by opening it
masked by the dealer's random :math:`r` (shared additively and bit by bit) and
ANDing the agreements of its 32 bits with :math:`r`'s: 31 ANDs per one-limb
pair, in 5 rounds after the opening, whatever the number of parties.
"""

from __future__ import annotations

import torch

from ..comm import backend
from .b2a import bit_to_arithmetic
from .beaver import and_gate, beaver_round, not_gate
from .bits import bitslice
from .opening import open_all
from .randomness import Randomness, dealer_randomness
from .widths import COMPARE_BITS, EQ_BITS

__all__ = ["COMPARE_BITS", "EQ_BITS", "eq_masked", "eq_masked_and_words", "carry_save", "top_bit_of_sum", "packed_signs", "less_packed", "sign_bits",
           "secure_less", "secure_eq"]


def carry_save(ops: list[torch.Tensor], rnd: Randomness, muls: list):
    """Reduce w addends (each (bits, ...) planes) to two with the same sum mod 2^bits.
    ``muls`` (products to compute on the way) ride along in the first round; returns
    (the two addends, their results or None)."""
    prods = None
    while len(ops) > 2:
        groups = len(ops) // 3
        a = torch.stack(ops[0 : 3 * groups : 3])
        b = torch.stack(ops[1 : 3 * groups : 3])
        c = torch.stack(ops[2 : 3 * groups : 3])
        s = a ^ b ^ c
        # maj(a, b, c) = ((a ^ c) & (b ^ c)) ^ c; the top bit's carry leaves the ring
        ands, got, _ = beaver_round(rnd, [((a ^ c)[:, :-1].contiguous(), (b ^ c)[:, :-1].contiguous())],
                              muls if prods is None else ())
        if prods is None:
            prods = got
        carry = torch.zeros_like(s)
        carry[:, 1:] = ands[0] ^ c[:, :-1]
        ops = [t for g in range(groups) for t in (s[g], carry[g])] + ops[3 * groups :]
    return ops, prods


def top_bit_of_sum(a: torch.Tensor, b: torch.Tensor, rnd: Randomness, muls=()):
    """Shares of bit m of A + B from planes (m + 1, ...) of XOR-shared A, B, and the
    products ``muls`` computed in the first round."""
    m = a.shape[0] - 1
    ands, prods, _ = beaver_round(rnd, [(a[:m].contiguous(), b[:m].contiguous())], muls)
    g = ands[0]
    p = a[:m] ^ b[:m]
    while g.shape[0] > 1:
        k = g.shape[0]
        h = k // 2
        g_lo, g_hi = g[0 : 2 * h : 2], g[1 : 2 * h : 2]
        p_lo, p_hi = p[0 : 2 * h : 2], p[1 : 2 * h : 2]
        # the lowest group's P is never used (nothing is below it): h + (h - 1) ANDs
        prod = and_gate(torch.cat([p_hi, p_hi[1:]]), torch.cat([g_lo, p_lo[1:]]), rnd)
        g_new = g_hi ^ prod[:h]
        p_new = torch.cat([torch.zeros_like(p_hi[:1]), prod[h:]])
        if k % 2:
            g_new = torch.cat([g_new, g[k - 1 :]])
            p_new = torch.cat([p_new, p[k - 1 :]])
        g, p = g_new, p_new
    return a[m] ^ b[m] ^ g[0], prods


def packed_signs(shares: torch.Tensor, bits: int, rnd: Randomness, muls=()):
    """XOR shares of [d < 0] for the additively shared rows d of ``shares`` (k, n),
    packed (k, W), assuming |d| < 2^(bits - 1); plus the products ``muls``,
    computed in the first round."""
    world, rank = backend.world_size(), backend.rank()
    mine = bitslice(shares, bits)
    zeros = torch.zeros_like(mine)
    ops = [mine if r == rank else zeros for r in range(world)]
    if world == 1:
        ops.append(zeros)
    (a, b), prods = carry_save(ops, rnd, list(muls))
    signs, first = top_bit_of_sum(a, b, rnd, muls if prods is None else ())
    return signs, (first if prods is None else prods)


def less_packed(d: torch.Tensor, bits: int, rnd: Randomness, muls=()):
    """Packed XOR shares (W,) of [d < 0] lexicographically, for limb differences d
    (limbs, n); plus the products ``muls`` computed in the first round."""
    rank = backend.rank()
    limbs = d.shape[0]
    if limbs == 1:
        s, prods = packed_signs(d, bits, rnd, muls)
        return s[0], prods
    s, prods = packed_signs(torch.cat([d, -d[:-1]]), bits, rnd, muls)  # s_i = [d_i < 0], t_i = [-d_i < 0]
    lt = s[limbs - 1]
    for i in range(limbs - 2, -1, -1):  # lt = s_i xor (eq_i and lt_rest), eq_i = not(s_i xor t_i)
        eq_i = not_gate(s[i] ^ s[limbs + i], rank)
        lt = s[i] ^ and_gate(eq_i, lt, rnd)
    return lt, prods


def eq_masked_and_words(limbs: int, n: int, bits: int = EQ_BITS) -> list[int]:
    """The binary triple words :func:`eq_masked` takes per round for limb differences (limbs, n)."""
    words, planes, out = max(1, (n + 63) // 64), bits * limbs, []
    while planes > 1:
        out.append(planes // 2 * words)
        planes -= planes // 2
    return out


def eq_masked(d: torch.Tensor, rnd: Randomness, bits: int = EQ_BITS) -> torch.Tensor:
    r"""Packed XOR shares (W,) of [every limb of d is 0 mod 2^bits], for this party's int64
    shares of limb differences d (limbs, n), ``bits`` <= 32 (:data:`EQ_BITS`: exact for
    limbs in a 32-bit range, whose differences are below :math:`2^{32}` in size).

    With the dealer's :math:`r`, uniform in :math:`\mathbb{Z}_{2^{32}}`, shared
    additively and bit by bit (kind ``"eq32"``), the parties open
    :math:`z = d + r \bmod 2^{\text{bits}}` (uniformly random whatever :math:`d`), and
    :math:`d \equiv 0` exactly when the low bits of :math:`z` and :math:`r` agree:
    :math:`\bigwedge_i \lnot(z_i \oplus r_i)`, a local XOR with the public :math:`z` and a
    tree of ANDs over the bits of every limb, :math:`\lceil \log_2(\text{bits} \cdot
    \text{limbs}) \rceil` rounds after the opening.  Among two parties, 31 ANDs per
    one-limb row instead of a 33-bit sign test's 89."""
    limbs, n = d.shape
    r_arith, r_bits = (t.view(limbs, n) for t in rnd.take("eq32", limbs * n))
    (z,) = open_all([(d.to(torch.int32) + r_arith).reshape(-1)], bits=bits)  # d mod 2^32, masked
    agree = ~(r_bits ^ z.view(limbs, n)) if backend.rank() == 0 else r_bits  # XOR shares of not(z_i xor r_i)
    flags = bitslice(agree.long(), bits).reshape(bits * limbs, -1)
    while flags.shape[0] > 1:  # AND of every bit of every limb, one round per halving
        h = flags.shape[0] // 2
        flags = torch.cat([and_gate(flags[:h], flags[h : 2 * h], rnd), flags[2 * h :]])
    return flags[0]


def limb_diffs(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Shares of x - y as (limbs, n), from this party's (n,) or (n, limbs) int64 shares."""
    d = x - y
    return d.reshape(1, -1) if d.dim() == 1 else d.t().contiguous()


def sign_bits(d: torch.Tensor, bits: int = COMPARE_BITS) -> torch.Tensor:
    """Shares of [d < 0] elementwise, from this party's int64 shares of d with |d| < 2^(bits - 1)."""
    flat = d.reshape(1, -1)
    with dealer_randomness() as rnd:
        packed, _ = less_packed(flat, bits, rnd)
        return bit_to_arithmetic(packed, flat.shape[1], rnd).reshape(d.shape)


def secure_less(x: torch.Tensor, y: torch.Tensor, bits: int = COMPARE_BITS) -> torch.Tensor:
    """Shares of [x < y] per row of integer-encoded (n,) or (n, limbs) keys (this
    party's int64 shares), limbs compared lexicographically (first limb most
    significant); each limb's difference must satisfy |d| < 2^(bits - 1)."""
    d = limb_diffs(x, y)
    with dealer_randomness() as rnd:
        packed, _ = less_packed(d, bits, rnd)
        return bit_to_arithmetic(packed, d.shape[1], rnd)


def secure_eq(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Shares of [x == y] per row of integer-encoded (n,) or (n, limbs) keys (all limbs equal;
    every limb in a 32-bit range)."""
    d = limb_diffs(x, y)
    with dealer_randomness() as rnd:
        return bit_to_arithmetic(eq_masked(d, rnd), d.shape[1], rnd)
