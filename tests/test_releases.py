"""One release per state of the metric object, and no two releases under one seed share noise."""

import numpy as np
import pytest

from secure_auc import ClientData, FederatedAUC, Ledger, evaluate, make_mechanism
from secure_auc.dp.rng import release_key, release_seed

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _batches(seed=3, n=400):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.int8)
    s = np.round(rng.random(n) + 0.4 * y, 2)
    return s, y


def _feed(metric, s, y):
    half = len(s) // 2
    metric.update(s[:half], y[:half], client=0)
    metric.update(s[half:], y[half:], client=1)


def test_compute_releases_once_per_state_and_charges_once(tmp_path):
    s, y = _batches()
    ledger = Ledger(tmp_path / "ledger.db")
    metric = FederatedAUC(make_mechanism("laplace", 1.0), protocol="plain", ledger=ledger)
    _feed(metric, s, y)
    first = metric.compute()
    assert metric.compute() is first and metric.releases == 1  # no new release ...
    assert len(ledger.releases()) == 2  # ... and no new charge (one charge per client)
    metric.update(s[:5], y[:5], client=0)  # a new state: the next compute is a new release
    second = metric.compute()
    assert second is not first and metric.releases == 2 and len(ledger.releases()) == 4
    metric.reset()
    _feed(metric, s, y)
    assert metric.compute() is not second and metric.releases == 3


def test_two_releases_under_one_seed_have_independent_noise_and_reproduce():
    s, y = _batches()
    seed = 12345
    runs = []
    for _ in range(2):
        metric = FederatedAUC(make_mechanism("laplace", 1.0, allocation="split"), protocol="plain", seed=seed)
        out = []
        for epoch in range(3):  # the same labels each epoch: the same P, so equal P' would mean equal noise
            _feed(metric, s, y)
            r = metric.compute()
            out.append((r.estimated_positives, r.auc))
            metric.reset()
        runs.append(out)
    assert runs[0] == runs[1]  # reproducible under the seed
    ps = [p for p, _ in runs[0]]
    assert len(set(ps)) == 3  # the noise of localP differs in every release
    truth = float(y.sum())
    diffs = {round(a - b, 6) for a in ps for b in ps if a != b}
    assert 0.0 not in diffs and all(p != truth for p in ps)
    # release 0 is evaluate() under the seed itself, release i under release_seed(seed, i)
    clients = [ClientData(s[:200], y[:200]), ClientData(s[200:], y[200:])]
    mech = make_mechanism("laplace", 1.0, allocation="split")
    assert evaluate(clients, mech, protocol="plain", seed=seed).estimated_positives == ps[0]
    assert evaluate(clients, mech, protocol="plain", seed=release_seed(seed, 2)).estimated_positives == ps[2]
    assert evaluate(clients, mech, protocol="plain", seed=seed, release=2).estimated_positives == ps[2]


def test_release_seeds_are_distinct_secret_sized_and_one_way():
    seeds = [release_seed(1, i) for i in range(1, 50)]
    assert len(set(seeds)) == 49 and all(2**255 <= x < 2**256 for x in seeds)
    assert release_seed(1, 1) != release_seed(2, 1)
    assert len({release_key(9, i) for i in range(50)}) == 50 and release_key(9, 0) == 9
    with pytest.raises(ValueError):
        release_seed(-1, 1)


def test_a_ledger_accepts_each_release_of_one_seed_once(tmp_path):
    s, y = _batches()
    ledger = Ledger(tmp_path / "ledger.db")
    metric = FederatedAUC(make_mechanism("laplace", 1.0), protocol="plain", seed=99, ledger=ledger)
    for _ in range(2):  # release 1 has its own key: not the seed release 0 used
        _feed(metric, s, y)
        metric.compute()
        metric.reset()
    assert len(ledger.releases()) == 4
