"""The plain-sort protocol: exactness, the server's view, reproducibility."""

import dataclasses

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from secure_auc.data import ClientData
from secure_auc.dp import NoNoise, RandomizedResponse, StatisticsMechanism, client_rngs, debias_auc
from secure_auc.evaluate import builtin_clients, evaluate
from secure_auc.metrics import rank_auc
from secure_auc.protocol import Client, ScoresMessage, Server, StatisticsMessage
from secure_auc.protocol.plain import run_plain


def tied_clients(sizes, seed=0, distinct=7):
    rng = np.random.default_rng(seed)
    out = []
    for k, n in enumerate(sizes):
        s = rng.integers(0, distinct, n) / distinct
        y = (rng.random(n) < 0.4).astype(np.int8)
        out.append(ClientData(s, y, f"c{k}"))
    return out


def run(clients, mechanism, seed=0):
    roles = [Client(k, c, mechanism, client_rngs(seed, k)) for k, c in enumerate(clients)]
    est, agg, inbox = run_plain(roles, Server(mechanism))
    return est, agg, inbox, roles


@pytest.mark.parametrize("sizes", [[1, 5], [3, 1, 9, 2], [100, 57, 1, 300], [2000]])
def test_no_noise_equals_sklearn_with_ties(sizes):
    clients = tied_clients(sizes, seed=len(sizes))
    y = np.concatenate([c.labels for c in clients])
    s = np.concatenate([c.scores for c in clients])
    if y.min() == y.max():
        y[0] = 1 - y[0]
        clients[0].labels[0] = y[0]
    est, agg, _, _ = run(clients, NoNoise())
    assert abs(float(est.auc) - roc_auc_score(y, s)) <= 1e-12
    assert agg.total == sum(sizes) and agg.positives == y.sum()


@pytest.mark.parametrize(
    "mechanism",
    [NoNoise(), RandomizedResponse(1.0), StatisticsMechanism(1.0, allocation="adaptive"),
     StatisticsMechanism(2.0, noise="gaussian", delta=1e-5, allocation="split", sensitivity="global")],
)
def test_server_receives_no_label_and_no_noise(mechanism):
    clients = tied_clients([50, 80, 30], seed=5, distinct=1000)
    est, agg, inbox, roles = run(clients, mechanism)
    kinds = {type(m) for m in inbox.messages}
    assert kinds <= {ScoresMessage, StatisticsMessage}
    # the message classes carry nothing but these fields
    assert [f.name for f in dataclasses.fields(ScoresMessage)] == ["client", "scores"]
    assert [f.name for f in dataclasses.fields(StatisticsMessage)] == ["client", "local_sum_fixed", "local_p_fixed", "n"]
    scores_msgs = [m for m in inbox.messages if isinstance(m, ScoresMessage)]
    stats_msgs = [m for m in inbox.messages if isinstance(m, StatisticsMessage)]
    assert len(scores_msgs) == len(stats_msgs) == 3
    for msg, c in zip(scores_msgs, clients):
        # the scores, as a shuffled multiset, and nothing else
        assert msg.scores.dtype == c.scores.dtype
        np.testing.assert_array_equal(np.sort(msg.scores), np.sort(c.scores))
        assert not np.array_equal(msg.scores, c.scores)
    for msg, role in zip(stats_msgs, roles):
        # the noisy statistics only: the noise itself never appears, only its sum with the statistic
        exact = role.local_statistics()
        if isinstance(mechanism, StatisticsMechanism):
            assert msg.local_sum_fixed / 256 != pytest.approx(exact.local_sum[0], abs=1e-6)
        assert msg.n == len(role)


def test_rr_protocol_debiases_the_flipped_label_auc():
    clients = builtin_clients(20, samples=5000, data_seed=2)
    mech = RandomizedResponse(2.0)
    est, agg, _, roles = run(clients, mech, seed=9)
    flipped = np.concatenate([r.labels for r in roles])
    s = np.concatenate([c.scores for c in clients])
    noisy = rank_auc(flipped, s)
    assert float(est.raw_auc) == pytest.approx(noisy, abs=1e-12)
    p = flipped.sum()
    assert float(est.auc) == pytest.approx(float(debias_auc(noisy, p, len(s) - p, 2.0).auc), abs=1e-12)


def test_same_seed_same_estimate_and_different_seed_differs():
    clients = builtin_clients(10, samples=5000)
    mech = StatisticsMechanism(1.0, allocation="adaptive")
    a = evaluate(clients, mech, protocol="plain", seed=1).auc
    b = evaluate(clients, mech, protocol="plain", seed=1).auc
    c = evaluate(clients, mech, protocol="plain", seed=2).auc
    assert a == b and a != c


def test_unseeded_runs_differ():
    clients = builtin_clients(10, samples=5000)
    mech = StatisticsMechanism(1.0)
    assert evaluate(clients, mech, protocol="plain").auc != evaluate(clients, mech, protocol="plain").auc
