"""What a client computes from its ranks and labels (paper, Section 5.1 step 3).

For client k with 0-based global ranks r (mid-ranks on ties) and labels y:

    localSum_k = <r, y>,   localP_k = <1, y>,   n_k = |Y_k|,

and the quantities the DP mechanisms calibrate with:

    max_rank_k = max_i r_i                     (l1 sensitivity of localSum_k)
    mean_rank_k = rbar_k = mean_i r_i           (r = rbar 1 + v, v orthogonal to 1)
    max_dev_k = ||r - rbar_k 1||_inf            (sensitivity of <v, y>)

All fields are arrays with one entry per client, so one object describes a
single client (the protocol) or all K clients at once (the simulator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LocalStatistics"]


@dataclass(frozen=True)
class LocalStatistics:
    local_sum: np.ndarray
    local_p: np.ndarray
    n: np.ndarray
    max_rank: np.ndarray
    mean_rank: np.ndarray
    max_dev: np.ndarray

    @property
    def clients(self) -> int:
        return len(self.n)

    @classmethod
    def from_client(cls, ranks, labels) -> "LocalStatistics":
        """One client's statistics from its own ranks and labels."""
        r = np.asarray(ranks, dtype=np.float64)
        y = np.asarray(labels, dtype=np.float64)
        rbar = r.mean()
        one = lambda v: np.array([v], dtype=np.float64)  # noqa: E731
        return cls(
            local_sum=one(r @ y),
            local_p=one(y.sum()),
            n=one(len(r)),
            max_rank=one(r.max()),
            mean_rank=one(rbar),
            max_dev=one(np.abs(r - rbar).max()),
        )

    @classmethod
    def from_owner(cls, ranks, labels, owner, clients: int) -> "LocalStatistics":
        """All clients' statistics at once; ``owner[i]`` is sample i's client.

        Vectorised with bincount / ufunc.at-free reductions (sort by owner once).
        """
        r = np.asarray(ranks, dtype=np.float64)
        y = np.asarray(labels, dtype=np.float64)
        owner = np.asarray(owner)
        n = np.bincount(owner, minlength=clients).astype(np.float64)
        if (n == 0).any():
            raise ValueError(f"client {int(np.flatnonzero(n == 0)[0])} holds no sample")
        local_sum = np.bincount(owner, weights=r * y, minlength=clients)
        local_p = np.bincount(owner, weights=y, minlength=clients)
        mean_rank = np.bincount(owner, weights=r, minlength=clients) / n
        order = np.argsort(owner, kind="stable")
        starts = np.concatenate(([0], np.cumsum(n[:-1]).astype(np.int64)))
        max_rank = np.maximum.reduceat(r[order], starts)
        min_rank = np.minimum.reduceat(r[order], starts)
        max_dev = np.maximum(max_rank - mean_rank, mean_rank - min_rank)
        return cls(local_sum, local_p, n, max_rank, mean_rank, max_dev)
