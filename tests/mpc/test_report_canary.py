"""Canary for the report's secrecy: computing parties that open one client's report shares
(host 0's row of the report's columns) to the server instead of the sum are caught by the
search of what each process opened, and only through the report's values."""

import numpy as np

from secure_auc import make_mechanism
from secure_auc.dp import StatisticsMechanism
from secure_auc.dp.rng import client_key
from secure_auc.metrics import twice_midranks
from secure_auc.mpc.launch import launch_local
from secure_auc.mpc.party import PartyConfig
from secure_auc.report import ReportSpec
from secure_auc.report.release import client_report, plan_report, report_plan

from .test_input_parties import _host_of
from .test_leakage import client_secrets, leaks, recognisable_clients
from .test_report_mpc import SEED, _report_secrets


def test_computing_parties_that_open_one_clients_report_are_caught(monkeypatch):
    from secure_auc.mpc import input_parties

    from .canaries import one_report_opened_job

    clients = recognisable_clients([160, 140], seed=3)
    k = len(clients)
    mechanisms = (StatisticsMechanism(1.0, allocation="adaptive"),)
    keys = [client_key(SEED, i) for i in range(k)]  # fixed keys: the opened values are the same every run
    spec = ReportSpec(["roc", "logloss", "brier"], bands=4, head=(), fractions=(), lift_bins=1)
    _, eps, kind, _ = plan_report(make_mechanism("laplace", 2.0), spec)
    plan = report_plan(spec, eps, kind, None, k)
    config = PartyConfig(mechanisms=mechanisms, clients=k, progress=False, computing=2, report=plan)
    monkeypatch.setattr(input_parties, "computing_job", one_report_opened_job)
    received: dict = {}
    done = launch_local(clients, config, timeout=60, noise_keys=keys, hosts=k, received=received)

    # what the canary did: the AUC's statistics summed as before, the report's columns client 0's vector
    auc_only, _, aggregates = client_secrets(clients, mechanisms, keys)
    assert done[0].aggregates == aggregates
    twice = twice_midranks(np.concatenate([c.scores for c in clients]))[: len(clients[0])]
    mine = client_report(plan.layout(sum(len(c) for c in clients)), twice, clients[0].labels, clients[0].scores,
                         np.zeros(len(clients[0]), dtype=np.int64), [keys[0]], plan.eps, plan.kind, plan.shares)[0]
    assert done[0].report == [int(x) for x in mine]

    # without the report's values among the secrets the search finds nothing: the AUC's are summed
    assert leaks(received, auc_only, client_secrets(clients, mechanisms, keys)[1], owner=_host_of) == []
    secrets_by_client, aggregate, _ = client_secrets(clients, mechanisms, keys)
    _report_secrets(clients, keys, plan, secrets_by_client)
    found = leaks(received, secrets_by_client, aggregate, owner=_host_of)
    assert any(f.startswith("process 0 holds") and "client 0's" in f for f in found), found
    assert not any("client 1's" in f for f in found), found
    assert not any(f.startswith(("process 1 ", "process 2 ")) for f in found), found  # opened to the server only
