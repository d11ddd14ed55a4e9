"""The orthogonal/adaptive statistic X = n <v, y> is formed exactly beyond float64's 2^53."""

import numpy as np
import pytest

from secure_auc import builtin_clients, make_mechanism, midranks
from secure_auc.dp.mechanisms import noisy_quotient, orthogonal_statistic
from secure_auc.local_stats import LocalStatistics


@pytest.fixture(scope="module")
def one_client():
    (c,) = builtin_clients(1)  # the built-in set, M = 458,407, held by one client
    twice_ranks = np.rint(2 * midranks(c.scores)).astype(np.int64)
    return c, twice_ranks


def _exact(twice_ranks, labels):
    n, y = len(labels), labels.astype(bool)
    return n * int(twice_ranks[y].sum()) - int(twice_ranks.sum()) * int(y.sum())


def test_statistic_of_one_client_with_the_built_in_set(one_client):
    c, twice_ranks = one_client
    stats = LocalStatistics.from_client(twice_ranks / 2.0, c.labels)
    exact = _exact(twice_ranks, c.labels)
    assert abs(exact) > 2**53
    assert orthogonal_statistic(stats) == [exact]
    # what float64 gave: off by at least one unit of 2X
    n = stats.n
    float64 = np.rint(2.0 * n * stats.local_sum) - np.rint(2.0 * n * stats.mean_rank) * stats.local_p
    assert int(float64[0]) != exact


def test_release_is_the_rounded_exact_value(one_client, monkeypatch):
    c, twice_ranks = one_client
    stats = LocalStatistics.from_client(twice_ranks / 2.0, c.labels)
    mech = make_mechanism("laplace", 1.0, allocation="adaptive")
    units = np.array([[0], [1], [-12345]], dtype=np.int64)

    def noise(self, eps, rng, shape, sensitivity=1.0, grid=None, exact=True):  # none on P, `units` on X
        return np.zeros(shape, np.int64) if np.all(np.asarray(sensitivity) == 1.0) else units
    monkeypatch.setattr(type(mech.family), "sample_units", noise)
    released = mech.privatize(stats, np.random.default_rng(0), reps=3, total=len(c.labels))
    exact = _exact(twice_ranks, c.labels)
    n = len(c.labels)
    rbar = stats.mean_rank[0]
    expected = [rbar * stats.local_p[0] + (exact * 128 + int(u)) / (256 * n) for u in units[:, 0]]
    assert released.local_sum[:, 0].tolist() == expected


def test_quotient_paths_agree():
    # below 2^53 in float64, beyond in Python integers: both the correctly rounded exact quotient
    units = np.array([[3], [-7]], dtype=np.int64)
    small = noisy_quotient([10**12 + 1], units, [12345.0])
    assert small[:, 0].tolist() == [((10**12 + 1) * 128 + u) / (256 * 12345) for u in (3, -7)]
    big = noisy_quotient([2**60 + 1], units, [12345.0])
    assert big[:, 0].tolist() == [((2**60 + 1) * 128 + u) / (256 * 12345) for u in (3, -7)]
