"""The family ``gaussian``: discrete Gaussian noise on each client's (localSum_k, localP_k), (eps, delta).

Declared here once: its noise (:class:`DiscreteGaussian`: g N_Z(0, s^2) with the
smallest s for which the discrete Gaussian is (eps, delta)-DP for the integer
sensitivity Delta / g, CKS Theorem 7, :func:`..discrete.dgauss_sigma`, and at least
(Delta / g) times the continuous analytic Gaussian's sigma, so that it is also
(1 / (2 sigma_c^2))-zCDP), its variance and privacy events (zCDP), and the family
(:data:`FAMILY`: the options of :data:`..mechanisms.STATISTICS_OPTIONS` and a
required ``delta``, each of the two releases spending half of it).

Examples
--------
>>> import numpy as np
>>> from secure_auc.dp.families.gaussian import gaussian
>>> noise = gaussian(1e-6)
>>> x = noise.sample_units(1.0, np.random.default_rng(0), (100_000,), sensitivity=1.0)
>>> x.dtype, bool(abs(x.std() / (noise.std(1.0) * 256) - 1) < 0.02)
(dtype('int64'), True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...validation import check_delta
from ..discrete import dgauss_variance, discrete_gaussian
from ..family import Option
from ..mechanisms import STATISTICS_OPTIONS, statistics_family
from ..noise import NoiseFamily, analytic_gaussian_sigma, dgauss_scale, register_noise

__all__ = ["DiscreteGaussian", "gaussian", "FAMILY"]

NAME = "gaussian"


@dataclass(frozen=True)
class DiscreteGaussian(NoiseFamily):
    """g N_Z(0, s^2), (eps, delta)-DP for one release with this ``delta``."""

    name: str = NAME
    takes_delta = True

    @classmethod
    def for_mechanism(cls, delta):
        from ...validation import InputError

        if delta is None:
            raise InputError("Gaussian noise needs --delta in (0, 1)")
        check_delta(delta)
        return gaussian(delta / 2.0)  # each of the two releases spends half of delta

    def grid_scale(self, epsilon, units):
        scale = dgauss_scale(units, epsilon, self.delta)
        # never below the continuous analytic Gaussian's sigma: then the discrete Gaussian is
        # rho-zCDP with rho <= 1 / (2 sigma_c^2) (CKS Theorem 4), the event the accountant composes
        return np.maximum(scale, np.ascontiguousarray(units) * analytic_gaussian_sigma(
            np.ascontiguousarray(epsilon), self.delta))

    def variance(self, scale):
        return dgauss_variance(scale)

    def draw(self, rng, scale, shape, *, exact=True):
        return discrete_gaussian(rng, scale, shape, exact=exact)

    def summed_draws(self, rng, scale, count, draws):
        """Sum of ``count`` independent N_Z(0, sigma^2) (grid steps): one exactly (numpy's sampler of the
        same law), several as a normal of their total variance rounded to the grid."""
        if scale <= 0:
            return np.zeros(draws)
        if count == 1:
            return discrete_gaussian(rng, scale, (draws,), exact=False).astype(np.float64)
        return np.rint(rng.standard_normal(draws) * np.sqrt(count * float(dgauss_variance(scale))))

    def _rho(self, epsilon):
        return 0.5 / analytic_gaussian_sigma(np.asarray(epsilon, dtype=np.float64), self.delta) ** 2

    def event(self, epsilon):
        """Each discrete Gaussian noise is at least the continuous analytic Gaussian's sigma_c(eps_i,
        delta), hence (1 / (2 sigma_c^2))-zCDP."""
        from ..events import zcdp_event

        return zcdp_event(float(self._rho(epsilon)))

    def adaptive_event(self, epsilon):
        """The largest total rho over the per-client split of eps."""
        from ..events import zcdp_event

        beta = np.linspace(1e-3, 1.0 - 1e-3, 999)
        worst = max(float(np.max(self._rho(beta * epsilon) + self._rho((1.0 - beta) * epsilon))),
                    float(self._rho(epsilon)))
        return zcdp_event(worst)


def gaussian(delta: float) -> DiscreteGaussian:
    """The discrete Gaussian noise of one release with ``delta``."""
    return DiscreteGaussian(delta=check_delta(delta))


register_noise(DiscreteGaussian)

DELTA = Option("delta", "delta of one evaluation, required", range="(0, 1)")

FAMILY = statistics_family(NAME, options=STATISTICS_OPTIONS + (DELTA,),
                           summary="discrete Gaussian noise on each client's localSum and localP, (eps, delta)-DP")
