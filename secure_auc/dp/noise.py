"""Additive noise primitives: Laplace (pure eps) and Gaussian ((eps, delta)).

Both are calibrated for sensitivity 1; a statistic with sensitivity D gets the
noise multiplied by D (the mechanisms scale it).

* Laplace mechanism (Dwork et al. 2006): Lap(D / eps) is eps-DP for an l1
  sensitivity D.  Variance 2 (D / eps)^2.
* Analytic Gaussian mechanism (Balle & Wang 2018, Thm. 8): N(0, sigma^2) with
  the smallest sigma such that

      Phi(D/(2 sigma) - eps sigma / D) - e^eps Phi(-D/(2 sigma) - eps sigma / D) <= delta

  is (eps, delta)-DP for an l2 sensitivity D, for every eps > 0 (the classical
  sigma = D sqrt(2 ln(1.25/delta)) / eps holds only for eps < 1 and is looser).
  We solve for sigma by bisection, vectorised over arrays of eps.
"""

from __future__ import annotations

from dataclasses import dataclass

from functools import lru_cache

import numpy as np
from scipy.special import log_ndtr

from ..validation import check_delta

__all__ = ["NoiseFamily", "LAPLACE", "gaussian", "analytic_gaussian_sigma"]


def _gaussian_delta(sigma: np.ndarray, eps: np.ndarray) -> np.ndarray:
    a = 1.0 / (2.0 * sigma)
    b = eps * sigma
    return np.exp(log_ndtr(a - b)) - np.exp(eps + log_ndtr(-a - b))


def analytic_gaussian_sigma(epsilon, delta: float) -> np.ndarray:
    """Smallest sigma (for sensitivity 1) making N(0, sigma^2) (eps, delta)-DP.

    Computed once per distinct eps (many clients share one budget) and cached,
    since a simulation asks for the same per-client budgets in every repetition.
    """
    eps = np.asarray(epsilon, dtype=np.float64)
    delta = check_delta(delta)
    return _sigma_cached(eps.tobytes(), eps.shape, delta).copy()


@lru_cache(maxsize=32)
def _sigma_cached(eps_bytes: bytes, shape: tuple, delta: float) -> np.ndarray:
    eps = np.frombuffer(eps_bytes, dtype=np.float64).reshape(shape)
    uniq, inverse = np.unique(eps, return_inverse=True)
    return _bisect_sigma(uniq, delta)[inverse].reshape(shape)


def _bisect_sigma(eps: np.ndarray, delta: float, iterations: int = 100) -> np.ndarray:
    """Geometric bisection: 100 halvings of log(hi / lo) are far below float64 resolution."""
    lo = np.full(eps.shape, 1e-12)
    hi = np.full(eps.shape, 1.0)
    # grow hi until it is private enough (delta(sigma) decreases in sigma)
    for _ in range(200):
        bad = _gaussian_delta(hi, eps) > delta
        if not bad.any():
            break
        hi = np.where(bad, hi * 4.0, hi)
    for _ in range(iterations):
        mid = np.sqrt(lo * hi)
        ok = _gaussian_delta(mid, eps) <= delta
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    return hi


@dataclass(frozen=True)
class NoiseFamily:
    """Unit-sensitivity noise: ``std(eps)`` and ``sample(eps, rng, shape)``.

    ``delta`` is the delta spent by one release (0 for Laplace).
    """

    name: str
    delta: float = 0.0

    def std(self, epsilon) -> np.ndarray:
        eps = np.asarray(epsilon, dtype=np.float64)
        if self.name == "laplace":
            return np.sqrt(2.0) / eps
        return analytic_gaussian_sigma(eps, self.delta)

    def sample(self, epsilon, rng: np.random.Generator, shape) -> np.ndarray:
        """Noise for a sensitivity-1 statistic released with budget ``epsilon``.

        ``epsilon`` broadcasts against ``shape`` (e.g. one budget per client).
        """
        eps = np.asarray(epsilon, dtype=np.float64)
        with np.errstate(divide="ignore"):
            if self.name == "laplace":
                return rng.laplace(0.0, 1.0, size=shape) / eps
            return rng.standard_normal(size=shape) * analytic_gaussian_sigma(eps, self.delta)


LAPLACE = NoiseFamily("laplace")


def gaussian(delta: float) -> NoiseFamily:
    return NoiseFamily("gaussian", check_delta(delta))
