"""The family ``none``: the exact, non-private computation (references and tests).

Declared here once (:data:`FAMILY`, :mod:`..family`): no option, no budget, no noise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...local_stats import LocalStatistics
from ..base import Mechanism, NoisyStatistics, PrivacyCost
from ..family import Family

__all__ = ["NoNoise", "FAMILY"]

NAME = "none"


@dataclass(frozen=True)
class NoNoise(Mechanism):
    """The exact, non-private computation (references and tests).

    The clients release their exact statistics; the cost is eps = inf.

    Examples
    --------
    >>> from secure_auc import NoNoise, make_mechanism
    >>> NoNoise() == make_mechanism("none"), NoNoise().cost
    (True, PrivacyCost(epsilon=inf, delta=0.0))
    >>> NoNoise().describe()["epsilon"] is None
    True
    """

    name: str = field(default=NAME, init=False)

    @property
    def cost(self) -> PrivacyCost:
        return PrivacyCost(float("inf"))

    def privatize(self, stats: LocalStatistics, rng, reps: int | None = None, *, total: int | None = None,
                  exact: bool = True):
        shape = (stats.clients,) if reps is None else (reps, stats.clients)
        return NoisyStatistics(
            np.broadcast_to(stats.local_sum, shape).copy(),
            np.broadcast_to(stats.local_p, shape).copy(),
            stats.n,
        )


FAMILY = Family(NAME, "exact, non-private", (), make=lambda epsilon, delta, clients: NoNoise(), notes={"*": "exact, no noise"},
                private=False, seeded_noise=False)
