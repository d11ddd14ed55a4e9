"""Closed-form variances of the AUC estimates.

Paper, Appendix (exact P and N, only the rank sum noisy):

* RR (eq. "Utility analysis of RR"): with flip probability rho = 1/(1+e^eps),
  Var(sum_i r_i y~_i / (P N)) = rho (1 - rho) sum_i r_i^2 / (P N)^2,
  and with distinct ranks 0..M-1: rho (1 - rho) M (M-1)(2M-1) / 6 / (P N)^2.
* GlobalLaplace: std = sqrt(2 K) (M - 1) / (P N eps_sum).
* LocalLaplace, one sample per client: Var = K (K-1)(2K-1) / (3 P^2 N^2 eps^2).

This project adds the first-order (delta-method) variance of the full
estimator with noisy P, for every statistics mechanism.  Linearising
AUC(S, P) = (S - P(P-1)/2) / (P (M - P)) around the true values,

    dAUC = (dS - g dP) / (P N),   g = P - 1/2 + AUC (N - P),

and with dS = sum_k c1_k s1_k + c2_k s2_k, dP = sum_k s1_k (see
:mod:`secure_auc.dp.mechanisms`),

    Var(AUC) ~= sum_k [(c1_k - g)^2 Var(s1_k) + c2_k^2 Var(s2_k)] / (P N)^2,

with the variances of the discrete noises actually drawn (:class:`.noise.NoiseFamily`;
for unit sensitivity c2_k^2 Var(s2_k) is the variance of the noise on localSum).
"""

from __future__ import annotations

import numpy as np

from ..local_stats import LocalStatistics
from .randomized_response import flip_probability

__all__ = [
    "rr_linearised_std",
    "rr_rank_sum_std",
    "rr_paper_std",
    "global_laplace_std",
    "local_laplace_one_sample_std",
    "linearised_std",
    "statistics_noise_draws",
    "rr_noise_draws",
]


def rr_rank_sum_std(ranks, positives: int, negatives: int, epsilon: float) -> float:
    """std of sum_i r_i y~_i / (P N) under randomized response (exact)."""
    rho = flip_probability(epsilon)
    r = np.asarray(ranks, dtype=np.float64)
    return float(np.sqrt(rho * (1 - rho) * (r @ r)) / (positives * negatives))


def rr_paper_std(total: int, positives: int, negatives: int, epsilon: float) -> float:
    """The paper's closed form: sqrt(e^eps/(1+e^eps)^2 M(M-1)(2M-1)/6) / (P N)."""
    m = float(total)
    e = np.exp(epsilon)
    return float(np.sqrt(e / (1 + e) ** 2 * m * (m - 1) * (2 * m - 1) / 6) / (positives * negatives))


def rr_linearised_std(ranks, labels, epsilon: float) -> float:
    """Delta-method std of the *debiased* RR estimate (this project's; noisy P included).

    Each flipped label y~_i = y_i XOR f_i has variance rho (1 - rho); the
    estimate g(S~, P~) (eq. 1 on the flipped labels, then the debiasing) moves
    by A r_i + B when y~_i moves by one, with A = dg/dS~ and B = dg/dP~ at the
    expected (S~, P~).  So Var ~= rho (1 - rho) sum_i (A r_i + B)^2.  Unlike the
    paper's closed form it accounts for the debiasing factor 1 / (1 - a - b) and
    for the correlation between the rank sum and the noisy count.
    """
    from ..metrics import auc_from_sums
    from .randomized_response import debias_auc

    rho = flip_probability(epsilon)
    r = np.asarray(ranks, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    m = len(r)
    s0 = float(r @ (y * (1 - rho) + (1 - y) * rho))
    p0 = float(y.sum() * (1 - rho) + (m - y.sum()) * rho)

    def g(s, p):
        return float(debias_auc(auc_from_sums(s, p, m - p), p, m - p, epsilon).auc)

    hs, hp = max(1.0, 1e-6 * s0), max(1.0, 1e-6 * p0)
    a = (g(s0 + hs, p0) - g(s0 - hs, p0)) / (2 * hs)
    b = (g(s0, p0 + hp) - g(s0, p0 - hp)) / (2 * hp)
    v = a * a * (r @ r) + 2 * a * b * r.sum() + m * b * b
    return float(np.sqrt(rho * (1 - rho) * v))


def global_laplace_std(clients: int, total: int, positives: int, negatives: int, epsilon_sum: float) -> float:
    """GlobalLaplace with exact P and N: sqrt(2K)(M-1)/(P N eps_sum)."""
    return float(np.sqrt(2 * clients) * (total - 1) / (positives * negatives * epsilon_sum))


def local_laplace_one_sample_std(clients: int, positives: int, negatives: int, epsilon_sum: float) -> float:
    """LocalLaplace with one sample per client (K = M), exact P and N."""
    k = float(clients)
    return float(np.sqrt(k * (k - 1) * (2 * k - 1) / 3) / (positives * negatives * epsilon_sum))


def linearised_std(mechanism, stats: LocalStatistics, total: int, auc: float) -> float:
    """Delta-method std of the estimate for a statistics mechanism
    (:class:`.mechanisms.StatisticsMechanism`; noisy P included)."""
    p = float(stats.local_p.sum())
    n = total - p
    g = p - 0.5 + auc * (n - p)
    al = mechanism.allocate(stats, total)
    fam = mechanism.family
    v1 = fam.std(al.eps1, sensitivity=1.0) ** 2
    if al.scale2 is None:
        v2 = fam.std(al.eps2, sensitivity=al.c2) ** 2
    else:  # noise on n_k <v, y>, divided by n_k
        v2 = (fam.std(al.eps2, sensitivity=np.rint(2.0 * al.scale2 * al.c2) / 2.0) / al.scale2) ** 2
    var = np.sum((al.c1 - g) ** 2 * v1 + v2)
    return float(np.sqrt(var) / (p * n))


# ---------------------------------------------------------------------------------------------
# intervals from the noise's own distribution
INTERVAL_DRAWS = 20_000  # noise draws of the parametric bootstrap
INTERVAL_SEED = 20_251_125  # fixed: the interval is a function of the public inputs only
UNDEFINED_LIMIT = 0.01  # no interval when more than this share of the draws leaves the estimator undefined


def statistics_noise_draws(mechanism, stats: LocalStatistics, total: int, draws: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Draws of the summed noise (E_S, E_P) of a statistics mechanism whose clients have the rank
    summaries ``stats``: every client's two noises as :meth:`.mechanisms.StatisticsMechanism.privatize`
    adds them, clients with the same calibration summed in one draw (the noise's own
    :meth:`~.noise.NoiseFamily.summed_draws`)."""
    from .noise import GRID

    al = mechanism.allocate(stats, total)
    fam = mechanism.family
    scale1 = np.broadcast_to(fam.scale(al.eps1, 1.0, GRID), al.eps1.shape)
    if al.scale2 is None:
        scale2 = np.broadcast_to(fam.scale(al.eps2, al.c2, GRID), al.eps2.shape)
        divide = np.ones_like(scale2)
    else:
        scale2 = np.broadcast_to(fam.scale(al.eps2, np.rint(2.0 * al.scale2 * al.c2) / 2.0, GRID), al.eps2.shape)
        divide = al.scale2
    rows, counts = np.unique(np.stack([scale1, scale2, al.c1, divide], axis=1), axis=0, return_counts=True)
    summed = fam.summed_draws
    e_s = np.zeros(draws)
    e_p = np.zeros(draws)
    for (s1, s2, c1, div), count in zip(rows, counts):
        u1 = summed(rng, float(s1), int(count), draws) * GRID
        e_p += u1
        e_s += c1 * u1 + summed(rng, float(s2), int(count), draws) * GRID / div
    return e_s, e_p


def rr_noise_draws(total: int, epsilon: float, draws: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Draws of the flips' noise on (S~, P~) with distinct ranks 0..M-1: whatever the labels,
    S~ - E S~ = sum_i r_i (1 - 2 y_i)(f_i - rho) and P~ - E P~ = sum_i (1 - 2 y_i)(f_i - rho), with
    covariance rho (1 - rho) [[sum r^2, sum r], [sum r, M]]; drawn as that normal (M Bernoulli terms)."""
    rho = flip_probability(epsilon)
    m = float(total)
    s1, s2 = m * (m - 1) / 2.0, (m - 1) * m * (2 * m - 1) / 6.0
    cov = rho * (1 - rho) * np.array([[s2, s1], [s1, m]])
    z = rng.standard_normal((draws, 2)) @ np.linalg.cholesky(cov).T
    return z[:, 0], z[:, 1]
