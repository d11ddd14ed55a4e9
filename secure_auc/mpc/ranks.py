r"""The secure rank step: global mid-ranks of secret-shared scores.

Input: party ``sources[k]`` holds ``sizes[k]`` scores (client k is rank k + 1
in the protocol); the sizes are public.  Output: each source learns 2 x the
0-based mid-rank of each of its own scores (an integer), in its own order;
nobody else learns anything.

1. *Keys.*  Each source encodes its scores exactly (:mod:`.encoding`); the
   parties agree on one or two key limbs by opening one bit to everyone:
   whether any source's scores are not float32-exact (:func:`agree_limbs`,
   a secure equality test on the shared count of such sources).
2. *Sort* (``method``).

   * ``"radix"`` (default, :func:`radix_midranks`): each source shares
     each 2-bit digit of its keys (:func:`key_digits`,
     :class:`.primitives.inputs.SourceSharing`), and :class:`.sort.RadixSort` composes
     the digits' stable-sort permutations through secret shuffles, in
     :math:`\mathbb{Z}_{2^{32}}`; the keys are carried to sorted order by the
     last shuffle.  No padding.
   * ``"network"`` (:func:`secure_midranks`): the keys are shared with integer
     encoding (precision 0), concatenated in party order and padded to
     :math:`n = 2^p` rows with public keys larger than any real one; the
     bitonic network (:mod:`.sort.bitonic`) sorts them and keeps its secret
     swap bits.  Padding rows tie only with each other, so they do not move
     any real rank.

3. *Mid-ranks in sorted order* (:func:`twice_midranks_sorted`, both methods).
   With :math:`e_j = [s_j = s_{j+1}]` (one batched equality test of
   neighbours, :func:`.primitives.circuits.eq_masked`: each limb's difference,
   below :math:`2^{32}` in size, is 0 exactly when it is 0 modulo :math:`2^{32}`,
   which a masked opening and an AND tree over its 32 bits test), position :math:`j` starts a tie group
   if :math:`j = 0` or :math:`e_{j-1} = 0`, and ends one if :math:`j = n - 1`
   or :math:`e_j = 0`.  The group's first position is the last start at or
   before :math:`j`; its last position is the first end at or after :math:`j`
   (the last start at or before :math:`n-1-j` in the reversed sequence).  Both
   are segmented copy-forward scans (:mod:`.primitives.scan`, Blelloch's tree with a
   Hillis-Steele top: :math:`p + \max(0, p - 14) + 1` product rounds,
   :math:`p = \lceil \log_2 n \rceil`) with flags :math:`f` and values
   :math:`v = j f`.  Then :math:`2 r_j = \mathrm{first}_j + \mathrm{last}_j`,
   an integer (the radix method scans in :math:`\mathbb{Z}_{2^{32}}`, exact for
   :math:`n < 2^{30}`; in the rank step it opens only the products' low
   :func:`midrank_bits`, so :math:`2r` is right modulo :math:`2^q`,
   :math:`2 (n - 1) < 2^q`, and the owners get only those bits).
4. *Unsort.*  The network's swap bits replayed in reverse, or the radix sort's
   last shuffle inverted, put :math:`2r` back in input order.  Source k's
   slice is opened to source k only, point-to-point
   (:func:`.primitives.opening.open_to_owners`): no other party receives any share of it.

Nothing is opened before step 4 but values that are uniformly random
whatever the scores: Beaver-masked differences, one-time-padded rows, and the
radix sort's permutations composed with fresh secret shuffles.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from . import RANK_METHODS, RANK_METHOD_HELP
from .comm import backend
from .encoding import encode_keys, is_float32_exact, limbs_for, share_keys
from .primitives.b2a import bit_to_arithmetic
from .primitives.circuits import EQ_BITS, eq_masked, eq_masked_and_words
from .primitives.inputs import SourceSharing
from .primitives.memory import TRIM_MIN_ROWS, release_free_memory
from .primitives.opening import open_to_all, open_to_owners
from .primitives.dealer import DealerChannel, digit_kind
from .primitives.randomness import Randomness, dealer_randomness
from .primitives.scan import copy_forward, scan_plan
from .sort import BitonicSort, RadixSort, n_stages

__all__ = ["steps", "secure_midranks", "radix_midranks", "key_digits", "twice_midranks_sorted", "reveal_to_owners", "agree_limbs", "limbs_from_shared_bits", "radix_midranks_shared", "rank_step", "midrank_bits", "DIGIT_BITS",
           "next_pow2", "RANK_METHODS", "RANK_METHOD_HELP"]

steps: list = []  # callables (name) told where each step of the rank step ends, in every party (benchmarks)


def _step(name: str) -> None:
    for tell in steps:
        tell(name)


SCAN_AHEAD = 4  # the mid-rank scan's triple batches asked for ahead of their use
DIGIT_BITS = 2  # bits per digit of the radix sort (one-hot columns per digit: 2^DIGIT_BITS - 1)


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _ask_for_equality(rnd, limbs: int, n: int, bits: int = EQ_BITS) -> None:
    """Ask the dealer at once for all the randomness of :func:`.primitives.circuits.eq_masked`
    on (limbs, n) differences of ``bits`` bits: the masks, then the AND triples (one batch
    per AND round, as it takes them)."""
    rounds = eq_masked_and_words(limbs, n, bits)
    rnd.reserve({})
    rnd.channel.plan_triples([limbs * n], "eq32", now=True)
    rnd.channel.plan_triples(rounds, "binary", ahead=len(rounds), now=True)


def midrank_bits(n: int) -> int:
    """The bits of 2 x mid-rank (0-based) among n rows: 2 x mid-rank <= 2 (n - 1)."""
    return max(1, (2 * n - 2).bit_length())


def twice_midranks_sorted(keys_sorted: torch.Tensor, rnd, dtype=torch.int64, window: bool = False) -> torch.Tensor:
    """Shares of 2 x mid-rank (0-based) of each row of integer-encoded keys in ascending order,
    given as this party's (n,) or (n, limbs) int64 shares; ``rnd`` (a
    :class:`.sort.Randomness`) supplies the products' triples.  The scan and the
    result are in the ring of ``dtype`` (int32: Z_2^32, enough for n < 2^30).
    ``window`` (int32 only): the result is right mod 2^:func:`midrank_bits` only (its
    exact value; higher bits are not), and the scan's products open only those bits."""
    rank = backend.rank()
    keys = keys_sorted.reshape(keys_sorted.shape[0], -1)
    n = keys.shape[0]
    one = 1 if rank == 0 else 0
    if n == 1:
        return torch.zeros(1, dtype=dtype)
    d = (keys[1:] - keys[:-1]).t().contiguous()  # (limbs, n - 1)
    # every batch of randomness of the equality test asked for now (the same batches, one per AND round):
    # the dealer's answers travel while the parties work, instead of a request and an answer ahead of
    # each round; the scan's first batches are computed meanwhile, the rest four batches ahead (two
    # combine rounds)
    kinds = ("pair32", "mul32") if dtype == torch.int32 else ("pair", "mul")
    bits = midrank_bits(n) if window and dtype == torch.int32 else None
    _ask_for_equality(rnd, d.shape[0], n - 1)  # no new request if asked for already
    rnd.channel.plan_triples([n - 1], "b2a", now=True)
    for kind, sizes in zip(kinds, scan_plan(2, n)):
        if bits is not None:  # the products are needed mod 2^bits: so are their corrections
            rnd.channel.narrow(kind, bits)
        rnd.channel.plan_triples(sizes, kind, ahead=SCAN_AHEAD, now=True)
    eq = bit_to_arithmetic(eq_masked(d, rnd), n - 1, rnd).to(dtype)  # mod 2^32
    del d
    starts = one - eq  # row j + 1 starts a tie group
    first = torch.full((1,), one, dtype=dtype)
    # row 0: group starts, forward; row 1: group ends, on the reversed sequence
    f = torch.stack([torch.cat([first, starts]), torch.cat([first, starts.flip(0)])])
    del eq, starts
    pos = torch.arange(n, dtype=dtype)
    v = f * torch.stack([pos, pos.flip(0)])
    # the scan's triples batch by batch, each asked for four batches ahead (planned above; in one batch,
    # the dealer would hold the whole scan's: about 10 n words per stream, 6 GB at n = 2^20 in Z_2^64)
    rnd.reserve({})
    out = copy_forward(f, v, rnd, bits=bits)
    return out[0] + out[1].flip(0)


def secure_midranks(keys: torch.Tensor, progress=None) -> torch.Tensor:
    """2 x global mid-rank (0-based) of every row of the shared keys, in input order,
    by the bitonic network.

    ``keys``: this party's (m, limbs) int64 shares of integer-encoded keys, every
    limb in a 32-bit range (:func:`.encoding.share_keys`).  Padded internally to
    a power of two with public keys (added to rank 0's share).
    ``progress(stage, n_stages)`` is called after each of the sort's stages, the
    mid-rank step and each unsort stage.  Returns this party's (m,) int64
    shares; opens nothing.
    """
    from .encoding import pad_keys

    rank = backend.rank()
    m = keys.shape[0]
    n = next_pow2(m)
    if n > m:
        pad = torch.from_numpy(pad_keys(n - m, keys.shape[1]))
        keys = torch.cat([keys, pad if rank == 0 else torch.zeros_like(pad)])
    s = n_stages(n)
    total = 2 * s + 1

    def report(offset):
        if progress is None:
            return None
        return lambda stage, _stages: progress(offset + stage, total)

    sorter = BitonicSort()
    with dealer_randomness() as rnd:
        keys_sorted = sorter.sort(keys, rnd, progress=report(0))
        _step("sorting network")
        twice_sorted = twice_midranks_sorted(keys_sorted, rnd)
        _step("mid-rank scan")
        if progress is not None:
            progress(s + 1, total)
        twice = sorter.unsort(twice_sorted, rnd, progress=report(s + 1))
        _step("unsort")
    return twice[:m]


def key_digits(keys: np.ndarray, digit: int, bits: int) -> np.ndarray:
    """Digit ``digit`` (bits ``digit*bits ..``, least significant first) of the
    unsigned form of integer keys (n, limbs) from :func:`.encoding.encode_keys`: the
    first limb offset by 2^31 (to [0, 2^32)), limbs concatenated most significant
    first.  Returns (n,) int64 values in [0, 2^bits)."""
    limbs = keys.shape[1]
    value = np.zeros(keys.shape[0], dtype=np.int64)
    for t in range(bits):
        q = digit * bits + t
        if q >= 32 * limbs:
            break
        col = limbs - 1 - q // 32
        limb = keys[:, col] + ((1 << 31) if col == 0 else 0)
        value |= ((limb >> (q % 32)) & 1) << t
    return value


def radix_midranks(local_keys, sizes, sources, limbs: int, *, digit_bits: int = DIGIT_BITS, progress=None,
                   sharing: SourceSharing | None = None, channel: DealerChannel | None = None,
                   window: bool = False):
    """2 x global mid-rank (0-based) of every row, in input order, by the radix sort
    (:mod:`.sort.radix`).  ``local_keys``: this party's (n, limbs) keys if it is a
    source.  Returns this party's (M,) int64 shares; opens only shuffled permutations.
    ``window``: right mod 2^:func:`midrank_bits` only (:func:`twice_midranks_sorted`)."""
    rank = backend.rank()
    sharing = SourceSharing(sizes, sources) if sharing is None else sharing
    mine = rank in sources
    keys = sharing.share(local_keys if mine else None, limbs, "keys")
    _step("sharing")

    def digits(l):
        local = key_digits(local_keys, l, digit_bits) if mine else None
        return sharing.share(local, 1, ("digit", l))

    return radix_midranks_shared(keys, digits, limbs, digit_bits=digit_bits, progress=progress, channel=channel,
                                 window=window)


def radix_midranks_shared(keys: torch.Tensor, digits, limbs: int, *, digit_bits: int = DIGIT_BITS, progress=None,
                          dtype=torch.int32, channel: DealerChannel | None = None, window: bool = False):
    """:func:`radix_midranks` on keys already shared: ``keys`` this party's (M, limbs)
    shares, ``digits(l)`` its (M, 1) shares of digit ``l``'s value
    (:func:`key_digits`; only its value mod 2^digit_bits counts).  Returns this party's
    (M,) shares of 2 x mid-rank in the ring of ``dtype`` (int32: Z_2^32, as the openings
    to owners need; int64: Z_2^64, as CrypTen's tensors need)."""
    sorter = RadixSort(digit_bits=digit_bits, channel=channel)
    key_bits = 32 * limbs
    rounds = sorter.rounds(key_bits)
    total = rounds + 2
    m = keys.shape[0]

    def ask_for_equality(rnd):  # the mid-rank step's first triples, computed during the last digit round
        if m > 1:
            _ask_for_equality(rnd, limbs, m - 1)

    # the mid-rank step tests neighbours' keys for equality on EQ_BITS bits: the last shuffle carries no more
    keys_sorted = sorter.sort(digits, key_bits, keys, progress=None if progress is None else
                              (lambda r, _n: progress(r, total)), then=ask_for_equality, carry_bits=EQ_BITS)
    _step("digit rounds")
    if keys.shape[0] >= TRIM_MIN_ROWS:  # memory, not time, limits runs this large
        release_free_memory()
    twice_sorted = twice_midranks_sorted(keys_sorted, sorter.randomness, dtype, window)
    del keys_sorted
    _step("mid-rank scan")
    if progress is not None:
        progress(rounds + 1, total)
    twice = sorter.unsort(twice_sorted, midrank_bits(m) if window and dtype == torch.int32 else None)
    _step("unsort")
    if progress is not None:
        progress(total, total)
    return twice


def reveal_to_owners(shares: torch.Tensor, sizes, owners, bits: int | None = None):
    """Open slice k of a shared vector (``sizes[k]`` rows, in order) to party
    ``owners[k]`` only, point-to-point (:func:`.primitives.opening.open_to_owners`;
    ``bits``: int32 shares, the values mod 2^bits only).

    Returns this party's slice as an int64 array (concatenated if it owns
    several), or None."""
    mine = open_to_owners(shares.reshape(-1), sizes, owners, bits=bits)
    return None if mine is None else mine.numpy().astype(np.int64)


def agree_limbs(scores, sizes, sources, sharing: SourceSharing | None = None,
                channel: DealerChannel | None = None, prefetch: tuple[str, int] | None = None) -> int:
    """Every party learns the number of key limbs (:func:`.encoding.limbs_for`) and
    nothing else: each source secret-shares the bit "my scores are not
    float32-exact"; the parties add the bits in shares, test the count for zero
    with one secure equality test (:func:`.primitives.circuits.eq_masked`, dealer
    randomness) and open only that result, to everyone.  ``sharing``: the sources'
    seeds already sent (:class:`.primitives.inputs.SourceSharing`), else sent now;
    ``channel``, ``prefetch``: :func:`limbs_from_shared_bits`'s."""
    rank = backend.rank()
    mine = None
    if rank in sources:
        mine = np.array([[0 if is_float32_exact(scores) else 1]], dtype=np.int64)
    ones = [1] * len(sources)
    bits = (sharing.resized(ones) if sharing is not None else SourceSharing(ones, sources)).share(mine, 1, "float32-exact")
    return limbs_from_shared_bits(bits, channel, prefetch)


def limbs_from_shared_bits(bits: torch.Tensor, channel: DealerChannel | None = None,
                           prefetch: tuple[str, int] | None = None) -> int:
    """The number of key limbs from shares of one "not float32-exact" bit per source
    (any shape): opens only whether their sum is zero, to every computing party.
    ``channel``: the dealer's, already set up and left open (else one for the test alone);
    ``prefetch`` (kind, n): on it, ask for the first batch of that randomness too, after the
    test's (the radix sort's first digit round's: the dealer computes it during the test)."""
    count = bits.reshape(-1).sum().reshape(1, 1)  # (limbs = 1, n = 1): number of sources with float64 scores
    # 0 <= count <= sources < 2^width: the test needs only the count's low `width` bits, an AND
    # tree over width bits instead of 32 (4 AND rounds fewer for 2 sources)
    width = bits.numel().bit_length()
    with (contextlib.nullcontext(Randomness(channel)) if channel is not None else dealer_randomness()) as rnd:
        _ask_for_equality(rnd, 1, 1, width)
        if prefetch is not None and channel is not None:
            channel.plan_triples([prefetch[1]], prefetch[0], now=True)
        none = eq_masked(count, rnd, width) & 1  # XOR shares of [count == 0], bit 0 only
    all_float32 = int(open_to_all(none)[0]) & 1
    return limbs_for([all_float32])


def rank_step(scores, client_sizes: list[int], rank: int, *, method: str = RANK_METHODS[0], progress=None,
              first_client: int = 1):
    """Run the whole rank step as party ``rank``; return this client's 2 x mid-ranks (or None).

    Client k (holding ``client_sizes[k]`` scores) is party ``first_client + k``;
    other parties pass ``scores=None``.
    """
    if method not in RANK_METHODS:
        raise ValueError(f"unknown rank method {method!r}; choose from {RANK_METHODS}")
    sources = [first_client + k for k in range(len(client_sizes))]
    # the radix method's seeds and dealer channel serve the limbs' test too: each set up once
    sharing = channel = bits = prefetch = None
    if method == "radix":
        sharing = SourceSharing(client_sizes, sources, wait=False)  # the seeds travel with the dealer's
        channel = DealerChannel()
        # the first digit round's randomness is asked for during the limbs' test, narrowed as the sort will
        kind = digit_kind(DIGIT_BITS, backend.world_size())
        channel.narrow(kind, RadixSort(DIGIT_BITS).window(sum(client_sizes)))
        prefetch = (kind, sum(client_sizes))
    limbs = agree_limbs(scores, client_sizes, sources, sharing, channel, prefetch=prefetch)
    local = encode_keys(scores, limbs) if rank in sources else None
    if method == "radix":
        # right mod 2^bits only, the bits of 2 x mid-rank: the scan and the opening send no more
        bits = midrank_bits(sum(client_sizes))
        twice = radix_midranks(local, client_sizes, sources, limbs, progress=progress, sharing=sharing,
                               channel=channel, window=True)
    else:
        keys = share_keys(local, client_sizes, sources, limbs)
        _step("sharing")
        twice = secure_midranks(keys, progress=progress)
    mine = reveal_to_owners(twice, client_sizes, sources, bits)
    _step("opening to owners")
    return mine
