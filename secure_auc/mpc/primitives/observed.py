"""What a party learns: every value it obtains by an opening, told to the :data:`observers`;
and :func:`reconstruct`, an input party's sum of the shares the computing parties sent it.

The openings themselves are :mod:`.opening`'s (a computing party's, over torch); this module
is numpy only, so that a client host, which only reconstructs its own rows' ranks, never loads
torch.  The audit (:func:`secure_auc.mpc.audit.record_received`) is an observer: it records
what each party learns, in every process, the hosts' too.

Examples
--------
>>> import numpy as np
>>> parts = [np.array([5, -3], dtype=np.int32), np.array([2**31 - 1, 4], dtype=np.int32)]
>>> reconstruct(parts).tolist()  # wraps modulo 2^32
[-2147483644, 1]
"""

from __future__ import annotations

import numpy as np

__all__ = ["observers", "tell", "reconstruct"]

observers: list = []  # callables (kind, opened tensor) told of every value this party obtains (the audit)


def tell(kind: str, opened) -> None:
    """Tell every observer of each value of ``opened`` (torch tensors) that this party obtained
    it by the operation ``kind``."""
    for observe in observers:
        for t in opened:
            observe(kind, t)


def reconstruct(parts: list[np.ndarray], kind: str = "rank shares") -> np.ndarray:
    """The values whose shares (one array per computing party, all of one integer dtype)
    an input party received: their sum, wrapping in the dtype's ring."""
    out = parts[0].copy()
    for part in parts[1:]:
        out += part
    if observers:  # the audit's records are tensors (it runs with torch loaded)
        import torch

        tell(kind, [torch.from_numpy(out)])
    return out
