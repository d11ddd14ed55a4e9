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

The comparison
--------------
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

Gates and openings
------------------
Every AND and product is Beaver's protocol with a triple from the dealer
(:mod:`secure_auc.mpc.dealer`: the separate dealer process with TTP, rank 0
with TFP; AES-CTR streams, never CrypTen's providers): open :math:`e = x - a` and
:math:`f = y - b` (XOR for binary shares), then
:math:`[xy] = [c] + e[b] + f[a] + ef` (the public term added by one party).
All values a round opens — masked AND inputs, masked product inputs, the
masked bits :math:`z` — go out in one message per party
(:func:`open_masked`, an ``all_gather`` of the parties' shares: one
collective instead of CrypTen's two per gate).  Each opened value is masked by
a fresh uniformly random triple or bit that no single computing party knows
(with TFP, rank 0 knows them: it is trusted), so it is independent of the
data.

Triples are fetched in batches (:class:`Randomness`): one dealer request
serves several stages (with TTP each request is a round trip from rank 0 to
the dealer); their sizes depend only on the public :math:`n`, limbs and
number of parties.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from ..encoding import COMPARE_BITS

__all__ = ["bitonic_stages", "n_stages", "BitonicSort", "Randomness", "dealer_randomness", "open_masked", "secure_less",
           "secure_eq", "sign_bits"]

_SHIFTS = torch.arange(64, dtype=torch.long)
_CPU = torch.device("cpu")


def _comm():
    from .._crypten import crypten

    return crypten.comm.get()


# ----------------------------------------------------------------- correlated randomness


class Randomness:
    """Correlated randomness from the dealer (:class:`..dealer.DealerChannel`), in batches.

    ``take(kind, numel)`` returns this party's flat shares: kind ``"binary"``
    (a, b, c) XOR-shared with c = a AND b; ``"mul"`` (a, b, c) additively
    shared with c = a b; ``"b2a"`` (r additive, r XOR-shared in bit 0) for a
    uniformly random bit r.  Every share comes from the party's AES-CTR stream
    keyed by the dealer's seed (:mod:`..prg`); only rank 0's corrected share
    travels.  When the stock runs short it is refilled by one request of
    ``max(needed, reserve)`` words, the reserve being set with
    :meth:`reserve`.  Every slice is handed out once.  All parties must make
    the same calls (they do: sizes depend only on public values).
    """

    def __init__(self, channel):
        self.channel = channel
        self.stock: dict[str, list[torch.Tensor]] = {}
        self.used: dict[str, int] = {}
        self._reserve: dict[str, int] = {}

    def reserve(self, words: dict[str, int]) -> None:
        """Size the next refill of each kind (words of randomness still to come)."""
        self._reserve = dict(words)

    def take(self, kind: str, numel: int) -> list[torch.Tensor]:
        have = self.stock[kind][0].numel() if kind in self.stock else 0
        if have < numel:
            self._fetch(kind, max(numel - have, self._reserve.get(kind, 0) - have))
        parts = self.stock[kind]
        self.stock[kind] = [p[numel:] for p in parts]
        self.used[kind] = self.used.get(kind, 0) + numel
        self._reserve[kind] = max(0, self._reserve.get(kind, 0) - numel)
        return [p[:numel] for p in parts]

    def _fetch(self, kind: str, numel: int) -> None:
        if kind not in ("binary", "b2a", "mul"):
            raise ValueError(f"unknown kind of randomness {kind!r}")
        new = self.channel.triples(numel) if kind == "mul" else self.channel.correlated(kind, numel)
        if kind == "b2a":
            new[1] = new[1] & 1  # the bit is bit 0 of the XOR sharing
        if kind in self.stock and self.stock[kind][0].numel():
            new = [torch.cat([old, fresh]) for old, fresh in zip(self.stock[kind], new)]
        self.stock[kind] = new


@contextlib.contextmanager
def dealer_randomness():
    """A :class:`Randomness` on a fresh dealer channel, closed at the end of the block."""
    from ..dealer import DealerChannel

    channel = DealerChannel()
    try:
        yield Randomness(channel)
    finally:
        channel.close()


# ----------------------------------------------------------------- one round of gates


def open_masked(binary: list[torch.Tensor], arithmetic: list[torch.Tensor]):
    """Open masked values to every party in one round: XOR-shared ``binary`` and
    additively shared ``arithmetic`` tensors (shares of this party), one
    ``all_gather`` of the concatenated shares.  Only for values masked with fresh
    one-time randomness.  Returns the opened tensors (two lists, same shapes)."""
    comm = _comm()
    tensors = binary + arithmetic
    flat = torch.cat([t.reshape(-1) for t in tensors])
    gathered = comm.all_gather(flat) if comm.get_world_size() > 1 else [flat]
    nb = sum(t.numel() for t in binary)
    xor = gathered[0][:nb].clone()
    add = gathered[0][nb:].clone()
    for g in gathered[1:]:
        xor ^= g[:nb]
        add += g[nb:]
    out, offset = [], 0
    for t in binary:
        out.append(xor[offset : offset + t.numel()].view(t.shape))
        offset += t.numel()
    out_a, offset = [], 0
    for t in arithmetic:
        out_a.append(add[offset : offset + t.numel()].view(t.shape))
        offset += t.numel()
    return out, out_a


def _round(rnd: Randomness, ands=(), muls=(), masked_bits=()):
    """One round: Beaver ANDs of the XOR-shared pairs ``ands``, Beaver products of
    the additively shared pairs ``muls`` (each pair of one shape), and opening of
    the already-masked XOR-shared ``masked_bits``.  Returns (ands, muls, opened bits)."""
    rank = _comm().get_rank()
    bin_open, bin_triples, ar_open, ar_triples = [], [], [], []
    for x, y in ands:
        a, b, c = (t.view(x.shape) for t in rnd.take("binary", x.numel()))
        bin_open += [x ^ a, y ^ b]
        bin_triples.append((a, b, c))
    for x, y in muls:
        a, b, c = (t.view(x.shape) for t in rnd.take("mul", x.numel()))
        ar_open += [x - a, y - b]
        ar_triples.append((a, b, c))
    opened_b, opened_a = open_masked(bin_open + list(masked_bits), ar_open)
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


def _and(x: torch.Tensor, y: torch.Tensor, rnd: Randomness, muls=()):
    """x AND y (XOR shares); with ``muls``, also those products in the same round."""
    ands, prods, _ = _round(rnd, [(x.contiguous(), y.contiguous())], muls)
    return (ands[0], prods) if muls else ands[0]


def _not(x: torch.Tensor, rank: int) -> torch.Tensor:
    """Share of NOT x: one party flips its share."""
    return x ^ -1 if rank == 0 else x


# ----------------------------------------------------------------- bit slicing (local)


def _bitslice(x: torch.Tensor, bits: int) -> torch.Tensor:
    """(k, n) int64 -> (bits, k, W) planes, W = ceil(n / 64): bit j of word w of
    plane i (row r) is bit i of x[r, 64 w + j]."""
    k, n = x.shape
    words = max(1, (n + 63) // 64)
    if words * 64 != n:
        x = torch.cat([x, x.new_zeros((k, words * 64 - n))], dim=1)
    x = x.reshape(k, words, 64)
    out = torch.empty((bits, k, words), dtype=torch.long)
    for i in range(bits):
        # distinct powers of two: the int64 sum (wrapping at bit 63) is their OR
        out[i] = (((x >> i) & 1) << _SHIFTS).sum(-1)
    return out


def _unslice(planes: torch.Tensor, n: int) -> torch.Tensor:
    """(W,) packed words -> (n,) bits (0/1 int64)."""
    return ((planes.unsqueeze(-1) >> _SHIFTS) & 1).reshape(-1)[:n]


# ----------------------------------------------------------------- the comparison circuit


def _carry_save(ops: list[torch.Tensor], rnd: Randomness, muls: list):
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
        ands, got, _ = _round(rnd, [((a ^ c)[:, :-1].contiguous(), (b ^ c)[:, :-1].contiguous())],
                              muls if prods is None else ())
        if prods is None:
            prods = got
        carry = torch.zeros_like(s)
        carry[:, 1:] = ands[0] ^ c[:, :-1]
        ops = [t for g in range(groups) for t in (s[g], carry[g])] + ops[3 * groups :]
    return ops, prods


def _top_bit_of_sum(a: torch.Tensor, b: torch.Tensor, rnd: Randomness, muls=()):
    """Shares of bit m of A + B from planes (m + 1, ...) of XOR-shared A, B, and the
    products ``muls`` computed in the first round."""
    m = a.shape[0] - 1
    ands, prods, _ = _round(rnd, [(a[:m].contiguous(), b[:m].contiguous())], muls)
    g = ands[0]
    p = a[:m] ^ b[:m]
    while g.shape[0] > 1:
        k = g.shape[0]
        h = k // 2
        g_lo, g_hi = g[0 : 2 * h : 2], g[1 : 2 * h : 2]
        p_lo, p_hi = p[0 : 2 * h : 2], p[1 : 2 * h : 2]
        # the lowest group's P is never used (nothing is below it): h + (h - 1) ANDs
        prod = _and(torch.cat([p_hi, p_hi[1:]]), torch.cat([g_lo, p_lo[1:]]), rnd)
        g_new = g_hi ^ prod[:h]
        p_new = torch.cat([torch.zeros_like(p_hi[:1]), prod[h:]])
        if k % 2:
            g_new = torch.cat([g_new, g[k - 1 :]])
            p_new = torch.cat([p_new, p[k - 1 :]])
        g, p = g_new, p_new
    return a[m] ^ b[m] ^ g[0], prods


def _packed_signs(shares: torch.Tensor, bits: int, rnd: Randomness, muls=()):
    """XOR shares of [d < 0] for the additively shared rows d of ``shares`` (k, n),
    packed (k, W), assuming |d| < 2^(bits - 1); plus the products ``muls``,
    computed in the first round."""
    comm = _comm()
    world, rank = comm.get_world_size(), comm.get_rank()
    mine = _bitslice(shares, bits)
    zeros = torch.zeros_like(mine)
    ops = [mine if r == rank else zeros for r in range(world)]
    if world == 1:
        ops.append(zeros)
    (a, b), prods = _carry_save(ops, rnd, list(muls))
    signs, first = _top_bit_of_sum(a, b, rnd, muls if prods is None else ())
    return signs, (first if prods is None else prods)


def _less_packed(d: torch.Tensor, bits: int, rnd: Randomness, muls=()):
    """Packed XOR shares (W,) of [d < 0] lexicographically, for limb differences d
    (limbs, n); plus the products ``muls`` computed in the first round."""
    rank = _comm().get_rank()
    limbs = d.shape[0]
    if limbs == 1:
        s, prods = _packed_signs(d, bits, rnd, muls)
        return s[0], prods
    s, prods = _packed_signs(torch.cat([d, -d[:-1]]), bits, rnd, muls)  # s_i = [d_i < 0], t_i = [-d_i < 0]
    lt = s[limbs - 1]
    for i in range(limbs - 2, -1, -1):  # lt = s_i xor (eq_i and lt_rest), eq_i = not(s_i xor t_i)
        eq_i = _not(s[i] ^ s[limbs + i], rank)
        lt = s[i] ^ _and(eq_i, lt, rnd)
    return lt, prods


def _eq_packed(d: torch.Tensor, bits: int, rnd: Randomness) -> torch.Tensor:
    """Packed XOR shares (W,) of [d == 0] (every limb), for limb differences d (limbs, n)."""
    rank = _comm().get_rank()
    limbs = d.shape[0]
    s, _ = _packed_signs(torch.cat([d, -d]), bits, rnd)
    flags = torch.stack([_not(s[i] ^ s[limbs + i], rank) for i in range(limbs)])  # eq_i = not(s_i xor t_i)
    while flags.shape[0] > 1:  # AND of the limbs' flags, one round per halving
        h = flags.shape[0] // 2
        flags = torch.cat([_and(flags[:h], flags[h : 2 * h], rnd), flags[2 * h :]])
    return flags[0]


def _open_bits(packed: torch.Tensor, r_binary: torch.Tensor, n: int, rnd: Randomness) -> torch.Tensor:
    """z = c XOR r for packed XOR-shared bits c (W,) and r's bit shares (n,): opened, unpacked."""
    masked = packed ^ _bitslice(r_binary.view(1, -1), 1)[0, 0]
    _, _, (z,) = _round(rnd, masked_bits=[masked])
    return _unslice(z, n)


def _bit_to_arithmetic(packed: torch.Tensor, n: int, rnd: Randomness) -> torch.Tensor:
    """Additive shares of n packed XOR-shared bits: open z = c XOR r, c = z + (1 - 2z) r."""
    r_arith, r_binary = rnd.take("b2a", n)
    z = _open_bits(packed, r_binary, n, rnd)
    c = (1 - 2 * z) * r_arith
    return c + z if _comm().get_rank() == 0 else c


def _limb_diffs(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Shares of x - y as (limbs, n), from this party's (n,) or (n, limbs) int64 shares."""
    d = x - y
    return d.reshape(1, -1) if d.dim() == 1 else d.t().contiguous()


def sign_bits(d: torch.Tensor, bits: int = COMPARE_BITS) -> torch.Tensor:
    """Shares of [d < 0] elementwise, from this party's int64 shares of d with |d| < 2^(bits - 1)."""
    flat = d.reshape(1, -1)
    with dealer_randomness() as rnd:
        packed, _ = _less_packed(flat, bits, rnd)
        return _bit_to_arithmetic(packed, flat.shape[1], rnd).reshape(d.shape)


def secure_less(x: torch.Tensor, y: torch.Tensor, bits: int = COMPARE_BITS) -> torch.Tensor:
    """Shares of [x < y] per row of integer-encoded (n,) or (n, limbs) keys (this
    party's int64 shares), limbs compared lexicographically (first limb most
    significant); each limb's difference must satisfy |d| < 2^(bits - 1)."""
    d = _limb_diffs(x, y)
    with dealer_randomness() as rnd:
        packed, _ = _less_packed(d, bits, rnd)
        return _bit_to_arithmetic(packed, d.shape[1], rnd)


def secure_eq(x: torch.Tensor, y: torch.Tensor, bits: int = COMPARE_BITS) -> torch.Tensor:
    """Shares of [x == y] per row of integer-encoded (n,) or (n, limbs) keys (all limbs equal)."""
    d = _limb_diffs(x, y)
    with dealer_randomness() as rnd:
        return _bit_to_arithmetic(_eq_packed(d, bits, rnd), d.shape[1], rnd)


# ----------------------------------------------------------------- the network


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
        rank = _comm().get_rank()
        x = keys.clone()
        if x.dim() == 1:
            x = x.unsqueeze(1)
        pairs, limbs = x.shape[0] // 2, x.shape[1]
        stages = bitonic_stages(x.shape[0])
        self.swaps = []
        per_stage = {}
        for s, (a, b) in enumerate(stages, 1):
            _reserve(rnd, per_stage, len(stages) - s + 1, self.batch_words)
            xa, xb = x[a], x[b]
            d = xb - xa
            # r: a random bit shared both ways; r * d rides along with the comparison's first round
            r_arith, r_binary = rnd.take("b2a", pairs)
            r_cols = r_arith.unsqueeze(1).expand(-1, limbs).contiguous()
            packed, (rd,) = _less_packed(d.t().contiguous(), self.bits, rnd, [(r_cols, d)])  # [key_b < key_a]
            z = _open_bits(packed, r_binary, pairs, rnd)  # z = c xor r, public and uniformly random
            # c = z + (1 - 2z) r  and  c d = z d + (1 - 2z) r d
            c = (1 - 2 * z) * r_arith
            if rank == 0:
                c = c + z
            delta = z.unsqueeze(1) * d + (1 - 2 * z).unsqueeze(1) * rd
            x[a] = xa + delta
            x[b] = xb - delta
            self.swaps.append((a, b, c))
            if s == 1:
                per_stage = dict(rnd.used)
            if progress is not None:
                progress(s, len(stages))
        return x

    def unsort(self, values: torch.Tensor, rnd: Randomness, progress=None) -> torch.Tensor:
        """Apply the inverse of the sorting permutation to this party's shares of a secret
        (n,) or (n, cols) vector: rows in sorted order -> rows in input order.  One
        product per stage."""
        y = values.clone()
        total = len(self.swaps)
        per_stage = {}
        for s, (a, b, c) in enumerate(reversed(self.swaps), 1):
            _reserve(rnd, per_stage, total - s + 1, self.batch_words)
            ya, yb = y[a], y[b]
            cc = c if y.dim() == 1 else c.unsqueeze(1).expand(-1, y.shape[1]).contiguous()
            _, (delta,), _ = _round(rnd, muls=[(cc, yb - ya)])
            y[a] = ya + delta
            y[b] = yb - delta
            if s == 1:
                per_stage = dict(rnd.used)
            if progress is not None:
                progress(s, total)
        return y
