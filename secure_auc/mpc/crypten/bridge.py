r"""Mid-ranks and the DP AUC of scores held as a CrypTen ``MPCTensor``.

The computing parties hold additive shares :math:`x_p` (CrypTen's fixed point:
:math:`v = \sum_p x_p \bmod 2^{64}`, the score times :math:`2^{f}`, signed).  No
party opens a score or a key:

1. *Arithmetic to binary* (:func:`score_keys`).  With :math:`u = v + 2^{30}`
   (rank 0 adds :math:`2^{30}` to its share), each party bit-slices its share of
   :math:`u` into 64 planes (:func:`..primitives.bits.bitslice`); for three or
   more parties a carry-save layer (:func:`..primitives.circuits.carry_save`)
   leaves two addends, and a prefix adder (:func:`add_planes`, 7 AND rounds)
   gives XOR shares of the 64 bits of :math:`u \bmod 2^{64}`.
2. *Key width.*  One 32-bit key limb, below the sorting network's padding key
   :math:`2^{31} - 1`, holds :math:`-2^{30} \le v < 2^{30}` (scores in
   :math:`[-2^{14}, 2^{14})` with CrypTen's 16 fractional bits): bits 31..63 of
   :math:`u` all zero.  Their OR over every row (AND rounds on halves, then within a
   word) is the one bit opened, to every computing party.  If it is set, the radix
   sort takes two-limb keys for every row (:func:`wide_keys`: the whole 64-bit
   range, exact), and the sorting network refuses (every party raises
   :class:`~secure_auc.validation.InputError`).  Nothing else about the values is
   opened.
3. *Keys and digits.*  With one limb the key is :math:`v` itself:
   the shares of the ``MPCTensor`` are the rank step's one-limb keys
   (:mod:`..encoding`: first limb in :math:`[-2^{31}, 2^{31})`, order and
   ties those of the fixed-point values, negatives included).  The radix sort
   needs the shares of each 2-bit digit of :math:`u \bmod 2^{32}` (an unsigned
   form of the key, in the same order) modulo 4 only (:func:`digits_mod4`): the
   high bit of a digit enters as :math:`2 b`, and :math:`2 \bigoplus_p c_p \equiv
   2 \sum_p c_p \pmod 4`, so each party doubles its own XOR share; the low bit
   is :math:`\sum_p c_p - 2 \bigoplus_{p<q} c_p c_q \pmod 4`: one AND round on
   packed words for the products of every pair of parties' shares.  With two
   limbs, the 32 digits of :math:`v + 2^{63}` the same way, and the limbs
   :math:`(v \gg 32, v \bmod 2^{32})` from a B2A of its 32 high bits
   (:func:`wide_keys`).
4. *Rank step.*  The sort chosen by name (:func:`..sort.registry.rank_sort`): the radix
   sort (:func:`..ranks.radix_midranks_shared`, mid-rank scan in :math:`\mathbb{Z}_{2^{64}}` for an ``MPCTensor`` out, in
   :math:`\mathbb{Z}_{2^{32}}` when the ranks go to their owners), or the sorting network
   (:func:`..ranks.secure_midranks`, no digits), on these keys.
5. *Out.*  :func:`rank_mpctensor` returns 1-based mid-ranks as an ``MPCTensor``
   (fixed point, exact: the halves of the mid-ranks are representable);
   :func:`evaluate_mpctensor` opens each label owner's slice of 2 x mid-ranks to
   that owner only, runs the plain protocol's client code there (labels, RR
   flips and noise from the owner's own key) and opens only the sum of the
   owners' noisy statistics, to the server only (:mod:`..finish`, the last steps of
   every layout).

Randomness: the project's dealer (:mod:`..primitives.dealer`), like the rank
step; CrypTen's provider channel is released first (:mod:`.safe`).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ...validation import InputError
from .. import RANK_METHODS
from ..comm import backend
from ..primitives.beaver import and_gate
from ..primitives.bits import bitslice, unslice
from ..primitives.circuits import carry_save
from ..primitives.opening import open_all
from ..primitives.randomness import dealer_randomness
from ..ranks import DIGIT_BITS, reveal_to_owners
from ..sort.registry import rank_sort
from .safe import released

__all__ = ["score_keys", "wide_keys", "add_planes", "any_set", "digits_mod4", "rank_mpctensor",
           "twice_midranks_mpctensor", "evaluate_mpctensor", "score_count", "KEY_RANGE_BITS"]

KEY_RANGE_BITS = 30  # -2^30 <= v < 2^30: one 32-bit key limb, below the padding key
_WORD_BITS = 64


def add_planes(a: torch.Tensor, b: torch.Tensor, rnd) -> torch.Tensor:
    r"""XOR shares of the bits of :math:`A + B \bmod 2^{n}` from XOR-shared bit planes
    ``a``, ``b`` (n, ...): Sklansky's prefix adder, :math:`1 + \lceil \log_2 (n - 1) \rceil`
    AND rounds, about :math:`n + (n/2 + n/2) \log_2 n` ANDs of planes.

    :math:`g_i = a_i b_i`, :math:`p_i = a_i \oplus b_i`; at block size :math:`2s`
    (:math:`s = 1, 2, 4, \dots`) every position :math:`i` of a block's upper half combines
    with the top :math:`j` of the lower half: :math:`G_i \leftarrow G_i \oplus P_i G_j`,
    :math:`P_i \leftarrow P_i P_j` (generate and propagate cannot both hold, so XOR is OR;
    a group that starts at bit 0 never needs its P).  The carry into bit :math:`i` is
    :math:`G_{i-1}`, the sum bit :math:`p_i \oplus G_{i-1}`."""
    n = a.shape[0]
    p0 = a ^ b
    g = and_gate(a.contiguous(), b.contiguous(), rnd)
    p = p0.clone()
    pos = torch.arange(n - 1)  # the G of bit n - 1 is never needed
    s = 1
    while s < n - 1:
        upper = pos[(pos // s) % 2 == 1]
        later = upper[upper // (2 * s) > 0]  # P is needed later only in blocks not starting at bit 0
        x = torch.cat([p[upper], p[later]]).contiguous()
        y = torch.cat([g[(upper // s) * s - 1], p[(later // s) * s - 1]]).contiguous()
        t = and_gate(x, y, rnd)
        g[upper] ^= t[: len(upper)]
        p[later] = t[len(upper) :]
        s *= 2
    out = p0.clone()
    out[1:] ^= g[: n - 1]
    return out


def any_set(words: torch.Tensor, rnd) -> torch.Tensor:
    """XOR shares (one int64 word, bit 0) of the OR of every bit of ``words`` (XOR-shared,
    any shape): OR(x, y) = x ^ y ^ (x AND y), on halves, then within the word."""
    x = words.reshape(-1)
    while x.numel() > 1:
        if x.numel() % 2:
            x = torch.cat([x, torch.zeros(1, dtype=x.dtype)])  # a shared zero
        h = x.numel() // 2
        lo, hi = x[:h].contiguous(), x[h:].contiguous()
        x = lo ^ hi ^ and_gate(lo, hi, rnd)
    shift = _WORD_BITS // 2
    while shift:
        y = (x >> shift) & ((1 << shift) - 1)  # logical shift: each party shifts its share
        x = (x ^ y ^ and_gate(x.contiguous(), y.contiguous(), rnd)) & ((1 << shift) - 1)
        shift //= 2
    return x & 1


def _planes(u: torch.Tensor, rnd) -> torch.Tensor:
    r"""XOR shares (64, 1, W) of the bits of :math:`\sum_p u_p \bmod 2^{64}` from this party's
    additive shares ``u`` (1, M): bit slices, a carry-save layer, a prefix adder."""
    rank, world = backend.rank(), backend.world_size()
    mine = bitslice(u, _WORD_BITS)  # (64, 1, W)
    zeros = torch.zeros_like(mine)
    ops = [mine if r == rank else zeros for r in range(world)] + ([zeros] if world == 1 else [])
    (a, b), _ = carry_save(ops, rnd, [])
    return add_planes(a, b, rnd)


def score_keys(share: torch.Tensor, rnd, *, digits: bool = True):
    """Keys and digits of the rank step from this party's shares of CrypTen fixed-point
    values (module docstring, steps 1 to 3).

    ``share``: this party's (M,) int64 shares.  Returns ``(keys, digit_shares)``: keys
    (M, limbs) int64, digit_shares (32 limbs / DIGIT_BITS, M) int64, correct modulo
    2^DIGIT_BITS (None without ``digits``).  One limb (the shares themselves) if every
    value is in [-2^30, 2^30); otherwise two (:func:`wide_keys`), or, without ``digits``
    (the sorting network), InputError at every party."""
    if DIGIT_BITS != 2:  # the digits' high bit is doubled locally (module docstring)
        raise ValueError("the digits of CrypTen keys are 2-bit digits")
    m = share.numel()
    u = share.reshape(1, -1).clone()
    if backend.rank() == 0:
        u += 1 << KEY_RANGE_BITS
    bits = _planes(u, rnd)  # XOR shares of the bits of u mod 2^64
    (outside,) = open_all([any_set(bits[KEY_RANGE_BITS + 1 :], rnd)], xor=1)
    if int(outside.reshape(-1)[0]) & 1:
        del bits
        if not digits:
            raise InputError(f"a CrypTen score is outside the fixed-point range the sorting network ranks: the "
                             f"encoded values must lie in [-2^{KEY_RANGE_BITS}, 2^{KEY_RANGE_BITS}) (scores in "
                             "[-2^14, 2^14) with 16 fractional bits); the radix sort ranks the whole range")
        return wide_keys(share, rnd)
    keys = share.reshape(-1, 1).contiguous()
    if not digits:
        return keys, None
    return keys, digits_mod4(bits[: 32].reshape(32, -1), m, rnd)


def wide_keys(share: torch.Tensor, rnd):
    r"""Two-limb keys and their 32 digits for any 64-bit fixed-point values :math:`v`
    (this party's (M,) int64 shares ``share``), for the radix sort.

    With :math:`u = v + 2^{63} mod 2^{64}` (rank 0 flips the top bit of its share;
    :math:`u` is unsigned and in the order of the signed :math:`v`), XOR shares of the
    64 bits of :math:`u` (:func:`_planes`); B2A (:func:`..primitives.b2a.bit_to_arithmetic`)
    of the 32 high bits gives additive shares of :math:`h = \lfloor u / 2^{32} 
floor`, and
    :math:`l = u - 2^{32} h \in [0, 2^{32})` locally.  The keys are the limbs of
    :func:`..encoding.encode_keys`, :math:`(h - 2^{31}, l)` = :math:`(v \gg 32, v mod 2^{32})`,
    each in a 32-bit range (so the equality test of the mid-rank scan is exact), and the
    digits are those of :math:`u` (:func:`..ranks.key_digits`' unsigned form), by
    :func:`digits_mod4`.  Opened: only B2A-masked bits."""
    from ..primitives.b2a import bit_to_arithmetic

    m = share.numel()
    u = share.reshape(1, -1).clone()
    if backend.rank() == 0:
        u ^= torch.tensor(-(1 << 63), dtype=torch.int64)  # + 2^63 mod 2^64
    bits = _planes(u, rnd)  # (64, 1, W)
    words = bits.shape[-1]
    high = bit_to_arithmetic(bits[32:].reshape(-1).contiguous(), 32 * words * _WORD_BITS, rnd)
    weights = torch.arange(32, dtype=torch.int64).reshape(32, 1)
    h = (high.view(32, -1)[:, :m] << weights).sum(dim=0)
    del high
    lo = u.reshape(-1) - (h << 32)
    hi = h - (1 << 31) if backend.rank() == 0 else h
    keys = torch.stack([hi, lo], dim=1).contiguous()
    return keys, digits_mod4(bits.reshape(64, -1), m, rnd)


def digits_mod4(bits: torch.Tensor, m: int, rnd) -> torch.Tensor:
    r"""Additive shares, correct modulo 4, of the 2-bit digits :math:`b_{2l} + 2 b_{2l+1}`
    of XOR-shared bit planes ``bits`` (2L, W) of ``m`` values; returns (L, m) int64.

    With party :math:`p`'s share :math:`c_p` of a bit :math:`b = \bigoplus_p c_p`,
    :math:`b = e_1 - 2 e_2 + 4 e_3 - \dots` in the elementary symmetric polynomials of
    the :math:`c_p`, so :math:`b \equiv \sum_p c_p - 2 \bigoplus_{p<q} c_p c_q \pmod 4`
    (:math:`2 y \bmod 4` needs only :math:`y \bmod 2`, and :math:`2 \bigoplus_p y_p
    \equiv 2 \sum_p y_p`): one AND round on packed words for the low bits (the products
    of every pair of parties' shares, each party's share entered alone); the high bit
    enters as :math:`2 b`, each party doubling its own share.  No B2A conversion."""
    rank, world = backend.rank(), backend.world_size()
    count = bits.shape[0] // 2
    low = bits[0::2].contiguous()
    n = count * bits.shape[1] * _WORD_BITS

    def mine(p):
        return low if p == rank else torch.zeros_like(low)

    pairs = [(p, q) for p in range(world) for q in range(p + 1, world)]
    cross = torch.zeros(n, dtype=torch.long)
    if pairs:
        prods = and_gate(torch.cat([mine(p) for p, _ in pairs]), torch.cat([mine(q) for _, q in pairs]), rnd)
        folded = prods.view(len(pairs), -1)
        acc = folded[0].clone()
        for row in folded[1:]:
            acc ^= row
        cross = unslice(acc.reshape(-1), n)
    low_bits = unslice(low.reshape(-1), n)
    high_bits = unslice(bits[1::2].reshape(-1), n)
    digits = low_bits - 2 * cross + 2 * high_bits
    return digits.view(count, -1)[:, :m]


def twice_midranks_mpctensor(x, *, method: str = RANK_METHODS[0], progress=None, timings: dict | None = None,
                             dtype=torch.int64):
    """This party's (M,) shares of 2 x the 0-based mid-rank of every entry of the
    ``MPCTensor`` ``x`` (flattened), in input order (module docstring), in Z_2^64 (int64)
    or, with the radix sort and ``dtype=torch.int32``, in Z_2^32 (int32: enough to open
    them; the mid-rank scan sends half the bytes).  ``timings``
    (a dict, optional) gets the seconds and the bytes (sent and received, this party's
    counters) of the conversion (``"conversion"``, ``"conversion_bytes"``)."""
    sort = rank_sort(method)
    share = _arithmetic_share(x)
    start, sent = time.perf_counter(), backend.communication_stats()["bytes"]
    with released():
        with dealer_randomness() as rnd:
            keys, digit_shares = score_keys(share, rnd, digits=sort.digits)
        if timings is not None:
            timings["conversion"] = time.perf_counter() - start
            timings["conversion_bytes"] = backend.communication_stats()["bytes"] - sent
        return sort.midranks(keys, lambda l: digit_shares[l], keys.shape[1], progress=progress, dtype=dtype)


def rank_mpctensor(x, *, method: str = RANK_METHODS[0], progress=None):
    """1-based mid-ranks (ties share the mean of their positions, as scipy's ``rankdata``)
    of the scores in the CrypTen ``MPCTensor`` ``x`` (flattened), as an ``MPCTensor`` with
    ``x``'s fixed-point precision, shared among the same parties; nothing is opened but the
    one range bit (module docstring).

    Opening the ranks is the caller's choice, and it reveals the order of the scores
    to whoever learns them.  Under :func:`.safe.install`, ``ranks.get_plain_text(dst=k)``
    opens them to party ``k`` only, point-to-point
    (:func:`..primitives.opening.open_to`; None at every other party);
    ``ranks.get_plain_text()`` without ``dst`` opens them to every computing party.

    Examples
    --------
    In every computing party, after :func:`.safe.install` (not run here: it needs the parties)::

        scores = model(crypten.cryptensor(features, src=rank)).sigmoid()
        ranks = rank_mpctensor(scores)           # an MPCTensor: no party can read it
        mine = ranks.get_plain_text(dst=0)       # the 1-based mid-ranks at party 0, None elsewhere
    """
    from crypten.mpc import MPCTensor

    twice = twice_midranks_mpctensor(x, method=method, progress=progress)
    scale_bits = int(round(np.log2(_arithmetic(x).encoder.scale)))
    if scale_bits < 1:
        raise InputError("mid-ranks need at least one fractional bit in CrypTen's encoder")
    shares = twice << (scale_bits - 1)  # 2r * 2^(f-1) = r * 2^f
    if backend.rank() == 0:
        shares += 1 << scale_bits  # 1-based
    return MPCTensor.from_shares(shares, precision=scale_bits)


def evaluate_mpctensor(x, labels, *, owners: list[int], sizes: list[int], mechanisms, noise_key: int | None = None,
                       server: int = 0, method: str = RANK_METHODS[0], progress=None):
    """The paper's DP AUC of the scores in the ``MPCTensor`` ``x`` (flattened, M rows),
    whose labels are held by computing parties: rows ``sizes[0]`` first belong to party
    ``owners[0]``, and so on (owners distinct; sizes public).

    ``labels``: this party's labels (0/1) of its rows if it is an owner, else None;
    ``mechanisms``: one or more DP mechanisms (:func:`secure_auc.dp.make_mechanism`),
    evaluated on the same ranks; ``noise_key``: an owner's 128-bit key for its RR flips
    and noise (None: fresh from :mod:`secrets`).  Each owner learns the mid-ranks of
    its own rows (as in the client-shared protocol) and nothing else; only the sum of
    the owners' noisy statistics is opened, to ``server`` only.  Returns, at ``server``,
    ``(estimates, aggregates)`` (one per mechanism); None elsewhere."""
    from ...data.io import ClientData
    from .. import finish

    rank = backend.rank()
    mechanisms = list(mechanisms) if isinstance(mechanisms, (list, tuple)) else [mechanisms]
    sizes = [int(n) for n in sizes]
    total = _arithmetic_share(x).numel()
    if len(owners) != len(sizes) or len(set(owners)) != len(owners) or sum(sizes) != total or min(sizes) < 1:
        raise InputError(f"owners {owners} and sizes {sizes} must be distinct parties whose row counts add up "
                         f"to the {total} scores")
    if noise_key is not None and rank not in owners:
        raise InputError(f"party {rank} holds no labels and must not hold a noise key")
    if rank in owners:
        n = sizes[owners.index(rank)]
        labels = np.asarray(labels)
        if labels.shape != (n,) or not np.isin(labels, (0, 1)).all():
            raise InputError(f"party {rank} must hold {n} labels of 0 or 1, got shape {labels.shape}")
    twice = twice_midranks_mpctensor(x, method=method, progress=progress, dtype=torch.int32)
    mine = reveal_to_owners(twice, sizes, owners)
    stats = np.zeros(2 * len(mechanisms), dtype=np.int64)
    if rank in owners:  # the client code reads labels and ranks only; it never sees a score here
        data = ClientData(np.zeros(len(labels)), labels)
        stats = finish.client_statistics([data], owners.index(rank), [noise_key], mechanisms, mine, total)
    with released():
        opened = finish.sum_and_open(stats, len(stats), list(owners), dst=server)
    if rank != server:
        return None
    return finish.server_estimates(opened, mechanisms, total)


def score_count(x) -> int:
    """The number of scores (M) in the CrypTen ``MPCTensor`` ``x`` (flattened); raises
    InputError unless it holds one or more values as arithmetic shares."""
    return _arithmetic_share(x).numel()


def _arithmetic(x):
    from crypten.mpc import MPCTensor
    from crypten.mpc.primitives import ArithmeticSharedTensor

    if isinstance(x, MPCTensor):
        x = x._tensor
    if not isinstance(x, ArithmeticSharedTensor):
        raise InputError(f"expected a CrypTen MPCTensor with arithmetic shares, got {type(x).__name__}")
    return x


def _arithmetic_share(x) -> torch.Tensor:
    share = _arithmetic(x).share
    if share.dtype != torch.int64 or share.numel() < 1:
        raise InputError("the MPCTensor must hold at least one score")
    return share.reshape(-1).contiguous()
