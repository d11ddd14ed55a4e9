"""The messages of the plain-sort protocol (paper, Algorithm 4), one class each.

client -> server  ScoresMessage      the client's scores, shuffled
server -> client  RanksMessage       2 x mid-rank of each of those scores, same order
client -> server  StatisticsMessage  localSum'_k, localP'_k (noisy) and n_k

No message from a client carries a label or a noise value; the server's view
is exactly the list of ScoresMessage and StatisticsMessage it received.  In
the MPC protocol the server receives only an :class:`Aggregate`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "ScoresMessage",
    "RanksMessage",
    "StatisticsMessage",
    "Aggregate",
    "FRACTION_BITS",
    "to_fixed",
    "from_fixed",
]


@dataclass(frozen=True)
class ScoresMessage:
    client: int
    scores: np.ndarray


@dataclass(frozen=True)
class RanksMessage:
    client: int
    twice_ranks: np.ndarray  # int64, 2 * mid-rank, in the order of the client's ScoresMessage
    total: int  # M, public


# Released statistics are fixed-point integers with FRACTION_BITS fractional
# bits (rounding is post-processing, so DP is unaffected).  Integers sum
# exactly, in numpy as in CrypTen's ring Z_2^64, which is what makes the plain
# and the MPC protocol give bit-identical estimates.  2^-8 is far below the
# noise; rank sums up to M^2/2 ~ 2^43 (M = 4.6 million) keep 2^51 < 2^53 so the
# values also convert to float64 exactly.
FRACTION_BITS = 8
SCALE = 1 << FRACTION_BITS


def to_fixed(x) -> np.ndarray:
    """Round to the nearest multiple of 2^-FRACTION_BITS, as int64 (value * 2^FRACTION_BITS)."""
    return np.rint(np.asarray(x, dtype=np.float64) * SCALE).astype(np.int64)


def from_fixed(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64) / SCALE


@dataclass(frozen=True)
class StatisticsMessage:
    """localSum'_k and localP'_k in fixed point (see FRACTION_BITS), and n_k."""

    client: int
    local_sum_fixed: int
    local_p_fixed: int
    n: int


@dataclass(frozen=True)
class Aggregate:
    """The only statistics the server needs: the global noisy sums (fixed point) and M."""

    global_sum_fixed: int
    positives_fixed: int
    total: int

    @property
    def global_sum(self) -> float:
        return float(from_fixed(self.global_sum_fixed))

    @property
    def positives(self) -> float:
        return float(from_fixed(self.positives_fixed))
