"""The rank step's sorts, chosen by name here and nowhere else.

Each sort implements :class:`RankSort`: its name, what it opens (and what it assumes: the
help of ``--sort``), its rounds (the digit rounds whose columns the inputs carry), the
oblivious sort itself (:meth:`RankSort.sorter`: ``sort`` and ``unsort``) and the rank
step's core over it (:meth:`RankSort.midranks`: sort, mid-ranks in sorted order, unsort).
The command line, the configuration file, the launchers, the services, the CrypTen
bridge and the rank step look a sort up with :func:`rank_sort`; adding one is a class
here and its module in this folder.

This module imports neither torch nor CrypTen (the command line reads the names): a
sort's implementation is imported when it is used.

Examples
--------
>>> from secure_auc.mpc.sort.registry import RANK_METHODS, rank_sort
>>> RANK_METHODS
('radix', 'network')
>>> rank_sort("radix").columns(1), rank_sort("network").columns(2)
((16, 17), (0, 2))
>>> rank_sort("quick")
Traceback (most recent call last):
    ...
secure_auc.validation.InputError: unknown rank method 'quick'; choose from radix, network
"""

from __future__ import annotations

from ...validation import InputError
from .digits import digit_rounds

__all__ = ["RankSort", "SORTS", "RANK_METHODS", "RANK_METHOD_HELP", "rank_sort", "rank_method_help"]


class RankSort:
    """What the rank step needs of an oblivious sort (the interface every sort implements).

    Attributes
    ----------
    name : str
        Its name (``--sort``, ``sort =`` in a configuration, ``sort=`` in the API).
    opens : str
        What it opens, to whom, and what it assumes (the help of ``--sort``).
    digits : bool
        Whether it sorts by digits that the inputs carry (:meth:`rounds` columns).
    """

    name: str = ""
    opens: str = ""
    digits: bool = False

    def rounds(self, limbs: int) -> int:
        """Its digit rounds over keys of ``limbs`` 32-bit limbs: columns the inputs carry besides the keys."""
        return 0

    def columns(self, limbs: int) -> tuple[int, int]:
        """(digit rounds, columns an input party shares per row): the key limbs, then a digit per round."""
        rounds = self.rounds(limbs)
        return rounds, limbs + rounds

    def sorter(self, **options):
        """The oblivious sort itself: an object with ``sort`` (shares in sorted order) and ``unsort``
        (shares of another vector back in input order)."""
        raise NotImplementedError

    def midranks(self, keys, digits, limbs: int, *, progress=None, dtype=None, window: bool = False):
        """This party's shares of 2 x the 0-based mid-rank of every row of the shared ``keys``, in input
        order: sort, mid-ranks in sorted order, unsort.  ``digits(l)``: shares of digit ``l``'s column
        (sorts with :attr:`digits`); ``dtype`` (a torch dtype) and ``window``: the ring of the result
        and whether only its :func:`.midranks.midrank_bits` low bits must be right, where the sort can."""
        raise NotImplementedError

    def setup(self, sizes, sources):
        """What the rank step from the sources' own scores sets up before the limbs' test:
        ``(sharing, channel, prefetch)`` for :func:`secure_auc.mpc.ranks.agree_limbs` (None each: its own)."""
        return None, None, None

    def from_sources(self, local_keys, sizes, sources, limbs: int, *, progress=None, sharing=None, channel=None):
        """The rank step's core on the sources' own keys (``local_keys``: this party's (n, limbs) if it is a
        source): ``(shares of 2 x mid-ranks in input order, bits)``, ``bits`` those of the result that are
        right (None: all) for the opening to the owners."""
        raise NotImplementedError

    def seconds(self, m: int, parties: int) -> float:
        """Rough seconds of its rank step over ``m`` rows among ``parties`` computing parties on the
        2-core reference machine (docs/benchmarks.md)."""
        raise NotImplementedError


class RadixSort(RankSort):
    name = "radix"
    opens = ("oblivious radix sort composing secret permutations digit by digit; opens only freshly "
             "shuffled, uniformly random permutations; the shuffles' correlated randomness comes from "
             "the triples' provider (the dealer with ttp, the server with tfp), which must not collude "
             "with a computing party, as for the triples; O(M) per digit, fastest (default)")
    digits = True

    def rounds(self, limbs: int) -> int:
        return digit_rounds(limbs)  # the sorter's own digits (:data:`.digits.DIGIT_BITS`), with no torch loaded

    def sorter(self, **options):
        from .radix import RadixSort as Sort

        return Sort(**options)  # digit_bits: its default, the rank step's

    def midranks(self, keys, digits, limbs: int, *, progress=None, dtype=None, window: bool = False):
        from .midranks import radix_midranks_shared

        ring = {} if dtype is None else {"dtype": dtype}
        return radix_midranks_shared(keys, digits, limbs, progress=progress, window=window, **ring)

    def setup(self, sizes, sources):
        # the sources' seeds and the dealer's channel serve the limbs' test too: each set up once
        from ..comm import backend
        from ..primitives.dealer import DealerChannel, digit_kind
        from ..primitives.inputs import SourceSharing

        sharing = SourceSharing(sizes, sources, wait=False)  # the seeds travel with the dealer's
        channel = DealerChannel()
        # the first digit round's randomness is asked for during the limbs' test, narrowed as the sort will
        sorter = self.sorter()
        kind = digit_kind(sorter.digit_bits, backend.world_size())
        channel.narrow(kind, sorter.window(sum(sizes)))
        return sharing, channel, (kind, sum(sizes))

    def from_sources(self, local_keys, sizes, sources, limbs: int, *, progress=None, sharing=None, channel=None):
        from .midranks import midrank_bits, radix_midranks

        # right mod 2^bits only, the bits of 2 x mid-rank: the scan and the opening send no more
        twice = radix_midranks(local_keys, sizes, sources, limbs, progress=progress, sharing=sharing,
                               channel=channel, window=True)
        return twice, midrank_bits(sum(sizes))

    def seconds(self, m: int, parties: int) -> float:
        # 16 digit rounds for float32 keys (32 for float64), each linear in M, and every
        # shuffle has one pass per party; on the idle machine over the TLS links
        # (docs/benchmarks.md) 2^20 scores: 6.9-7.9 s among 2 parties, 8.5-10.8 s among 3;
        # 458,407 among 3: 4.8 s; 4,584,062 among 3: 53 s
        return 0.2 + 7.5e-6 * m * (parties - 1) ** 0.3


class NetworkSort(RankSort):
    name = "network"
    opens = ("Batcher's bitonic sorting network on 33-bit comparisons: multiplications and masked "
             "openings only, nothing beyond the triples' provider; O(M log^2 M), the reference")

    def sorter(self, **options):
        from .bitonic import BitonicSort

        return BitonicSort(**options)

    def midranks(self, keys, digits, limbs: int, *, progress=None, dtype=None, window: bool = False):
        from .midranks import secure_midranks

        return secure_midranks(keys, progress=progress)  # in Z_2^64, every bit right

    def from_sources(self, local_keys, sizes, sources, limbs: int, *, progress=None, sharing=None, channel=None):
        from ..encoding import share_keys
        from .midranks import mark_step, secure_midranks

        keys = share_keys(local_keys, sizes, sources, limbs)
        mark_step("sharing")
        return secure_midranks(keys, progress=progress), None

    def seconds(self, m: int, parties: int) -> float:
        n = 1 << max(0, (m - 1).bit_length())
        p = max(1, n.bit_length() - 1)
        stages = p * (p + 1) // 2
        # per stage: latency plus a cost per compared pair (2^16: 1.9 s, 4.9 s for 2, 3 parties;
        # 2^20: 40 s, 64 s)
        latency, per_pair = 0.002 * (parties - 1) ** 3, 3.6e-7 * (parties - 1) ** 0.6
        return stages * (latency + per_pair * n / 2)


SORTS: dict[str, RankSort] = {s.name: s for s in (RadixSort(), NetworkSort())}  # the first is the default
RANK_METHODS = tuple(SORTS)
RANK_METHOD_HELP = {name: s.opens for name, s in SORTS.items()}


def rank_sort(name: str) -> RankSort:
    """The sort called ``name``.

    Raises
    ------
    InputError
        Naming the sorts there are, for any other name.
    """
    try:
        return SORTS[name]
    except (KeyError, TypeError):
        raise InputError(f"unknown rank method {name!r}; choose from {', '.join(SORTS)}") from None


def rank_method_help() -> str:
    """One help line naming every rank method and what it assumes."""
    return "secure rank method: " + "; ".join(f"{k} = {v}" for k, v in RANK_METHOD_HELP.items())
