"""The family ``rr``: randomized response on the labels, debiased (FedAUC_RR).

Declared here once (:data:`FAMILY`, :mod:`..family`): it takes ``epsilon`` only; its
flips come from the clients' label streams (not the noise keys), so a ledger lets one
seed's flips at one eps be reused for free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...validation import check_epsilon
from ..base import Estimate, PrivacyCost
from ..family import EPSILON, Family
from ..randomized_response import debias_auc, flip_probability, randomized_response
from .none import NoNoise

__all__ = ["RandomizedResponse", "FAMILY"]

NAME = "rr"


@dataclass(frozen=True)
class RandomizedResponse(NoNoise):
    """Flip labels with probability 1/(1+e^eps) before anything leaves the client.

    The statistics on the flipped labels are released without further noise;
    the server debiases eq. (1) with :func:`.randomized_response.debias_auc`.

    Parameters
    ----------
    epsilon : float, default 1.0
        eps > 0 of each label's randomized response.

    Raises
    ------
    InputError
        If ``epsilon`` is not > 0.

    Examples
    --------
    With eps = ln 3 a label is flipped with probability 1/4:

    >>> import math
    >>> import numpy as np
    >>> from secure_auc import RandomizedResponse
    >>> from secure_auc.dp.rng import make_rng
    >>> rr = RandomizedResponse(epsilon=math.log(3))
    >>> round(rr.flip_probability, 12), rr.cost.delta
    (0.25, 0.0)
    >>> flipped = rr.prepare_labels(np.ones(10_000, dtype=np.int8), make_rng(0))
    >>> bool(0.7 < flipped.mean() < 0.8)
    True

    Debiasing: with P' = N' = 50 of M = 100 noisy labels (estimated base rate
    1/2, so a = b = rho), an AUC of 0.625 on flipped labels estimates
    (0.625 - rho) / (1 - 2 rho) = 0.75:

    >>> est = rr.estimate(global_sum=0.625 * 50 * 50 + 50 * 49 / 2, positives=50, total=100)
    >>> float(est.raw_auc), round(float(est.auc), 9)
    (0.625, 0.75)
    >>> RandomizedResponse(epsilon=0)
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: epsilon must be > 0, got 0
    """

    epsilon: float = 1.0
    name: str = field(default=NAME, init=False)

    def __post_init__(self):
        check_epsilon(self.epsilon)

    @property
    def flip_probability(self) -> float:
        return flip_probability(self.epsilon)

    @property
    def cost(self) -> PrivacyCost:
        return PrivacyCost(self.epsilon)

    def prepare_labels(self, labels, rng, owner=None):
        return randomized_response(labels, self.epsilon, rng, owner)

    def estimate(self, global_sum, positives, total: int) -> Estimate:
        """Eq. (1) on the flipped labels' sums, then the debiasing of
        :func:`.randomized_response.debias_auc`."""
        raw = super().estimate(global_sum, positives, total)
        p = raw.positives
        auc = debias_auc(raw.raw_auc, p, total - p, self.epsilon).auc
        return Estimate(auc=auc, raw_auc=raw.raw_auc, global_sum=raw.global_sum, positives=p)

    def describe(self) -> dict:
        return {"mechanism": NAME, "epsilon": self.epsilon, "delta": 0.0, "allocation": None, "sensitivity": None}


FAMILY = Family(NAME, "randomized response on labels, debiased", (EPSILON,),
                make=lambda epsilon, delta, clients: RandomizedResponse(epsilon=check_epsilon(epsilon)),
                notes={"*": "randomized response takes --epsilon only"}, seeded_noise=False, flips_labels=True)
