"""The client role: holds private labels, learns only the ranks of its own scores."""

from __future__ import annotations

import numpy as np

from ..data.io import ClientData
from ..dp.mechanisms import NoisyStatistics
from ..dp.rng import ClientRngs
from ..local_stats import LocalStatistics
from .messages import RanksMessage, ScoresMessage, StatisticsMessage, to_fixed

__all__ = ["Client"]


class Client:
    """One label party.

    On creation it applies the mechanism's label step once (randomized
    response flips the labels here, before anything leaves the client).
    """

    def __init__(self, index: int, data: ClientData, mechanism, rngs: ClientRngs):
        self.index = index
        self.scores = data.scores
        self.labels = mechanism.prepare_labels(data.labels, rngs.labels)
        self.mechanism = mechanism
        self.rngs = rngs
        self.sent_order: np.ndarray | None = None
        self.ranks: np.ndarray | None = None
        self.total: int | None = None

    def __len__(self) -> int:
        return len(self.scores)

    # step 1 (plain protocol): send the scores in a random order
    def scores_message(self) -> ScoresMessage:
        self.sent_order = self.rngs.shuffle.permutation(len(self.scores))
        return ScoresMessage(self.index, self.scores[self.sent_order])

    # step 2: the ranks come back in the order the scores were sent
    def receive_ranks(self, msg: RanksMessage) -> None:
        if msg.client != self.index:
            raise ValueError(f"client {self.index} got the ranks of client {msg.client}")
        if len(msg.twice_ranks) != len(self.scores):
            raise ValueError(
                f"client {self.index} holds {len(self.scores)} scores but got {len(msg.twice_ranks)} ranks"
            )
        ranks = np.empty(len(self.scores), dtype=np.float64)
        perm = self.sent_order if self.sent_order is not None else np.arange(len(self.scores))
        ranks[perm] = msg.twice_ranks / 2.0
        self.set_ranks(ranks, msg.total)

    def set_ranks(self, ranks: np.ndarray, total: int) -> None:
        """Ranks of this client's samples in its own order (used by the MPC transport)."""
        self.ranks = np.asarray(ranks, dtype=np.float64)
        self.total = int(total)

    # step 3: local statistics plus the client's own noise
    def local_statistics(self) -> LocalStatistics:
        if self.ranks is None:
            raise RuntimeError(f"client {self.index} has no ranks yet")
        return LocalStatistics.from_client(self.ranks, self.labels)

    def noisy_statistics(self) -> NoisyStatistics:
        return self.mechanism.privatize(self.local_statistics(), self.rngs.noise, total=self.total)

    def statistics_message(self) -> StatisticsMessage:
        noisy = self.noisy_statistics()
        return StatisticsMessage(
            self.index,
            int(to_fixed(noisy.local_sum)[0]),
            int(to_fixed(noisy.local_p)[0]),
            int(noisy.n[0]),
        )
