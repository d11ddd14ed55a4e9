"""FedAUC_RR: randomized response on labels, and the server's debiasing.

Randomized response (Warner 1965) keeps each label with probability
e^eps / (1 + e^eps) and flips it with probability

    rho = 1 / (1 + e^eps),

which is eps-label-DP for each label; the flipped labels can be reused for any
number of evaluations at no further privacy cost.

The AUC computed on flipped labels ("noisy AUC") is biased towards 1/2.  With
flip rates rho+ (positives) and rho- (negatives), Menon et al. (2015) show

    AUC_clean = (AUC_noisy - (a + b) / 2) / (1 - a - b),
    a = (1 - pi) rho- / (pi (1 - rho+) + (1 - pi) rho-),
    b = pi rho+ / (pi rho+ + (1 - pi)(1 - rho-)),

where pi is the clean base rate.  The server does not know pi; it estimates it
from the noisy counts P_bar, N_bar (paper, Appendix "Estimate pi'"):

    P' = (P_bar (1 - rho-) - N_bar rho-) / (1 - rho+ - rho-),
    N' = P_bar + N_bar - P',   pi' = P' / (P' + N').

This is the paper's Algorithm 3, vectorised over repetitions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..validation import check_epsilon
from .discrete import logistic_bernoulli
from .streams import as_uniforms

__all__ = ["flip_probability", "randomized_response", "RRDebias", "debias_auc"]


def flip_probability(epsilon: float) -> float:
    """rho = 1 / (1 + e^eps) as a float (for the server's debiasing); 0 for eps = inf.  The flips
    themselves are drawn with the exact probability (:func:`randomized_response`)."""
    if epsilon == float("inf"):
        return 0.0
    return float(1.0 / (1.0 + np.exp(check_epsilon(epsilon))))


def randomized_response(labels: np.ndarray, epsilon: float, rng, owner=None) -> np.ndarray:
    """Flip each 0/1 label independently with probability exactly 1/(1+e^eps) (eps-label-DP).

    The flips are exact Bernoulli(1/(1+e^eps)) draws with integer arithmetic
    only (:func:`.discrete.logistic_bernoulli`): the probability is the one
    accounted for every eps, including where the float 1/(1+e^eps) underflows.

    Parameters
    ----------
    labels : array-like of 0/1
    epsilon : float
    rng : numpy.random.Generator or secure_auc.dp.streams.Uniforms
        The label stream.
    owner : array-like of int, optional
        With a :class:`~.streams.KeyStreams` of several clients, the client of
        each label (whose stream flips it); default: all from stream 0.

    Returns
    -------
    numpy.ndarray of int8
    """
    check_epsilon(epsilon)
    labels = np.asarray(labels)
    src = as_uniforms(rng)
    who = np.zeros(labels.size, dtype=np.int64) if owner is None else np.asarray(owner, dtype=np.int64).ravel()
    flips = logistic_bernoulli(src, epsilon, labels.shape, owner=who)
    return (labels ^ flips).astype(np.int8)


@dataclass(frozen=True)
class RRDebias:
    """The quantities of Algorithm 3 (arrays when the inputs are arrays)."""

    rho: float
    positives: np.ndarray  # P'
    negatives: np.ndarray  # N'
    base_rate: np.ndarray  # pi'
    alpha: np.ndarray
    beta: np.ndarray
    auc: np.ndarray  # AUC_clean


def debias_auc(noisy_auc, noisy_positives, noisy_negatives, epsilon: float) -> RRDebias:
    """Convert the AUC on flipped labels into an estimate of the clean AUC."""
    rho = flip_probability(epsilon)
    noisy_auc = np.asarray(noisy_auc, dtype=np.float64)
    pb = np.asarray(noisy_positives, dtype=np.float64)
    nb = np.asarray(noisy_negatives, dtype=np.float64)
    p_est = (pb * (1.0 - rho) - nb * rho) / (1.0 - 2.0 * rho)
    n_est = pb + nb - p_est
    with np.errstate(divide="ignore", invalid="ignore"):  # flips that leave no class: inf or nan, reported as such
        pi = p_est / (p_est + n_est)
        a = (1.0 - pi) * rho / (pi * (1.0 - rho) + (1.0 - pi) * rho)
        b = pi * rho / (pi * rho + (1.0 - pi) * (1.0 - rho))
        clean = (noisy_auc - (a + b) / 2.0) / (1.0 - a - b)
    return RRDebias(rho, p_est, n_est, pi, a, b, clean)
