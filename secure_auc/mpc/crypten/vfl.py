"""The vertical-federated-learning example's party (``scripts/crypten_vfl_example.py``):
private inference of a small model with CrypTen, its scores straight into the DP AUC.

Kept in the package so that the launcher's processes can import it.
"""

from __future__ import annotations

import time

import numpy as np

from ..comm import backend
from .bridge import evaluate_mpctensor
from .safe import install

__all__ = ["mlp_scores", "vfl_party"]


def mlp_scores(cols, w1, w2, rank: int):
    """``sigmoid(relu(x W1) W2)`` as an ``MPCTensor``: party r shares its columns
    ``cols[r]`` (n, c_r) (``src=r``), party 0 the weights ``w1`` (sum c_r, h) and ``w2``
    (h, 1); every party passes the shapes of the others' (``cols[r]`` for r != rank are
    only read for their shapes)."""
    import torch

    crypten = backend.crypten
    world = backend.world_size()
    x = crypten.cat([crypten.cryptensor(torch.from_numpy(np.ascontiguousarray(cols[r])) if r == rank
                                        else torch.empty(np.shape(cols[r])), src=r) for r in range(world)], dim=1)
    W1 = crypten.cryptensor(torch.from_numpy(w1) if rank == 0 else torch.empty(np.shape(w1)), src=0)
    W2 = crypten.cryptensor(torch.from_numpy(w2) if rank == 0 else torch.empty(np.shape(w2)), src=0)
    return x.matmul(W1).relu().matmul(W2)[:, 0].sigmoid()


def vfl_party(rank, cols, w1, w2, labels, sizes, mechanism, noise_key, sort, verify):
    """One party of the example: :func:`.safe.install`, :func:`mlp_scores`, then
    :func:`.bridge.evaluate_mpctensor` with parties 1.. as the label owners (rows in
    order, ``sizes``).  ``verify``: at the end, also open the scores to party 0 only
    (``get_plain_text(dst=0)``, point-to-point under :func:`.safe.install`), whose result the
    launcher reads: a demonstration's check, never in a deployment; no other party learns a
    score.  Returns the server's result (None elsewhere), at party 0 the decoded scores (with
    ``verify``; None elsewhere), the times and the bytes this party sent."""
    start = time.perf_counter()
    with install():
        scores = mlp_scores(cols, w1, w2, rank)
        inference = time.perf_counter() - start
        owners = list(range(1, backend.world_size()))
        result = evaluate_mpctensor(scores, labels, owners=owners, sizes=sizes, mechanisms=[mechanism],
                                    noise_key=noise_key, method=sort)
        seconds = time.perf_counter() - start
        decoded = scores.get_plain_text(dst=0) if verify else None  # to party 0 only: None elsewhere
        if decoded is not None:
            decoded = decoded.numpy().astype(np.float64)
    return {"result": result, "decoded": decoded, "inference": inference, "seconds": seconds,
            "bytes": int(backend.communication_stats()["bytes"])}
