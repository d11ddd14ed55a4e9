"""The client role: holds private labels, learns only the ranks of its own scores.

:class:`ClientGroup` is any number of clients hosted by one process (a local
run hosts up to one client per sample); :class:`Client` is one of them.  Both
run the same vectorised code, and each client's label flips, shuffle and noise
come from its own noise key only (:class:`~secure_auc.dp.streams.KeyStreams`),
so a client computes the same thing alone as among any others.

Streams.  Client k's randomness for a mechanism comes from the streams
``labels|<m>`` (randomized response) and ``noise|<m>`` (statistics), where
``<m>`` is a hash of the mechanism's parameters, and its shuffle from
``shuffle``: two mechanisms evaluated on the same ranks never reuse each
other's randomness, and a mechanism draws the same noise for the same key
whether it runs alone or among others, in the plain or in the MPC protocol.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..data.io import ClientData
from ..dp.mechanisms import NoisyStatistics
from ..dp.rng import ClientRngs, new_noise_key
from ..dp.streams import KeyStreams
from ..local_stats import LocalStatistics
from .messages import RanksMessage, ScoresMessage, StatisticsMessage, to_fixed

__all__ = ["Client", "ClientGroup", "mechanism_stream"]


def mechanism_stream(mechanism) -> str:
    """The name a mechanism's streams carry: a hash of its parameters (its ``repr``)."""
    return hashlib.blake2b(repr(mechanism).encode(), digest_size=8).hexdigest()


class ClientGroup:
    """Clients ``first, first + 1, ...`` hosted together, one entry of ``datas`` and ``keys`` each.

    On creation the mechanism's label step runs once (randomized response flips
    the labels here, before anything leaves the clients).

    Parameters
    ----------
    first : int
        The index of the first client.
    datas : list of ClientData
        Each client's scores and labels.
    mechanism : Mechanism
    keys : list of int or None
        Each client's 128-bit noise key (None: a fresh one from :mod:`secrets`).

    Examples
    --------
    Three clients hosted together release what each releases alone:

    >>> import numpy as np
    >>> from secure_auc import make_mechanism
    >>> from secure_auc.data.io import ClientData
    >>> from secure_auc.protocol.client import Client, ClientGroup
    >>> from secure_auc.dp.rng import ClientRngs
    >>> datas = [ClientData(np.array([0.1, 0.7]), np.array([0, 1])), ClientData(np.array([0.4]), np.array([1])),
    ...          ClientData(np.array([0.2, 0.9, 0.3]), np.array([1, 1, 0]))]
    >>> ranks = [np.array([0.0, 4.0]), np.array([3.0]), np.array([1.0, 5.0, 2.0])]
    >>> mech = make_mechanism("laplace", 1.0)
    >>> group = ClientGroup(0, datas, mech, [7, 8, 9])
    >>> group.set_ranks(np.concatenate(ranks), 6)
    >>> alone = []
    >>> for k in range(3):
    ...     c = Client(k, datas[k], mech, ClientRngs.from_key(7 + k))
    ...     c.set_ranks(ranks[k], 6)
    ...     alone.append(c.statistics_message())
    >>> group.statistics_messages() == alone
    True
    """

    def __init__(self, first: int, datas: list[ClientData], mechanism, keys):
        if len(datas) != len(keys):
            raise ValueError(f"{len(datas)} clients but {len(keys)} noise keys")
        self.first = int(first)
        self.sizes = np.array([len(d) for d in datas], dtype=np.int64)
        self.owner = np.repeat(np.arange(len(datas), dtype=np.int64), self.sizes)
        self.keys = [new_noise_key() if k is None else int(k) for k in keys]
        self.scores = np.concatenate([d.scores for d in datas]) if len(datas) != 1 else datas[0].scores
        labels = np.concatenate([d.labels for d in datas]) if len(datas) != 1 else datas[0].labels
        self.mechanism = mechanism
        self.stream = mechanism_stream(mechanism)
        self.labels = mechanism.prepare_labels(labels, KeyStreams(self.keys, f"labels|{self.stream}"),
                                               owner=self.owner)
        self.offsets = np.concatenate(([0], np.cumsum(self.sizes)))
        self.sent_order: np.ndarray | None = None
        self.ranks: np.ndarray | None = None
        self.total: int | None = None

    @property
    def clients(self) -> int:
        return len(self.sizes)

    def __len__(self) -> int:
        return len(self.scores)

    # step 1 (plain protocol): each client sends its scores in a random order
    def scores_messages(self) -> list[ScoresMessage]:
        """One message per client with its scores in an order drawn from its shuffle stream."""
        keys = KeyStreams(self.keys, "shuffle").permutation_keys(self.owner)
        order = np.lexsort((keys, self.owner))  # grouped by client, each client's samples shuffled
        self.sent_order = order - self.offsets[self.owner[order]]  # positions within each client
        return [ScoresMessage(self.first + k, self.scores[order[a:b]])
                for k, (a, b) in enumerate(zip(self.offsets[:-1], self.offsets[1:]))]

    # step 2: the ranks come back in the order the scores were sent
    def receive_rank_messages(self, messages: list[RanksMessage]) -> None:
        """Each client's ranks, in the order its scores were sent."""
        ranks = np.empty(len(self), dtype=np.float64)
        totals = set()
        for k, msg in enumerate(messages):
            index = self.first + k
            if msg.client != index:
                raise ValueError(f"client {index} got the ranks of client {msg.client}")
            a, b = self.offsets[k], self.offsets[k + 1]
            if len(msg.twice_ranks) != b - a:
                raise ValueError(f"client {index} holds {b - a} scores but got {len(msg.twice_ranks)} ranks")
            perm = self.sent_order[a:b] if self.sent_order is not None else np.arange(b - a)
            ranks[a + perm] = msg.twice_ranks / 2.0
            totals.add(int(msg.total))
        if len(totals) != 1:
            raise ValueError(f"the clients were told different totals M: {sorted(totals)}")
        self.set_ranks(ranks, totals.pop())

    def set_ranks(self, ranks: np.ndarray, total: int) -> None:
        """The clients' ranks, in their own order, concatenated (used by the MPC transport)."""
        ranks = np.asarray(ranks, dtype=np.float64)
        if ranks.shape != (len(self),):
            raise ValueError(f"expected {len(self)} ranks, got {ranks.shape}")
        self.ranks = ranks
        self.total = int(total)

    # step 3: local statistics plus each client's own noise
    def local_statistics(self) -> LocalStatistics:
        if self.ranks is None:
            raise RuntimeError(f"client {self.first} has no ranks yet")
        return LocalStatistics.from_owner(self.ranks, self.labels, self.owner, self.clients)

    def noisy_statistics(self) -> NoisyStatistics:
        noise = KeyStreams(self.keys, f"noise|{self.stream}")
        return self.mechanism.privatize(self.local_statistics(), noise, total=self.total)

    def fixed_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """(localSum'_k, localP'_k) of every client in fixed point (int64 arrays)."""
        noisy = self.noisy_statistics()
        return to_fixed(noisy.local_sum), to_fixed(noisy.local_p)

    def statistics_messages(self) -> list[StatisticsMessage]:
        local_sum, local_p = self.fixed_statistics()
        return [StatisticsMessage(self.first + k, int(local_sum[k]), int(local_p[k]), int(self.sizes[k]))
                for k in range(self.clients)]


class Client(ClientGroup):
    """One label party (a :class:`ClientGroup` of one).

    Parameters
    ----------
    index : int
    data : ClientData
    mechanism : Mechanism
    rngs : ClientRngs
        Holds the client's noise key.
    """

    def __init__(self, index: int, data: ClientData, mechanism, rngs: ClientRngs):
        super().__init__(index, [data], mechanism, [rngs.key])
        self.index = int(index)

    def scores_message(self) -> ScoresMessage:
        return self.scores_messages()[0]

    def receive_ranks(self, msg: RanksMessage) -> None:
        self.receive_rank_messages([msg])

    def statistics_message(self) -> StatisticsMessage:
        return self.statistics_messages()[0]
