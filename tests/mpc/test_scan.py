"""The segmented copy-forward scan (:mod:`secure_auc.mpc.primitives.scan`) among real
parties with the dealer's triples, against a plain loop: Blelloch's tree alone, with a
Hillis-Steele top of several sizes, and Hillis-Steele alone; in Z_2^64 and Z_2^32."""

from __future__ import annotations

import numpy as np
import pytest

from secure_auc.mpc.primitives.scan import copy_forward, scan_plan, scan_products, scan_rounds

from .test_ranks import run_parties

CASES = [(1, 1), (2, 1), (5, 2), (37, 1), (37, 4), (37, 64), (1000, 1), (1000, 8), (1000, 4096),
         (1100, 8), (1100, 512)]  # (n, top); n = 1100: padded to whole blocks of 256 and of 4, not to 2^11


def plain(n: int, dtype):
    """Flags (first one set), values and the copy-forward by a loop, for 2 scanned rows."""
    rng = np.random.default_rng(n)
    f = (rng.random((2, n)) < 0.2).astype(dtype)
    f[:, 0] = 1
    v = rng.integers(-2**20, 2**20, (2, n)).astype(dtype)
    out = np.empty_like(v)
    for row in range(2):
        current = 0
        for j in range(n):
            current = v[row, j] if f[row, j] else current
            out[row, j] = current
    return f, v, out


def _scan_job(rank, cases, dtype):
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.primitives.randomness import dealer_randomness

    world = backend.world_size()
    results = []
    with dealer_randomness() as rnd:
        for n, top in cases:
            f, v, _ = plain(n, dtype)
            rng = np.random.default_rng([n, top])
            masks = [rng.integers(-2**31, 2**31, (2, 2, n)).astype(dtype) for _ in range(world - 1)]
            with np.errstate(over="ignore"):
                mine = masks[rank] if rank < world - 1 else np.stack([f, v]) - sum(masks, np.zeros((2, 2, n), dtype))
            used = rnd.used.copy()
            out = copy_forward(torch.from_numpy(mine[0]), torch.from_numpy(mine[1]), rnd, top=top)
            kinds = ("pair32", "mul32") if dtype == np.int32 else ("pair", "mul")
            results.append((out.numpy(), [rnd.used.get(k, 0) - used.get(k, 0) for k in kinds]))
    return results


@pytest.mark.parametrize("world, dtype", [(2, np.int64), (3, np.int32)])
def test_copy_forward_matches_a_loop_for_every_top(world, dtype):
    results = run_parties(world, _scan_job, CASES, dtype)
    for i, (n, top) in enumerate(CASES):
        with np.errstate(over="ignore"):
            got = sum((r[i][0] for r in results), np.zeros((2, n), dtype))
        np.testing.assert_array_equal(got, plain(n, dtype)[2], err_msg=f"n={n}, top={top}")
        assert results[0][i][1] == [sum(sizes) for sizes in scan_plan(2, n, top)], \
            "the plan announces the randomness the scan takes"


def test_the_top_cuts_rounds():
    assert [scan_rounds(1 << p, top=1) for p in (4, 16, 20)] == [7, 31, 39]  # Blelloch to groups of 4: 2p - 1
    assert [scan_rounds(1 << p) for p in (4, 12, 16, 20)] == [5, 13, 19, 27]  # p + max(0, p - 14) + 1


def test_rows_are_padded_to_whole_blocks_only():
    """Padding to whole blocks (not to a power of two) keeps the rounds of the power-of-two
    tree and drops the padding's products: the large built-in set's 4,584,062 rows take 55 %
    of the products of a tree of 2^23."""
    for n in (5, 37, 1000, 1100, 5000, 458_407, 4_584_062, (1 << 20) + 1):
        assert scan_rounds(n) == scan_rounds(1 << (n - 1).bit_length()), n
    assert scan_products(2, 4_584_062) < 0.56 * scan_products(2, 1 << 23)
    assert scan_products(2, (1 << 20) + 1) < 0.51 * scan_products(2, 1 << 21)
