"""The server's estimator: from aggregated (noisy) sums to the AUC.

    globalSum = sum_k localSum'_k,  P_bar = sum_k localP'_k,  N_bar = M - P_bar,
    AUC = (globalSum - P_bar (P_bar - 1) / 2) / (P_bar N_bar)      (paper, eq. 1)

and, for randomized response, the debiasing of :mod:`secure_auc.dp.randomized_response`.
Vectorised: every argument may be an array of repetitions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dp.mechanisms import RandomizedResponse
from .dp.randomized_response import debias_auc
from .metrics import auc_from_sums

__all__ = ["Estimate", "estimate_auc"]


@dataclass(frozen=True)
class Estimate:
    auc: np.ndarray  # the estimate reported (debiased for RR)
    raw_auc: np.ndarray  # eq. (1) on the aggregated statistics (the "noisy AUC" for RR)
    global_sum: np.ndarray
    positives: np.ndarray


def estimate_auc(global_sum, positives, total: int, mechanism) -> Estimate:
    global_sum = np.asarray(global_sum, dtype=np.float64)
    p = np.asarray(positives, dtype=np.float64)
    raw = auc_from_sums(global_sum, p, total - p)
    if isinstance(mechanism, RandomizedResponse):
        auc = debias_auc(raw, p, total - p, mechanism.epsilon).auc
    else:
        auc = raw
    return Estimate(auc=auc, raw_auc=raw, global_sum=global_sum, positives=p)
