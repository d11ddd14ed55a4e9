"""Additive noise: discrete Laplace (pure eps) and discrete Gaussian ((eps, delta)).

All noise is an integer number of steps of the protocol's fixed-point grid
(:data:`GRID` = 2^-8), drawn exactly (:mod:`.discrete`), for a statistic on
that grid whose sensitivity D is a multiple of the step:

* discrete Laplace: g DLap((D / g) / eps) is eps-DP (the analogue of the
  Laplace mechanism of Dwork et al. 2006, without its floating-point
  weaknesses, Mironov 2012).  Variance g^2 2q / (1 - q)^2, q = exp(-g eps / D),
  which is 2 (D / eps)^2 up to O(g^2).
* discrete Gaussian: g N_Z(0, s^2) with s from :func:`.discrete.dgauss_sigma`.
  Its sigma in statistic units is within a tiny fraction of the continuous
  analytic Gaussian's below, which is kept for the distributed Gaussian
  shares and for comparison.
* Analytic Gaussian mechanism (continuous) (Balle & Wang 2018, Thm. 8): N(0, sigma^2) with
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
from .discrete import dgauss_sigma, dgauss_variance, discrete_gaussian, discrete_laplace, dlap_variance

__all__ = ["GRID", "grid_units", "NoiseFamily", "LAPLACE", "gaussian", "analytic_gaussian_sigma"]


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


GRID = 2.0**-8  # the protocol's fixed-point step (protocol.messages.FRACTION_BITS): all noise is on it


def grid_units(sensitivity, grid: float = GRID) -> np.ndarray:
    """sensitivity / grid as exact integers (float64); raises if a sensitivity is off the grid."""
    d = np.asarray(sensitivity, dtype=np.float64) / grid
    units = np.rint(d)
    if np.any(np.abs(d - units) > 1e-6 * np.maximum(1.0, d)):
        raise ValueError(f"sensitivity not a multiple of the grid step {grid}")
    return units


@lru_cache(maxsize=64)
def _dgauss_sigma_cached(units_bytes: bytes, eps_bytes: bytes, shape: tuple, delta: float) -> np.ndarray:
    units = np.frombuffer(units_bytes, dtype=np.float64).reshape(shape)
    eps = np.frombuffer(eps_bytes, dtype=np.float64).reshape(shape)
    pairs, inverse = np.unique(np.stack([units.ravel(), eps.ravel()], axis=1), axis=0, return_inverse=True)
    return dgauss_sigma(pairs[:, 0], pairs[:, 1], delta)[inverse.ravel()].reshape(shape)


@dataclass(frozen=True)
class NoiseFamily:
    """Integer noise on the fixed-point grid for a statistic of given sensitivity.

    ``laplace``: g DLap(t) with t = (Delta / g) / eps grid steps (discrete
    Laplace, pure eps-DP, :func:`.discrete.discrete_laplace`).  ``gaussian``:
    g N_Z(0, s^2) with the smallest s for which the discrete Gaussian is
    (eps, delta)-DP for the integer sensitivity Delta / g (CKS Theorem 7,
    :func:`.discrete.dgauss_sigma`), and at least (Delta / g) times the continuous
    analytic Gaussian's sigma (within 1e-5 of it for every sensitivity of 64 grid
    steps or more), so that it is also (1 / (2 sigma_c^2))-zCDP.  ``delta`` is the delta of one release (0
    for Laplace).  Both are exact samplers driven by the uniform integers of
    ``rng`` (the client's own noise stream in a release, :mod:`.streams`).

    Examples
    --------
    Noise for a statistic of sensitivity 5 with eps = 1: on the grid, with the
    discrete Laplace's variance (the Laplace's 2 (5 / 1)^2 up to O(g^2)):

    >>> import numpy as np
    >>> from secure_auc.dp.noise import GRID, LAPLACE
    >>> x = LAPLACE.sample(1.0, np.random.default_rng(0), (4,), sensitivity=5.0)
    >>> bool(np.all(x / GRID == np.rint(x / GRID)))
    True
    >>> round(float(LAPLACE.std(1.0, sensitivity=5.0)) ** 2, 4)
    50.0
    """

    name: str
    delta: float = 0.0

    def _scale(self, epsilon, sensitivity, grid):
        """Grid-unit parameter: DLap scale t or discrete Gaussian sigma (0 where no noise is needed)."""
        eps, units = np.broadcast_arrays(np.asarray(epsilon, dtype=np.float64), grid_units(sensitivity, grid))
        if self.name == "laplace" and np.all(units > 0) and np.all(np.isfinite(eps)):
            return units / eps  # the common case, without masks
        none = np.isinf(eps) | (units == 0)
        e, u = np.where(none, 1.0, eps), np.where(none, 1.0, units)
        if self.name == "laplace":
            scale = u / e
        else:
            e, u = np.ascontiguousarray(e), np.ascontiguousarray(u)
            scale = _dgauss_sigma_cached(u.tobytes(), e.tobytes(), u.shape, self.delta).copy()
            # never below the continuous analytic Gaussian's sigma: then the discrete Gaussian is
            # rho-zCDP with rho <= 1 / (2 sigma_c^2) (CKS Theorem 4), the event the accountant composes
            scale = np.maximum(scale, u * analytic_gaussian_sigma(e, self.delta))
        return np.where(none, 0.0, scale)

    def std(self, epsilon, sensitivity=1.0, grid: float = GRID) -> np.ndarray:
        """std of the noise of a statistic with ``sensitivity`` (on ``grid``) released with ``epsilon``."""
        scale = self._scale(epsilon, sensitivity, grid)
        if self.name == "laplace":
            with np.errstate(divide="ignore"):
                var = np.where(scale > 0, dlap_variance(1.0 / np.where(scale > 0, scale, 1.0)), 0.0)
        else:
            var = dgauss_variance(scale)
        return grid * np.sqrt(var)

    def sample(self, epsilon, rng: np.random.Generator, shape, sensitivity=1.0, grid: float = GRID, *,
               exact: bool = True) -> np.ndarray:
        """Noise (multiples of ``grid``, float64) for a statistic with ``sensitivity``, budget ``epsilon``.

        ``epsilon`` and ``sensitivity`` broadcast against ``shape`` (e.g. one per
        client).  ``exact=False`` uses the fast samplers of the same
        distributions (simulation only, see :func:`.discrete.discrete_laplace`).
        """
        return grid * self.sample_units(epsilon, rng, shape, sensitivity, grid, exact=exact).astype(np.float64)

    def sample_units(self, epsilon, rng: np.random.Generator, shape, sensitivity=1.0,
                     grid: float = GRID, *, exact: bool = True) -> np.ndarray:
        """The integer noise itself (in grid steps, int64)."""
        scale = np.broadcast_to(self._scale(epsilon, sensitivity, grid), shape)
        if self.name == "laplace":
            return discrete_laplace(rng, scale, shape, exact=exact)
        return discrete_gaussian(rng, scale, shape, exact=exact)


LAPLACE = NoiseFamily("laplace")


def gaussian(delta: float) -> NoiseFamily:
    return NoiseFamily("gaussian", check_delta(delta))
