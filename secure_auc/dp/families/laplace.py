"""The family ``laplace``: discrete Laplace noise on each client's (localSum_k, localP_k), the paper's FedAUC_Lap.

Declared here once: its noise (:class:`DiscreteLaplace`: g DLap((D / g) / eps) is
eps-DP, the analogue of the Laplace mechanism of Dwork et al. 2006 without its
floating-point weaknesses, Mironov 2012; variance g^2 2q / (1 - q)^2,
q = exp(-g eps / D), which is 2 (D / eps)^2 up to O(g^2)), its variance and
privacy events (pure eps-DP), and the family (:data:`FAMILY`, options of
:data:`..mechanisms.STATISTICS_OPTIONS`).  The paper's closed forms describe it.

Examples
--------
Noise for a statistic of sensitivity 5 with eps = 1: on the grid, with the
discrete Laplace's variance (the Laplace's 2 (5 / 1)^2 up to O(g^2)):

>>> import numpy as np
>>> from secure_auc.dp.noise import GRID
>>> from secure_auc.dp.families.laplace import LAPLACE
>>> x = LAPLACE.sample(1.0, np.random.default_rng(0), (4,), sensitivity=5.0)
>>> bool(np.all(x / GRID == np.rint(x / GRID)))
True
>>> round(float(LAPLACE.std(1.0, sensitivity=5.0)) ** 2, 4)
50.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..discrete import discrete_laplace, dlap_variance
from ..mechanisms import statistics_family
from ..noise import NoiseFamily, register_noise

__all__ = ["DiscreteLaplace", "LAPLACE", "FAMILY"]

NAME = "laplace"


@dataclass(frozen=True)
class DiscreteLaplace(NoiseFamily):
    """g DLap(t) with t = (Delta / g) / eps grid steps (:func:`..discrete.discrete_laplace`), pure eps-DP."""

    name: str = NAME
    paper = True

    @classmethod
    def for_mechanism(cls, delta):
        from ...validation import InputError

        if delta not in (None, 0, 0.0):
            raise InputError("delta applies to Gaussian noise only (Laplace is pure eps-DP)")
        return LAPLACE

    def fast_scale(self, epsilon, units):
        return units / epsilon

    def grid_scale(self, epsilon, units):
        return units / epsilon

    def variance(self, scale):
        with np.errstate(divide="ignore"):
            return np.where(scale > 0, dlap_variance(1.0 / np.where(scale > 0, scale, 1.0)), 0.0)

    def draw(self, rng, scale, shape, *, exact=True):
        return discrete_laplace(rng, scale, shape, exact=exact)

    def summed_draws(self, rng, scale, count, draws):
        """Sum of ``count`` independent DLap(scale) (grid steps): NB(count, p) - NB(count, p), p = 1 - e^(-1/scale)."""
        if scale <= 0:
            return np.zeros(draws)
        p = -np.expm1(-1.0 / scale)
        return (rng.negative_binomial(count, p, draws) - rng.negative_binomial(count, p, draws)).astype(np.float64)

    def event(self, epsilon):
        from ..events import pure_event

        return pure_event(epsilon)

    def adaptive_event(self, epsilon):
        """Each client's own split of eps between two eps_i-DP releases: one eps-DP event bounds it."""
        from ..events import pure_event

        return pure_event(epsilon)


LAPLACE = DiscreteLaplace()
register_noise(DiscreteLaplace, default=True)

FAMILY = statistics_family(NAME, summary="noise on each client's localSum and localP, as in the paper",
                           notes={"delta": "pure eps-DP"}, paper_closed_forms=True)
