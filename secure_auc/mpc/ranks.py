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

from .comm import backend
from .encoding import encode_keys, is_float32_exact, limbs_for
from .primitives.circuits import eq_masked
from .primitives.inputs import SourceSharing
from .primitives.opening import open_to_all, open_to_owners
from .primitives.dealer import DealerChannel
from .primitives.randomness import Randomness, dealer_randomness
from .sort.midranks import (DIGIT_BITS, ask_for_equality, key_digits, mark_step, midrank_bits, next_pow2,
                            radix_midranks, radix_midranks_shared, secure_midranks, steps, twice_midranks_sorted)
from .sort.registry import RANK_METHOD_HELP, RANK_METHODS, rank_sort

__all__ = ["steps", "secure_midranks", "radix_midranks", "key_digits", "twice_midranks_sorted", "reveal_to_owners",
           "agree_limbs", "limbs_from_shared_bits", "radix_midranks_shared", "rank_step", "midrank_bits", "DIGIT_BITS",
           "next_pow2", "RANK_METHODS", "RANK_METHOD_HELP"]


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
        ask_for_equality(rnd, 1, 1, width)
        if prefetch is not None and channel is not None:
            channel.plan_triples([prefetch[1]], prefetch[0], now=True)
        none = eq_masked(count, rnd, width) & 1  # XOR shares of [count == 0], bit 0 only
    all_float32 = int(open_to_all(none)[0]) & 1
    return limbs_for([all_float32])


def rank_step(scores, client_sizes: list[int], rank: int, *, method: str = RANK_METHODS[0], progress=None,
              first_client: int = 1):
    """Run the whole rank step as party ``rank``; return this client's 2 x mid-ranks (or None).

    Client k (holding ``client_sizes[k]`` scores) is party ``first_client + k``;
    other parties pass ``scores=None``; ``method``: the sort (:mod:`.sort.registry`).
    """
    sort = rank_sort(method)
    sources = [first_client + k for k in range(len(client_sizes))]
    sharing, channel, prefetch = sort.setup(client_sizes, sources)
    limbs = agree_limbs(scores, client_sizes, sources, sharing, channel, prefetch=prefetch)
    local = encode_keys(scores, limbs) if rank in sources else None
    twice, bits = sort.from_sources(local, client_sizes, sources, limbs, progress=progress, sharing=sharing,
                                    channel=channel)
    mine = reveal_to_owners(twice, client_sizes, sources, bits)
    mark_step("opening to owners")
    return mine
