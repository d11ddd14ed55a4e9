r"""Mid-ranks and the DP AUC of scores held as a CrypTen ``MPCTensor``.

The computing parties hold additive shares :math:`x_p` (CrypTen's fixed point:
:math:`v = \sum_p x_p \bmod 2^{64}`, the score times :math:`2^{f}`, signed).  No
party opens a score or a key:

1. *Arithmetic to binary* (:func:`score_keys`).  With :math:`u = v + 2^{30}`
   (rank 0 adds :math:`2^{30}` to its share), each party bit-slices its share of
   :math:`u` into 64 planes (:func:`..primitives.bits.bitslice`); for three or
   more parties a carry-save layer (:func:`..primitives.circuits.carry_save`)
   leaves two addends, and a Kogge-Stone adder (:func:`add_planes`,
   :math:`\lceil \log_2 64 \rceil = 6` AND rounds) gives XOR shares of the 64
   bits of :math:`u \bmod 2^{64}`.
2. *Range* (exact, or refused).  The keys are one 32-bit limb, below the
   sorting network's padding key :math:`2^{31} - 1`, so :math:`-2^{30} \le v < 2^{30}`
   is needed (scores in :math:`[-2^{14}, 2^{14})` with CrypTen's 16 fractional
   bits): bits 31..63 of :math:`u` must all be zero.  Their OR over every row (AND rounds on halves, then within a word)
   is the one bit opened, to every computing party; if it is set, every party
   raises :class:`~secure_auc.validation.InputError`.  Nothing else about the
   values is opened.
3. *Keys and digits.*  In that range the key is :math:`v` itself:
   the shares of the ``MPCTensor`` are the rank step's one-limb keys
   (:mod:`..encoding`: first limb in :math:`[-2^{31}, 2^{31})`, order and
   ties those of the fixed-point values, negatives included).  The radix sort
   needs the shares of each 2-bit digit of :math:`u \bmod 2^{32}` (an unsigned
   form of the key, in the same order) modulo 4 only: the high bit of a
   digit enters as :math:`2 b`, and :math:`2 \bigoplus_p b_p \equiv 2 \sum_p b_p
   \pmod 4`, so each party doubles its own XOR share; the low bit is converted
   with one B2A (:func:`..primitives.b2a.bit_to_arithmetic`): 16 conversions
   per row.
4. *Rank step.*  The radix sort (:func:`..ranks.radix_midranks_shared`, mid-rank
   scan in :math:`\mathbb{Z}_{2^{64}}`), or the sorting network
   (:func:`..ranks.secure_midranks`, no digits), on these keys.
5. *Out.*  :func:`rank_mpctensor` returns 1-based mid-ranks as an ``MPCTensor``
   (fixed point, exact: the halves of the mid-ranks are representable);
   :func:`evaluate_mpctensor` opens each label owner's slice of 2 x mid-ranks to
   that owner only, runs the plain protocol's client code there (labels, RR
   flips and noise from the owner's own key) and opens only the sum of the
   owners' noisy statistics, to the server only (:func:`..party.sum_and_open`).

Randomness: the project's dealer (:mod:`..primitives.dealer`), like the rank
step; CrypTen's provider channel is released first (:mod:`.safe`).
"""

from __future__ import annotations

import numpy as np
import torch

from ...validation import InputError
from .. import RANK_METHODS
from ..comm import backend
from ..primitives.b2a import bit_to_arithmetic
from ..primitives.beaver import and_gate, beaver_round
from ..primitives.bits import bitslice, unslice
from ..primitives.circuits import carry_save
from ..primitives.opening import open_all
from ..primitives.randomness import dealer_randomness
from ..ranks import DIGIT_BITS, radix_midranks_shared, reveal_to_owners, secure_midranks
from .safe import released

__all__ = ["score_keys", "add_planes", "any_set", "rank_mpctensor", "twice_midranks_mpctensor",
           "evaluate_mpctensor", "KEY_RANGE_BITS"]

KEY_RANGE_BITS = 30  # -2^30 <= v < 2^30: one 32-bit key limb, below the padding key
_WORD_BITS = 64


def add_planes(a: torch.Tensor, b: torch.Tensor, rnd) -> torch.Tensor:
    r"""XOR shares of the bits of :math:`A + B \bmod 2^{n}` from XOR-shared bit planes
    ``a``, ``b`` (n, ...): Kogge-Stone, :math:`\lceil \log_2 n \rceil` AND rounds.

    :math:`g_i = a_i b_i`, :math:`p_i = a_i \oplus b_i`; at distance :math:`d = 1, 2, 4, \dots`
    :math:`G_i \leftarrow G_i \oplus P_i G_{i-d}`, :math:`P_i \leftarrow P_i P_{i-d}`
    (generate and propagate cannot both hold, so XOR is OR); the carry into bit
    :math:`i` is :math:`G_{i-1}` and the sum bit :math:`p_i \oplus G_{i-1}`."""
    n = a.shape[0]
    p0 = a ^ b
    g = and_gate(a.contiguous(), b.contiguous(), rnd)
    p = p0.clone()
    d = 1
    while d < n - 1:  # G of bit n - 1 is never needed
        last = 2 * d >= n - 1
        hi = slice(d, n - 1)
        lo = slice(0, n - 1 - d)
        if last:
            t = and_gate(p[hi].contiguous(), g[lo].contiguous(), rnd)
            g = torch.cat([g[:d], g[hi] ^ t, g[n - 1 :]])
        else:
            t = and_gate(torch.cat([p[hi], p[hi]]).contiguous(), torch.cat([g[lo], p[lo]]).contiguous(), rnd)
            m = n - 1 - d
            g = torch.cat([g[:d], g[hi] ^ t[:m], g[n - 1 :]])
            p = torch.cat([p[:d], t[m:], p[n - 1 :]])
        d *= 2
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


def score_keys(share: torch.Tensor, rnd, *, digits: bool = True):
    """Keys and digits of the rank step from this party's shares of CrypTen fixed-point
    values (module docstring, steps 1 to 3).

    ``share``: this party's (M,) int64 shares.  Returns ``(keys, digit_shares)``:
    keys (M, 1) int64 (the shares themselves), digit_shares (32 / DIGIT_BITS, M) int64,
    correct modulo 2^DIGIT_BITS (None without ``digits``).  Raises InputError (at every
    party) if some value is not in [-2^30, 2^30)."""
    if DIGIT_BITS != 2:  # the digits' high bit is doubled locally (module docstring)
        raise ValueError("the digits of CrypTen keys are 2-bit digits")
    rank, world = backend.rank(), backend.world_size()
    m = share.numel()
    u = share.reshape(1, -1).clone()
    if rank == 0:
        u += 1 << KEY_RANGE_BITS
    mine = bitslice(u, _WORD_BITS)  # (64, 1, W)
    zeros = torch.zeros_like(mine)
    ops = [mine if r == rank else zeros for r in range(world)] + ([zeros] if world == 1 else [])
    (a, b), _ = carry_save(ops, rnd, [])
    bits = add_planes(a, b, rnd)  # XOR shares of the bits of u mod 2^64
    del a, b, ops, mine, zeros
    (outside,) = open_all([any_set(bits[KEY_RANGE_BITS + 1 :], rnd)], xor=1)
    if int(outside.reshape(-1)[0]) & 1:
        raise InputError(f"a CrypTen score is outside the rankable fixed-point range: the encoded values must "
                         f"lie in [-2^{KEY_RANGE_BITS}, 2^{KEY_RANGE_BITS}) (scores in [-2^14, 2^14) with 16 "
                         "fractional bits)")
    keys = share.reshape(-1, 1).contiguous()
    if not digits:
        return keys, None
    count = 32 // DIGIT_BITS  # one 32-bit limb
    words = bits.shape[-1]
    low = bits[0 : 2 * count : 2].reshape(-1).contiguous()  # (count * W,) packed low bits
    low = bit_to_arithmetic(low, low.numel() * _WORD_BITS, rnd).view(count, words * _WORD_BITS)[:, :m]
    high = unslice(bits[1 : 2 * count : 2].reshape(-1), count * words * _WORD_BITS).view(count, -1)[:, :m]
    return keys, low + 2 * high


def twice_midranks_mpctensor(x, *, method: str = RANK_METHODS[0], progress=None) -> torch.Tensor:
    """This party's (M,) int64 shares (Z_2^64) of 2 x the 0-based mid-rank of every entry of
    the ``MPCTensor`` ``x`` (flattened), in input order (module docstring)."""
    if method not in RANK_METHODS:
        raise InputError(f"unknown rank method {method!r}; choose from {RANK_METHODS}")
    share = _arithmetic_share(x)
    with released():
        with dealer_randomness() as rnd:
            keys, digit_shares = score_keys(share, rnd, digits=method == "radix")
        if method == "radix":
            return radix_midranks_shared(keys, lambda l: digit_shares[l], 1, progress=progress, dtype=torch.int64)
        return secure_midranks(keys, progress=progress)


def rank_mpctensor(x, *, method: str = RANK_METHODS[0], progress=None):
    """1-based mid-ranks (ties share the mean of their positions, as scipy's ``rankdata``)
    of the scores in the CrypTen ``MPCTensor`` ``x`` (flattened), as an ``MPCTensor`` with
    ``x``'s fixed-point precision, shared among the same parties; nothing is opened but the
    one range bit (module docstring).

    Examples
    --------
    In every computing party, after :func:`.safe.install` (not run here: it needs the parties)::

        scores = model(crypten.cryptensor(features, src=rank)).sigmoid()
        ranks = rank_mpctensor(scores)           # an MPCTensor
        ranks.get_plain_text()                   # opened to everyone, if that is meant
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
    from ...dp.rng import ClientRngs
    from ...protocol.client import Client
    from ...protocol.messages import Aggregate
    from ...protocol.server import Server
    from ..party import sum_and_open

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
    twice = twice_midranks_mpctensor(x, method=method, progress=progress)
    mine = reveal_to_owners(twice, sizes, owners)
    stats = np.zeros(2 * len(mechanisms), dtype=np.int64)
    if rank in owners:
        index = owners.index(rank)
        # the client code reads labels and ranks only; it never sees a score here
        data = ClientData(np.zeros(len(labels)), labels)
        for i, mechanism in enumerate(mechanisms):
            client = Client(index, data, mechanism, ClientRngs.from_key(noise_key))
            client.set_ranks(np.asarray(mine, dtype=np.float64) / 2.0, total)
            msg = client.statistics_message()
            stats[2 * i : 2 * i + 2] = (msg.local_sum_fixed, msg.local_p_fixed)
    with released():
        opened = sum_and_open(stats, len(stats), list(owners), dst=server)
    if rank != server:
        return None
    aggregates = [Aggregate(int(opened[2 * i]), int(opened[2 * i + 1]), total) for i in range(len(mechanisms))]
    return [Server(m).estimate(a) for m, a in zip(mechanisms, aggregates)], aggregates


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
