r"""The rank step's core, for either sort: shared keys -> sorted -> 2 x mid-ranks in sorted order ->
unsorted (:mod:`secure_auc.mpc.ranks` explains the steps; :mod:`.registry` chooses the sort).

* :func:`twice_midranks_sorted` -- the mid-ranks of keys in ascending order (both sorts);
* :func:`secure_midranks` -- the bitonic network's sort, mid-ranks and unsort;
* :func:`radix_midranks` / :func:`radix_midranks_shared` -- the radix sort's, from the
  sources' keys and digits (:func:`key_digits`) or from shares of them.
"""

from __future__ import annotations

import torch

from ..comm import backend
from ..primitives.b2a import bit_to_arithmetic
from ..primitives.circuits import EQ_BITS, eq_masked, eq_masked_and_words
from ..primitives.inputs import SourceSharing
from ..primitives.memory import TRIM_MIN_ROWS, release_free_memory
from ..primitives.dealer import DealerChannel
from ..primitives.randomness import dealer_randomness
from ..primitives.scan import copy_forward, scan_plan
from .bitonic import BitonicSort, n_stages
from .digits import DIGIT_BITS, key_digits
from .radix import RadixSort

__all__ = ["steps", "mark_step", "SCAN_AHEAD", "DIGIT_BITS", "next_pow2", "ask_for_equality", "midrank_bits",
           "twice_midranks_sorted", "secure_midranks", "key_digits", "radix_midranks", "radix_midranks_shared"]

steps: list = []  # callables (name) told where each step of the rank step ends, in every party (benchmarks)


def mark_step(name: str) -> None:
    """Tell every callable of :data:`steps` that step ``name`` of the rank step ended here."""
    for tell in steps:
        tell(name)


SCAN_AHEAD = 4  # the mid-rank scan's triple batches asked for ahead of their use


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def ask_for_equality(rnd, limbs: int, n: int, bits: int = EQ_BITS) -> None:
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
    :class:`..primitives.randomness.Randomness`) supplies the products' triples.  The scan and the
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
    ask_for_equality(rnd, d.shape[0], n - 1)  # no new request if asked for already
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
    limb in a 32-bit range (:func:`..encoding.share_keys`).  Padded internally to
    a power of two with public keys (added to rank 0's share).
    ``progress(stage, n_stages)`` is called after each of the sort's stages, the
    mid-rank step and each unsort stage.  Returns this party's (m,) int64
    shares; opens nothing.
    """
    from ..encoding import pad_keys

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
        mark_step("sorting network")
        twice_sorted = twice_midranks_sorted(keys_sorted, rnd)
        mark_step("mid-rank scan")
        if progress is not None:
            progress(s + 1, total)
        twice = sorter.unsort(twice_sorted, rnd, progress=report(s + 1))
        mark_step("unsort")
    return twice[:m]


def radix_midranks(local_keys, sizes, sources, limbs: int, *, digit_bits: int = DIGIT_BITS, progress=None,
                   sharing: SourceSharing | None = None, channel: DealerChannel | None = None,
                   window: bool = False):
    """2 x global mid-rank (0-based) of every row, in input order, by the radix sort
    (:mod:`.radix`).  ``local_keys``: this party's (n, limbs) keys if it is a
    source.  Returns this party's (M,) int64 shares; opens only shuffled permutations.
    ``window``: right mod 2^:func:`midrank_bits` only (:func:`twice_midranks_sorted`)."""
    rank = backend.rank()
    sharing = SourceSharing(sizes, sources) if sharing is None else sharing
    mine = rank in sources
    keys = sharing.share(local_keys if mine else None, limbs, "keys")
    mark_step("sharing")

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

    def equality_first(rnd):  # the mid-rank step's first triples, computed during the last digit round
        if m > 1:
            ask_for_equality(rnd, limbs, m - 1)

    # the mid-rank step tests neighbours' keys for equality on EQ_BITS bits: the last shuffle carries no more
    keys_sorted = sorter.sort(digits, key_bits, keys, progress=None if progress is None else
                              (lambda r, _n: progress(r, total)), then=equality_first, carry_bits=EQ_BITS)
    mark_step("digit rounds")
    if keys.shape[0] >= TRIM_MIN_ROWS:  # memory, not time, limits runs this large
        release_free_memory()
    twice_sorted = twice_midranks_sorted(keys_sorted, sorter.randomness, dtype, window)
    del keys_sorted
    mark_step("mid-rank scan")
    if progress is not None:
        progress(rounds + 1, total)
    twice = sorter.unsort(twice_sorted, midrank_bits(m) if window and dtype == torch.int32 else None)
    mark_step("unsort")
    if progress is not None:
        progress(total, total)
    return twice
