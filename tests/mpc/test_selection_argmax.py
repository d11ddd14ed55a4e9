"""The secure argmax (:mod:`secure_auc.mpc.primitives.argmax`) among real parties with the
dealer's triples, against numpy's argmax (lowest index among the maxima)."""

from __future__ import annotations

import numpy as np

from .test_ranks import run_parties

# (values, expected index): every value equal but one; ties at the top (lowest index wins);
# values near the 2^62 range used by the selection; one value; an odd count
CASES = [
    np.array([5, 5, 5, 9, 5, 5, 5], dtype=np.int64),
    np.array([7, 3, 7, 7, 1], dtype=np.int64),
    np.array([-(1 << 61), 1 << 61, (1 << 61) - 1, 0], dtype=np.int64),
    np.array([42], dtype=np.int64),
    np.random.default_rng(0).integers(-10**12, 10**12, 37),
    np.random.default_rng(1).integers(0, 3, 100),
]


def _argmax_job(rank, cases):
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.primitives.argmax import secure_argmax

    world = backend.world_size()
    out = []
    for i, v in enumerate(cases):
        rng = np.random.default_rng([i, 7])
        masks = [rng.integers(-2**63, 2**63 - 1, len(v), dtype=np.int64) for _ in range(world - 1)]
        with np.errstate(over="ignore"):
            mine = masks[rank] if rank < world - 1 else v - sum(masks, np.zeros(len(v), np.int64))
        out.append(secure_argmax(torch.from_numpy(mine)).numpy())
    return out


def test_secure_argmax_is_the_first_maximum():
    for world in (3,):
        results = run_parties(world, _argmax_job, CASES, provider="ttp")
        for i, v in enumerate(CASES):
            with np.errstate(over="ignore"):
                got = sum((r[i] for r in results), np.zeros(1, np.int64))
            assert int(got[0]) == int(np.argmax(v)), (world, i, v)
