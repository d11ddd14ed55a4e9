"""A deterministic click-through-like evaluation set (the built-in dataset).

The paper's Criteo evaluation sets are not distributed with it.  The stand-in
is binormal: latent values z ~ N(0, 1) for negatives and N(d, 1) for
positives with d = sqrt(2) * Phi^-1(AUC), whose population AUC is exactly
``auc``.  Scores are ``sigmoid(z + b)``, rounded to float32 as a model's
output would be, with the offset ``b`` chosen so that the mean score is about
the base rate.  A monotone map does not change the AUC; the float32 rounding
creates a few exact ties, as real model outputs do.

Defaults match the paper's small Criteo evaluation set (Table "Statistics of
Two Criteo Evaluation Sets"): M = 458,407, P = 117,317, N = 341,090, and the
first-epoch AUC 0.7494.  ``CRITEO_LARGE`` is the 10x larger set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, logit

from ..validation import InputError

__all__ = ["DatasetSpec", "CRITEO_SMALL", "CRITEO_LARGE", "make_ctr_dataset"]


@dataclass(frozen=True)
class DatasetSpec:
    samples: int
    positives: int
    auc: float


CRITEO_SMALL = DatasetSpec(samples=458_407, positives=117_317, auc=0.7494)
CRITEO_LARGE = DatasetSpec(samples=4_584_062, positives=1_173_981, auc=0.7505)


def make_ctr_dataset(
    samples: int = CRITEO_SMALL.samples,
    positives: int | None = None,
    *,
    base_rate: float | None = None,
    auc: float = CRITEO_SMALL.auc,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(scores, labels)``: float32 scores in (0, 1) and int8 labels.

    Give either ``positives`` (an exact count) or ``base_rate``; with neither,
    the paper's base rate P/M = 117,317/458,407 is used.  The same arguments
    always give the same data.
    """
    if samples < 2:
        raise InputError(f"samples must be at least 2, got {samples}")
    if not (0.5 <= auc < 1.0):
        raise InputError(f"auc must be in [0.5, 1), got {auc}")
    if positives is None:
        rate = CRITEO_SMALL.positives / CRITEO_SMALL.samples if base_rate is None else base_rate
        if not (0.0 < rate < 1.0):
            raise InputError(f"base_rate must be in (0, 1), got {rate}")
        positives = int(round(rate * samples))
    positives = int(positives)
    if not (1 <= positives <= samples - 1):
        raise InputError(
            f"positives must be between 1 and samples - 1 = {samples - 1}, got {positives}"
        )
    rng = np.random.default_rng(seed)
    labels = np.zeros(samples, dtype=np.int8)
    labels[rng.choice(samples, size=positives, replace=False)] = 1
    from scipy.stats import norm  # here, not at import: scipy.stats costs ~1 s of every process's start

    d = math.sqrt(2.0) * norm.ppf(auc)
    z = rng.standard_normal(samples) + d * labels
    pi = positives / samples
    offset = logit(pi) - d * pi
    scores = expit(z + offset).astype(np.float32)
    return scores, labels
