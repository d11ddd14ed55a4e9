"""The dealer's compiled corrections and the shuffles' compiled row moves give the same words
as the numpy reference (``SECURE_AUC_KERNELS=numpy``), over random seeds, every digit width,
every corrected party; and no kernel compiles after the warm-up."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

from secure_auc.mpc import kernels
from secure_auc.mpc.primitives import dealer, shuffle
from secure_auc.mpc.primitives.prg import new_seed


@pytest.fixture(scope="module", autouse=True)
def warm():
    kernels.warm_up()


def _both(monkeypatch, fn):
    """fn() with the compiled kernels, then with the reference."""
    monkeypatch.setenv("SECURE_AUC_KERNELS", "numba")
    fast = fn()
    monkeypatch.setenv("SECURE_AUC_KERNELS", "numpy")
    return fast, fn()


def test_corrections_and_row_moves_are_bit_identical_to_the_reference(monkeypatch):
    dispatchers = [f for f in vars(kernels).values() if isinstance(f, numba.core.registry.CPUDispatcher)]
    before = {f.__name__: len(f.signatures) for f in dispatchers}
    for d in (1, 2, 3, 4):
        for world in (2, 4):  # one-hot batches (Beaver's products)
            seeds = [new_seed() for _ in range(world)]
            for q in range(world):
                fast, ref = _both(monkeypatch, lambda: dealer.triple_correction(seeds, 3, 257, f"onehot{d}", q))
                assert fast.dtype == ref.dtype == np.int32 and np.array_equal(fast, ref)
        reps = [new_seed() for _ in range(3)]  # replicated among three
        for c in range(3):
            fast, ref = _both(monkeypatch, lambda: dealer.rep_correction(reps, 5, 300, f"rep{d}", c))
            assert np.array_equal(fast, ref)
            e = ref  # the corrected component completes the one-hot of r mod V
            comps = [dealer.rep_component(s, 5, 300, f"rep{d}") for s in reps]
            total = sum(comps[i][1:] for i in range(3) if i != c) + e
            r = sum(x[0] for x in comps) & ((1 << d) - 1)
            assert np.array_equal(total, (r[None, :] == np.arange(1, 1 << d)[:, None]).astype(np.int32))
    rng = np.random.default_rng(7)
    p = torch.from_numpy(rng.permutation(1000))
    for dtype, cols in ((torch.int32, 1), (torch.int64, 1), (torch.int32, 2), (torch.int64, 3)):
        x = torch.from_numpy(rng.integers(-2**31, 2**31, (1000, cols))).to(dtype)
        for inverse in (False, True):
            fast, ref = _both(monkeypatch, lambda: shuffle.permute_rows(x, p, inverse))
            assert torch.equal(fast, ref)
            assert torch.equal(fast, x[p] if not inverse else torch.empty_like(x).index_copy_(0, p, x))
    assert {f.__name__: len(f.signatures) for f in dispatchers} == before  # nothing compiled after the warm-up
