"""Distributed noise on the aggregate: share distribution, centred estimator, split, target."""

import math

import numpy as np
import pytest
from scipy.stats import chi2

from secure_auc.data import make_ctr_dataset
from secure_auc.dp.distributed import DistributedNoise, centred_std, optimal_split
from secure_auc.evaluate import builtin_clients, evaluate
from secure_auc.local_stats import LocalStatistics
from secure_auc.metrics import auc_from_sums, midranks, rank_auc
from secure_auc.simulation.engine import Simulator
from secure_auc.validation import InputError


def dlap_pmf(x, eps, sens):
    q = math.exp(-eps / sens)
    return (1 - q) / (1 + q) * q ** np.abs(x)


@pytest.mark.parametrize("honest, clients", [(1, 1), (7, 7), (5, 20)])
def test_sum_of_honest_shares_is_discrete_laplace(honest, clients):
    """Any h = ceil(f K) shares sum to DLap(eps / Delta); chi-square goodness of fit."""
    mech = DistributedNoise(1.0, clients, honest_fraction=honest / clients, split=0.5)
    assert mech.honest == honest
    rng = np.random.default_rng(0)
    draws = 200_000
    e_d, e_p = mech._shares(rng, (draws, honest), total=11)  # sensitivity of D = M - 1 = 10
    for noise, eps, sens in ((e_d.sum(axis=1), 0.5, 10), (e_p.sum(axis=1), 0.5, 1)):
        assert np.all(noise == np.round(noise))  # integers
        edges = np.arange(-40, 41) if sens == 10 else np.arange(-8, 9)
        expected = dlap_pmf(edges, eps, sens) * draws
        observed = np.array([(noise == x).sum() for x in edges])
        tail_e = draws - expected.sum()
        tail_o = draws - observed.sum()
        stat = ((observed - expected) ** 2 / expected).sum() + (tail_o - tail_e) ** 2 / tail_e
        assert stat < chi2.ppf(0.999, len(edges)), stat


def test_all_shares_have_k_over_h_times_the_variance():
    mech = DistributedNoise(1.0, 40, honest_fraction=0.25, split=0.5)
    rng = np.random.default_rng(1)
    _, e_p = mech._shares(rng, (100_000, 40), total=11)
    q = math.exp(-0.5)
    one = 2 * q / (1 - q) ** 2
    assert e_p.sum(axis=1).var() == pytest.approx(one * 40 / 10, rel=0.03)


def test_centred_release_keeps_the_standard_estimator_exact():
    """With the shares set to zero the server's eq. (1) gives 1/2 + C / (P N), the exact AUC."""
    scores, labels = make_ctr_dataset(3000, seed=2)
    r = midranks(scores)
    owner = np.arange(3000) % 7
    stats = LocalStatistics.from_owner(r, labels, owner, 7)

    class Zero(DistributedNoise):
        def _shares(self, rng, shape, total):
            return [np.zeros(shape), np.zeros(shape)]

    noisy = Zero(1.0, 7).privatize(stats, np.random.default_rng(0), total=3000)
    p = noisy.local_p.sum()
    assert auc_from_sums(noisy.local_sum.sum(), p, 3000 - p) == pytest.approx(rank_auc(labels, scores), abs=1e-12)


def test_optimal_split_minimises_the_simulated_std():
    sim = Simulator(*make_ctr_dataset(50_000, seed=3))
    best = optimal_split(0.75, sim.p / sim.m)
    grid = [0.4, 0.55, best, 0.85, 0.95]
    stds = []
    for s in grid:
        mech = DistributedNoise(1.0, 20, split=s)
        stds.append(sim.mechanism_estimates(mech, 20, "iid", reps=1500, seed=4).std(ddof=1))
    # the formula's split is within sampling error (1/sqrt(2R) = 1.8 %) of the best grid point
    assert stds[2] <= min(stds) * 1.06
    for s, sd in zip(grid, stds):
        assert sd == pytest.approx(centred_std(sim.m, sim.p, sim.true_auc, 1.0, s, 1.0, 20), rel=0.08)


def test_target_std_independent_of_clients():
    """eps = 1, all honest: std <= 1.5e-5 on the built-in data for every K (R = 100, and the delta-method)."""
    sim = Simulator(*make_ctr_dataset())
    for k in (10, 4584, 45840):
        c = sim.cell("distributed", 1.0, clients=k, partition="iid", reps=100, seed=5)
        assert c.std <= 1.5e-5 * 1.2  # sampling error of a std from 100 runs is ~7 %
        assert abs(c.mean - sim.true_auc) < 4 * c.std / 10
    assert centred_std(sim.m, sim.p, sim.true_auc, 1.0, optimal_split(0.75, 0.25)) <= 1.4e-5


def test_plain_protocol_refuses_distributed_noise():
    clients = builtin_clients(3, samples=500)
    with pytest.raises(InputError, match="use --protocol mpc"):
        evaluate(clients, DistributedNoise(1.0, 3), protocol="plain")


@pytest.mark.parametrize("kwargs, match", [
    (dict(epsilon=0, clients=3), "epsilon must be > 0"),
    (dict(epsilon=1, clients=3, honest_fraction=0), r"honest fraction must be in \(0, 1\]"),
    (dict(epsilon=1, clients=3, noise="gaussian"), "delta"),
    (dict(epsilon=1, clients=3, split=1.0), r"split must be in \(0, 1\)"),
])
def test_parameters_checked(kwargs, match):
    with pytest.raises(InputError, match=match):
        DistributedNoise(**kwargs)
