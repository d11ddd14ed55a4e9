"""MPC sessions: the parties start once and evaluate new scores each epoch."""

import multiprocessing

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from secure_auc.evaluate import error_bars
from secure_auc.data import ClientData
from secure_auc.dp import StatisticsMechanism
from secure_auc.dp.rng import ClientRngs, client_key, release_key
from secure_auc.session import MPCSession
from secure_auc.protocol import Client, Server
from secure_auc.protocol.plain import run_plain
from secure_auc.validation import InputError


def test_a_session_evaluates_each_epoch_exactly_and_stops_its_parties():
    rng = np.random.default_rng(4)
    sizes = [120, 1, 60]
    labels = [(rng.random(n) < 0.4).astype(np.int8) for n in sizes]
    labels[1][0] = 1
    mechanism = StatisticsMechanism(1.0, allocation="adaptive")
    with MPCSession(labels, mechanism, computing=2, timeout=30) as session:
        for epoch in range(3):
            scores = [np.round(rng.random(n) + 0.2 * y, 2) for n, y in zip(sizes, labels)]  # ties across clients
            keys = [client_key(100 + epoch, k) for k in range(len(sizes))]
            result = session.evaluate(scores, noise_keys=keys)
            clients = [ClientData(s, y) for s, y in zip(scores, labels)]
            roles = [Client(k, c, mechanism, ClientRngs.from_key(release_key(keys[k], epoch)))  # evaluation i: key i
                     for k, c in enumerate(clients)]
            plain_estimate, plain_aggregate, _ = run_plain(roles, Server(mechanism))
            assert result.estimated_positives == float(plain_aggregate.positives)  # the same noise, the same ranks
            assert result.auc == float(plain_estimate.auc)
            # the same result as evaluate(): std and interval from the same public quantities
            std, lo, hi = error_bars(mechanism, float(plain_estimate.auc), float(plain_aggregate.positives),
                                     plain_aggregate.total, sizes)
            assert (result.std, result.ci_low, result.ci_high) == (std, lo, hi) and std > 0
            assert result.ci_low < result.auc < result.ci_high
            assert result.extra["rank_step_seconds"] > 0 and result.protocol == "mpc"
            # start-up only in the first evaluation's report, and not inside its seconds
            assert ("startup_seconds" in result.extra) == (epoch == 0)
        assert 0 < session.startup_seconds
        exact = session.evaluate(scores)  # fresh noise keys: a different estimate near the truth
        truth = roc_auc_score(np.concatenate(labels), np.concatenate(scores))
        assert abs(exact.auc - truth) < 0.2
        with pytest.raises(InputError, match="score arrays"):
            session.evaluate(scores[:2])
        with pytest.raises(InputError, match="client 1: scores"):
            session.evaluate([scores[0], np.array([np.nan]), scores[2]])
    assert multiprocessing.active_children() == []


def test_the_metric_object_and_the_function_run_on_a_session():
    # also the second session of this process: its parties start from the same fork server
    from secure_auc import FederatedAUC, dp_roc_auc_score, make_mechanism

    rng = np.random.default_rng(7)
    client = rng.integers(0, 2, 200)
    y = (rng.random(200) < 0.4).astype(np.int8)
    labels = [y[client == k] for k in range(2)]
    with MPCSession(labels, make_mechanism("none"), computing=2, timeout=30) as session:
        metric = FederatedAUC(session=session)
        for epoch in range(2):
            s = np.round(rng.random(200) + 0.3 * y, 1)
            for k in range(2):  # each client's scores batch by batch, in the order of its labels
                for batch in np.array_split(s[client == k], 3):
                    metric.update(batch, client=k)
            assert metric.compute().auc == pytest.approx(roc_auc_score(y, s), abs=1e-12)
            metric.reset()
            assert dp_roc_auc_score(y, s, client=client, session=session).auc == pytest.approx(roc_auc_score(y, s))
        with pytest.raises(InputError, match="differs from the labels"):
            dp_roc_auc_score(1 - y, s, client=client, session=session)
        with pytest.raises(InputError, match="update\\(\\) takes only scores"):
            metric.update(s[:3], y[:3], client=0)
    assert multiprocessing.active_children() == []
