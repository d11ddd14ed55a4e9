"""Additive noise: the interface of a per-client noise (:class:`NoiseFamily`) and the grid.

The noises themselves are declared with their mechanism families: discrete
Laplace (pure eps) in :mod:`.families.laplace`, discrete Gaussian ((eps, delta))
in :mod:`.families.gaussian`; :func:`noise_kind` finds one by name.

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

from ..validation import InputError, check_delta
from .discrete import dgauss_sigma

__all__ = ["GRID", "grid_units", "NoiseFamily", "noise_kind", "register_noise", "default_noise",
           "analytic_gaussian_sigma", "dgauss_scale"]


def _gaussian_delta(sigma: np.ndarray, eps: np.ndarray) -> np.ndarray:
    from scipy.special import log_ndtr  # here, not at import: a process without Gaussian noise never loads scipy

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


def dgauss_scale(units: np.ndarray, eps: np.ndarray, delta: float) -> np.ndarray:
    """The discrete Gaussian's sigma (grid steps) for sensitivities ``units`` and budgets ``eps``,
    computed once per distinct pair (:func:`.discrete.dgauss_sigma`) and cached."""
    e, u = np.ascontiguousarray(eps), np.ascontiguousarray(units)
    return _dgauss_sigma_cached(u.tobytes(), e.tobytes(), u.shape, delta).copy()


@lru_cache(maxsize=64)
def _dgauss_sigma_cached(units_bytes: bytes, eps_bytes: bytes, shape: tuple, delta: float) -> np.ndarray:
    units = np.frombuffer(units_bytes, dtype=np.float64).reshape(shape)
    eps = np.frombuffer(eps_bytes, dtype=np.float64).reshape(shape)
    pairs, inverse = np.unique(np.stack([units.ravel(), eps.ravel()], axis=1), axis=0, return_inverse=True)
    return dgauss_sigma(pairs[:, 0], pairs[:, 1], delta)[inverse.ravel()].reshape(shape)


@dataclass(frozen=True)
class NoiseFamily:
    """Integer noise on the fixed-point grid for a statistic of given sensitivity: the interface
    each per-client noise implements, declared with its mechanism family
    (:mod:`.families.laplace`: discrete Laplace, pure eps-DP; :mod:`.families.gaussian`: discrete
    Gaussian, (eps, delta)).

    A noise is a scale per release in grid steps (:meth:`grid_scale`), its variance
    (:meth:`variance`), an exact sampler (:meth:`draw`), the sum of several independent draws
    for the parametric bootstrap of the intervals (:meth:`summed_draws`) and the privacy
    event of one release (:meth:`event`).  ``delta`` is the delta of one release (0 for a
    pure eps-DP noise).  Every sampler is driven by the uniform integers of ``rng`` (the
    client's own noise stream in a release, :mod:`.streams`).  :func:`noise_kind` finds the
    noise a :class:`.mechanisms.StatisticsMechanism` names.

    Examples
    --------
    >>> from secure_auc.dp.noise import NoiseFamily, noise_kind
    >>> issubclass(type(noise_kind("laplace")), NoiseFamily), noise_kind("gaussian", 1e-6).delta
    (True, 5e-07)
    """

    name: str = ""
    delta: float = 0.0
    takes_delta = False  # its mechanism needs a delta (and refuses none)
    paper = False  # the paper's noise: its closed-form standard deviations and exact-P variant apply

    # -- what each noise implements -----------------------------------------------------------------
    def grid_scale(self, epsilon: np.ndarray, units: np.ndarray) -> np.ndarray:
        """The parameter, in grid steps, for budgets ``epsilon`` and sensitivities ``units`` (grid
        steps, both finite and > 0)."""
        raise NotImplementedError

    def fast_scale(self, epsilon: np.ndarray, units: np.ndarray) -> np.ndarray | None:
        """:meth:`grid_scale` without masks when every release needs noise (None: no fast path)."""
        return None

    def variance(self, scale: np.ndarray) -> np.ndarray:
        """Variance in grid steps^2 of the noise of parameter ``scale`` (0: no noise)."""
        raise NotImplementedError

    def draw(self, rng, scale: np.ndarray, shape, *, exact: bool = True) -> np.ndarray:
        """Integer noise (grid steps, int64) of parameter ``scale``."""
        raise NotImplementedError

    def summed_draws(self, rng, scale: float, count: int, draws: int) -> np.ndarray:
        """``draws`` values of the sum of ``count`` independent noises of parameter ``scale``."""
        raise NotImplementedError

    def event(self, epsilon: float) -> dict:
        """The privacy event (:mod:`.events`) of one release with budget ``epsilon``."""
        raise NotImplementedError

    def adaptive_event(self, epsilon: float) -> dict:
        """The event of two releases whose split of ``epsilon`` is each client's own (a bound)."""
        raise NotImplementedError

    @classmethod
    def for_mechanism(cls, delta: float | None) -> "NoiseFamily":
        """The noise of a mechanism with ``delta`` (checked: the message names what is wrong), each of
        its two releases spending half of it."""
        raise NotImplementedError

    # -- the same for every noise --------------------------------------------------------------------
    def scale(self, epsilon, sensitivity=1.0, grid: float = GRID) -> np.ndarray:
        """The noise's parameter in grid steps (DLap scale t, discrete Gaussian sigma; 0 where no noise is needed)."""
        eps, units = np.broadcast_arrays(np.asarray(epsilon, dtype=np.float64), grid_units(sensitivity, grid))
        if np.all(units > 0) and np.all(np.isfinite(eps)):
            fast = self.fast_scale(eps, units)  # the common case, without masks
            if fast is not None:
                return fast
        none = np.isinf(eps) | (units == 0)
        e, u = np.where(none, 1.0, eps), np.where(none, 1.0, units)
        return np.where(none, 0.0, self.grid_scale(e, u))

    def std(self, epsilon, sensitivity=1.0, grid: float = GRID) -> np.ndarray:
        """std of the noise of a statistic with ``sensitivity`` (on ``grid``) released with ``epsilon``."""
        return grid * np.sqrt(self.variance(self.scale(epsilon, sensitivity, grid)))

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
        scale = np.broadcast_to(self.scale(epsilon, sensitivity, grid), shape)
        return self.draw(rng, scale, shape, exact=exact)


_KINDS: dict[str, type] = {}  # name -> NoiseFamily subclass, filled by the families' modules
_DEFAULT: list[str] = []


def register_noise(kind: type, *, default: bool = False) -> type:
    """Make the noise ``kind`` (a :class:`NoiseFamily` subclass) known by its ``name``;
    ``default``: the noise of a :class:`.mechanisms.StatisticsMechanism` that names none."""
    _KINDS[kind.name] = kind
    if default:
        _DEFAULT[:] = [kind.name]
    return kind


def default_noise() -> str:
    """The name of the default noise."""
    return _DEFAULT[0]


def noise_kind(name: str, delta: float | None = None) -> NoiseFamily:
    """The noise called ``name`` as a mechanism with ``delta`` uses it (:meth:`NoiseFamily.for_mechanism`).

    Raises
    ------
    InputError
        On an unknown name (the message lists the known ones) or a delta the noise refuses.
    """
    if name not in _KINDS:
        raise InputError(f"noise must be {' or '.join(repr(k) for k in _KINDS)}, got {name!r}")
    return _KINDS[name].for_mechanism(delta)
