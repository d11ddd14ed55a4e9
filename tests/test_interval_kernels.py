"""Many intervals at once (``interval_bounds`` over 256 estimates or more) go through one compiled
pass (secure_auc/interval_kernels.py): the same bits as the numpy code (``SECURE_AUC_KERNELS=numpy``)
for every kind of mechanism, with estimates whose draws are partly undefined (P' near 0 or M: the
quantiles of the defined draws), mostly undefined (no interval), or not finite (left to numpy)."""

import numpy as np
import pytest

from secure_auc.dp.registry import make_mechanism
from secure_auc.result import COMPILED_FROM_ROWS, interval_bounds

M = 4000
SIZES = [1000, 1000, 1000, 1000]


def estimates(rng, rows):
    """Estimates around 0.7 (some below 0 or above 1); P' on a fine grid near 0 and near M, where
    part of the draws (up to all of them) leave it outside 0..M, and between; a few not finite."""
    edge = (rows - 6) // 3
    auc = np.concatenate([rng.normal(0.7, 0.2, rows - 6), [np.nan, 0.6, np.inf, 0.5, 1.3, -0.2]])
    pos = np.concatenate([np.linspace(-2, 400, edge), M - np.linspace(-2, 400, edge),
                          rng.uniform(400, M - 400, rows - 6 - 2 * edge), [100.0, np.nan, 120.0, -np.inf, 200.0, 150.0]])
    return auc, pos


@pytest.mark.parametrize("family, eps, kwargs", [
    ("local", 1.0, {}),
    ("gaussian", 1.0, {"delta": 1e-6}),
    ("distributed", 0.5, {}),
    ("rr", 1.0, {}),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the numpy code's, on the rows that are not finite
def test_the_compiled_pass_gives_the_numpy_codes_bits(monkeypatch, family, eps, kwargs):
    mech = make_mechanism(family, eps, clients=len(SIZES), **kwargs)
    auc, pos = estimates(np.random.default_rng(len(family) + int(10 * eps)), COMPILED_FROM_ROWS + 44)
    compiled = interval_bounds(mech, auc, pos, M, SIZES)
    monkeypatch.setenv("SECURE_AUC_KERNELS", "numpy")
    reference = interval_bounds(mech, auc, pos, M, SIZES)
    for got, want in zip(compiled, reference):
        assert np.array_equal(got, want, equal_nan=True)
    lo, hi, undefined = reference
    finite = np.isfinite(auc) & np.isfinite(pos)
    assert ((undefined > 0) & (undefined <= 0.01) & finite).any()  # quantiles of the defined draws only
    assert (np.isinf(lo) & finite).any() and (np.isfinite(lo) & (undefined == 0)).any()
    assert not np.isfinite(lo[~finite]).any()  # no interval (nan or -inf), as the numpy code gives
    # below the threshold, the numpy code itself: the same as each row's own call
    few = interval_bounds(mech, auc[:5], pos[:5], M, SIZES)
    for got, want in zip(few, reference):
        assert np.array_equal(got, want[:5], equal_nan=True)


def test_the_pass_is_cached_with_the_rank_steps_kernels():
    from secure_auc import interval_kernels
    from secure_auc.mpc import kernels

    assert interval_kernels.CACHE == kernels.cache_dir()
