"""The whole evaluation in the MPC protocol (helpers layout): each client's report vector
enters as shares and only the aggregate is opened, to the server; a session releases the
report each epoch with one composed charge; the secrecy search covers the new values and
catches a canary that hands one client's vector to the server (a host that does not mask it)."""

import multiprocessing

import numpy as np
import pytest

from secure_auc import Ledger, evaluate, make_mechanism
from secure_auc.data import ClientData
from secure_auc.dp import StatisticsMechanism
from secure_auc.dp.rng import client_key
from secure_auc.metrics import twice_midranks
from secure_auc.mpc.launch import launch_local
from secure_auc.mpc.party import PartyConfig
from secure_auc.session import MPCSession
from secure_auc.report import Layout, ReportSpec, client_vectors
from secure_auc.report.release import client_report, plan_report, report_plan

from .test_input_parties import _host_of, _unmasked_statistics_host_job
from .test_leakage import _scalar_patterns, _vector_patterns, client_secrets, leaks, recognisable_clients

ALL = ["roc", "pr", "ks", "lift", "precision-at", "calibration", "logloss", "brier"]
SEED = 5


def test_a_session_releases_the_plain_protocols_report_each_epoch_with_one_charge(tmp_path):
    rng = np.random.default_rng(1)
    sizes = [150, 1, 90]
    labels = [(rng.random(n) < 0.4).astype(np.int8) for n in sizes]
    labels[1][0] = 1
    mech = make_mechanism("laplace", 1.0)
    ledger = Ledger(tmp_path / "l.db")
    seed = (1 << 255) | 12345
    keys = [client_key(seed, k) for k in range(3)]
    with MPCSession(labels, mech, computing=2, timeout=60, metrics=ALL, ledger=ledger) as session:
        results = []
        for epoch in range(2):
            scores = [np.round(rng.random(n) + 0.3 * y, 2) for n, y in zip(sizes, labels)]
            results.append((session.evaluate(scores, noise_keys=keys), scores))
    assert multiprocessing.active_children() == []
    (first, scores0), (second, _) = results
    clients = [ClientData(s, y) for s, y in zip(scores0, labels)]
    plain = evaluate(clients, mech, protocol="plain", seed=seed, metrics=ALL)  # release 0: the same keys
    for key in ("roc", "pr", "ks", "ks_std", "average_precision", "lift", "precision_at", "recall_at", "calibration",
                "log_loss", "brier", "privacy"):
        assert first.extra[key] == plain.extra[key], key
    assert first.auc == plain.auc and first.epsilon == plain.epsilon == 1.0
    assert second.extra["roc"] != first.extra["roc"]  # evaluation 1: other scores, other noise
    charges = ledger.releases()
    assert len(charges) == 6 and all(c["epsilon"] == pytest.approx(1.0) for c in charges)
    assert {c["event"]["kind"] for c in charges} == {"composed"}


def _report_secrets(clients, keys, plan, secrets_by_client):
    """Add each client's report vector (exact and noisy: counts, sums) to its secrets; the
    opened aggregate report vector to the server's."""
    scores = np.concatenate([c.scores for c in clients])
    twice = twice_midranks(scores)
    layout = plan.layout(len(scores))
    offsets = np.cumsum([0] + [len(c) for c in clients])
    vectors = []
    for k, c in enumerate(clients):
        t = twice[offsets[k]: offsets[k + 1]]
        zeros = np.zeros(len(c), dtype=np.int64)
        exact = client_vectors(layout, t, c.labels, c.scores, zeros, 1)[0]
        noisy = client_report(layout, t, c.labels, c.scores, zeros, [keys[k]], plan.eps, plan.kind, plan.shares)[0]
        vectors.append(noisy)
        s = secrets_by_client[k]
        for v in (exact, noisy, noisy - exact):
            s.patterns |= _vector_patterns(v, ("int64",)) | _scalar_patterns(v)
            s.vectors.append(np.asarray(v, dtype=np.int64))
            s.scalars += [int(x) for x in v if abs(int(x)) >= 1 << 16]
    return np.sum(vectors, axis=0)


@pytest.mark.parametrize("canary", [None, "unmasked host"])
def test_only_the_aggregate_report_is_opened_to_the_server_and_the_canaries_are_caught(monkeypatch, canary):
    from secure_auc.mpc import input_parties

    clients = recognisable_clients([160, 140], seed=3)
    k = len(clients)
    mechanisms = (StatisticsMechanism(1.0, allocation="adaptive"),)
    keys = [client_key(SEED, i) for i in range(k)]
    spec = ReportSpec(["roc", "logloss", "brier"], bands=4, head=(), fractions=(), lift_bins=1)
    _, eps, kind, _ = plan_report(make_mechanism("laplace", 2.0), spec)
    plan = report_plan(spec, eps, kind, None, k)
    config = PartyConfig(mechanisms=mechanisms, clients=k, progress=False, computing=2, report=plan)
    if canary == "unmasked host":
        monkeypatch.setattr(input_parties, "host_job", _unmasked_statistics_host_job)
    received: dict = {}
    done = launch_local(clients, config, timeout=60, noise_keys=keys, hosts=k, received=received)
    secrets_by_client, aggregate, aggregates = client_secrets(clients, mechanisms, keys)
    opened = _report_secrets(clients, keys, plan, secrets_by_client)
    aggregate.patterns |= _scalar_patterns(opened)
    aggregate.scalars += [int(x) for x in opened if abs(int(x)) >= 1 << 16]
    found = leaks(received, secrets_by_client, aggregate, owner=_host_of)
    if canary is None:
        assert done[0].report == [int(x) for x in opened]  # the server opened exactly the sum of the noisy vectors
        assert found == []
        assert all(getattr(done[p], "report", None) is None for p in done if p != 0)
    else:
        assert any(f.startswith("process 0 holds") and "client 0's" in f for f in found), found
