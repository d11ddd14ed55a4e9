"""Split M samples over K clients, as in the paper's experiments.

* IID: a random permutation cut into K near-equal blocks (the paper's
  "uniformly assigned").
* Non-IID: the samples sorted by prediction score and cut into K consecutive
  blocks, so each client holds a narrow band of scores (ranks).

Block sizes follow ``numpy.array_split``: the first ``M mod K`` clients get
one sample more than the others.
"""

from __future__ import annotations

import numpy as np

from ..validation import InputError

__all__ = ["SCHEMES", "partition_owner", "partition_indices"]

SCHEMES = ("iid", "noniid")


def _order(scores: np.ndarray, clients: int, scheme: str, seed: int) -> np.ndarray:
    m = len(scores)
    if not (1 <= clients <= m):
        raise InputError(
            f"clients must be between 1 and the number of samples ({m}), got {clients}"
        )
    if scheme == "iid":
        return np.random.default_rng(seed).permutation(m)
    if scheme == "noniid":
        return np.argsort(scores, kind="stable")
    raise InputError(f"partition must be one of {SCHEMES}, got {scheme!r}")


def _block_sizes(m: int, k: int) -> np.ndarray:
    q, extra = divmod(m, k)
    sizes = np.full(k, q, dtype=np.int64)
    sizes[:extra] += 1
    return sizes


def partition_owner(
    scores: np.ndarray, clients: int, scheme: str = "iid", *, seed: int = 0
) -> np.ndarray:
    """``owner[i]`` = the client (0..K-1) that holds sample i.  Vectorised."""
    order = _order(scores, clients, scheme, seed)
    owner = np.empty(len(scores), dtype=np.int64)
    owner[order] = np.repeat(np.arange(clients), _block_sizes(len(scores), clients))
    return owner


def partition_indices(
    scores: np.ndarray, clients: int, scheme: str = "iid", *, seed: int = 0
) -> list[np.ndarray]:
    """K index arrays (one per client, ascending) that partition ``range(M)``."""
    order = _order(scores, clients, scheme, seed)
    return np.split(order, np.cumsum(_block_sizes(len(scores), clients))[:-1])
