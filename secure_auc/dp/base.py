"""The contract every label-DP mechanism meets, and what it produces.

A mechanism is one privacy event per evaluation (in the style of Google's
dp-accounting: the mechanism says what it spends, an accountant composes):

* :attr:`Mechanism.cost` — the (eps, delta)-label-DP spent by one evaluation;
* :meth:`Mechanism.prepare_labels` — what the client does to its labels before
  anything leaves it (randomized response flips them; others keep them);
* :meth:`Mechanism.privatize` — the client's noisy (localSum'_k, localP'_k)
  from its exact statistics (vectorised over clients and repetitions);
* :meth:`Mechanism.estimate` — the server's estimator on the aggregated sums:
  eq. (1) of the paper, AUC = (globalSum - P (P - 1) / 2) / (P N), debiased
  where the mechanism needs it;
* :attr:`Mechanism.needs_secure_sum` — True when the noise protects only the
  aggregate (it must be summed in shares: MPC protocol only);
* :meth:`Mechanism.describe` — the parameters a report shows.

Concrete mechanisms: :mod:`.mechanisms` (none, RR, Laplace/Gaussian with every
allocation of the paper) and :mod:`.distributed` (noise on the aggregate);
:mod:`.registry` builds them by name.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from ..local_stats import LocalStatistics
from ..metrics import auc_from_sums
from ..validation import InputError

__all__ = ["PrivacyCost", "NoisyStatistics", "Estimate", "Mechanism", "estimate_auc"]


@dataclass(frozen=True)
class PrivacyCost:
    """(eps, delta)-label-DP spent by one evaluation."""

    epsilon: float
    delta: float = 0.0


@dataclass(frozen=True)
class NoisyStatistics:
    """What a client releases: localSum'_k, localP'_k and its public size n_k."""

    local_sum: np.ndarray
    local_p: np.ndarray
    n: np.ndarray


@dataclass(frozen=True)
class Estimate:
    """The server's estimate from the aggregated sums (arrays: one per repetition)."""

    auc: np.ndarray  # the estimate reported (debiased for RR)
    raw_auc: np.ndarray  # eq. (1) on the aggregated statistics (the "noisy AUC" for RR)
    global_sum: np.ndarray
    positives: np.ndarray


class Mechanism(abc.ABC):
    """A label-DP mechanism of the evaluation (see the module docstring)."""

    name: str = ""
    needs_secure_sum: bool = False

    @property
    @abc.abstractmethod
    def cost(self) -> PrivacyCost:
        """The privacy event one evaluation spends."""

    def prepare_labels(self, labels, rng: np.random.Generator) -> np.ndarray:
        """The labels the client computes its statistics on (default: its own)."""
        return np.asarray(labels, dtype=np.int8)

    @abc.abstractmethod
    def privatize(self, stats: LocalStatistics, rng: np.random.Generator, reps: int | None = None,
                  *, total: int | None = None) -> NoisyStatistics:
        """Noisy statistics of every client in ``stats``: shape (K,), or (reps, K)."""

    def estimate(self, global_sum, positives, total: int) -> Estimate:
        """Eq. (1) on the aggregated sums (vectorised over repetitions)."""
        global_sum = np.asarray(global_sum, dtype=np.float64)
        p = np.asarray(positives, dtype=np.float64)
        raw = auc_from_sums(global_sum, p, total - p)
        return Estimate(auc=raw, raw_auc=raw, global_sum=global_sum, positives=p)

    def exact_p_sensitivity(self, stats: LocalStatistics, total: int) -> np.ndarray:
        """Per-client sensitivity of localSum when P and N are released exactly (the paper's
        appendix variant); only the split allocation defines it."""
        raise InputError("exact P and N (the paper's appendix variant) applies to GlobalLaplace and "
                         "LocalLaplace (the split allocation) only")

    def describe(self) -> dict:
        """The parameters a report shows: mechanism, epsilon, delta, allocation, sensitivity."""
        return {"mechanism": self.name, "epsilon": None, "delta": None, "allocation": None, "sensitivity": None}


def estimate_auc(global_sum, positives, total: int, mechanism: Mechanism) -> Estimate:
    """The server's estimate from the aggregated sums: :meth:`Mechanism.estimate`."""
    return mechanism.estimate(global_sum, positives, total)
