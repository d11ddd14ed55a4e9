"""The server role: ranks the scores (plain protocol) and estimates the AUC."""

from __future__ import annotations

import numpy as np

from ..dp.base import Estimate, estimate_auc
from ..metrics import twice_midranks
from .messages import Aggregate, RanksMessage, ScoresMessage, StatisticsMessage

__all__ = ["Server"]


class Server:
    def __init__(self, mechanism):
        # the mechanism's public parameters (eps, flip probability) are needed to debias
        self.mechanism = mechanism

    @staticmethod
    def rank(messages: list[ScoresMessage]) -> list[RanksMessage]:
        """Global sort of all received scores; each rank goes back to its owner only."""
        sizes = [len(m.scores) for m in messages]
        twice = twice_midranks(np.concatenate([m.scores for m in messages]))
        bounds = np.cumsum([0] + sizes)
        total = int(bounds[-1])
        return [
            RanksMessage(m.client, twice[bounds[i] : bounds[i + 1]], total)
            for i, m in enumerate(messages)
        ]

    @staticmethod
    def aggregate(messages: list[StatisticsMessage]) -> Aggregate:
        # Python ints: exact, like the sum in CrypTen's ring
        return Aggregate(
            global_sum_fixed=sum(int(m.local_sum_fixed) for m in messages),
            positives_fixed=sum(int(m.local_p_fixed) for m in messages),
            total=sum(int(m.n) for m in messages),
        )

    def estimate(self, aggregate: Aggregate) -> Estimate:
        return estimate_auc(aggregate.global_sum, aggregate.positives, aggregate.total, self.mechanism)
