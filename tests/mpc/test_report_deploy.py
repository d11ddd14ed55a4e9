"""The whole evaluation in a deployment: the configuration's [report] table, carried by every
service (server, helpers, dealer, clients) and by the deployed session; `session.evaluate`
returns the plain protocol's report bit for bit under the hooks' noise keys, and each client's
ledger is charged the composed cost once per evaluation."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from secure_auc.data import ClientData
from secure_auc.dp.accountant import Ledger, label_commitment
from secure_auc.dp.rng import ClientRngs, client_key, release_key
from secure_auc.mpc.launch import free_port
from secure_auc.protocol import Client, Server
from secure_auc.protocol.plain import run_plain
from secure_auc.validation import InputError

_spec = importlib.util.spec_from_file_location("bench_deploy", Path(__file__).parents[2] / "scripts" / "bench_deploy.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

SIZES = [60, 41, 30]
REPORT = '\n[report]\nmetrics = ["roc", "pr", "ks", "lift", "precision-at", "calibration", "logloss", "brier"]\n' \
         'split = { auc = 0.6 }\nbands = 10\ntop_fractions = [0.1, 0.25]\n'
REPORT_KEYS = ("roc", "pr", "ks", "ks_at", "ks_std", "average_precision", "lift", "gain", "precision_at", "recall_at",
               "calibration", "log_loss", "brier", "privacy")


def plain_expected(folder, labels, config, epoch):
    """The plain protocol's result and report with the keys the hooks give evaluation ``epoch``
    (evaluation i of a client service draws from release_key(key, i))."""
    from secure_auc.evaluate import plain_report

    auc_mechanism, plan, cost = config.report()
    clients = [ClientData(bench.model_scores(folder, k, epoch), y) for k, y in enumerate(labels)]
    roles = [Client(k, c, auc_mechanism, ClientRngs.from_key(release_key(client_key(1000 + epoch, k), epoch)))
             for k, c in enumerate(clients)]
    estimate, aggregate, inbox = run_plain(roles, Server(auc_mechanism))
    report = plain_report(roles, clients, (plan.spec, plan.eps, plan.kind, cost, config.mechanism()), inbox)
    return estimate, aggregate, report


def test_deployed_services_release_the_configured_report(tmp_path):
    from secure_auc.deploy import load_config
    from secure_auc.mpc.session import MPCSession

    ports = (free_port(), free_port(span=3), free_port())
    data = bench.write_deployment(tmp_path, SIZES, epochs=2, ports=ports, timeout=60.0,
                                  mechanism='name = "laplace"\nepsilon = 1.0\nallocation = "adaptive"\n' + REPORT)
    config = load_config(tmp_path / "deploy.toml")
    services = [bench.start_service(tmp_path, role) for role in bench.ROLES]
    try:
        with MPCSession.connect(tmp_path / "deploy.toml", key=tmp_path / "keys" / "server.pem") as session:
            results = [session.evaluate(epoch=epoch) for epoch in range(2)]
    finally:
        bench.stop(services)
    for epoch, result in enumerate(results):
        estimate, aggregate, report = plain_expected(tmp_path, data["labels"], config, epoch)
        assert result.auc == float(estimate.auc) and result.estimated_positives == float(aggregate.positives)
        for key in REPORT_KEYS:
            assert result.extra[key] == report[key], key
        assert result.epsilon == 1.0 and result.extra["privacy"] == {"auc": 0.6, "bands": pytest.approx(0.1),
                                                                      "calibration": pytest.approx(0.1),
                                                                      "log_loss": pytest.approx(0.1),
                                                                      "brier": pytest.approx(0.1)}
        tpr = result.extra["roc"]["tpr"]
        assert np.all(np.diff(tpr) >= 0) and 0 <= min(tpr) and max(tpr) <= 1
    assert results[0].extra["roc"] != results[1].extra["roc"]  # another epoch, other noise
    for k, y in enumerate(data["labels"]):  # one composed charge of the total eps per evaluation
        charges = Ledger(tmp_path / f"ledger-{k}.db").releases()
        assert len(charges) == 2 and all(c["epsilon"] == pytest.approx(1.0) for c in charges)
        assert {c["event"]["kind"] for c in charges} == {"composed"}
        assert Ledger(tmp_path / f"ledger-{k}.db").spent(label_commitment(y)).releases == 2


@pytest.mark.parametrize("table, message", [
    ('[report]\nmetrics = ["f1"]\n', r"\[report\]: unknown metric 'f1'"),
    ('[report]\nmetrics = ["roc"]\nfoo = 1\n', r"unknown option report.foo"),
    ('[report]\nmetrics = ["roc"]\nsplit = 0.5\n', r"report.split must be a table"),
    ('[report]\nmetrics = ["roc"]\nbands = 0\n', r"\[report\]: bands must be a positive integer"),
])
def test_a_report_table_that_cannot_run_is_refused_naming_the_file(tmp_path, table, message):
    from secure_auc.deploy import load_config

    text = ('[deployment]\ncomputing_parties = 2\n[mechanism]\nname = "laplace"\nepsilon = 1.0\n'
            '[server]\nrendezvous = "10.0.0.1:29500"\nclients = "10.0.0.1:29600"\nsession = "127.0.0.1:29700"\n'
            '[[helpers]]\nclients = "10.0.0.2:29600"\n[[clients]]\n[[clients]]\n' + table)
    (tmp_path / "deploy.toml").write_text(text)
    with pytest.raises(InputError, match=message) as err:
        load_config(tmp_path / "deploy.toml")
    assert str(tmp_path / "deploy.toml") in str(err.value)


def test_a_report_table_is_agreed_at_connection_time_and_sets_the_parties_plan(tmp_path):
    from secure_auc.deploy import load_config

    text = ('[deployment]\ncomputing_parties = 2\n[mechanism]\nname = "laplace"\nepsilon = 2.0\n'
            '[server]\nrendezvous = "10.0.0.1:29500"\nclients = "10.0.0.1:29600"\nsession = "127.0.0.1:29700"\n'
            '[[helpers]]\nclients = "10.0.0.2:29600"\n[[clients]]\n[[clients]]\n')
    (tmp_path / "auc.toml").write_text(text)
    (tmp_path / "report.toml").write_text(text + '[report]\nmetrics = ["ks"]\nbands = 5\n')
    plain, report = load_config(tmp_path / "auc.toml"), load_config(tmp_path / "report.toml")
    assert plain.report() is None and plain.party_config().report is None
    assert plain.party_config().mechanisms[0].cost.epsilon == plain.charged().cost.epsilon == 2.0
    assert report.agreed()["report.metrics"] == ["ks"] and "report.metrics" not in plain.agreed()
    pc = report.party_config()
    assert pc.report.spec.bands == 5 and pc.report.eps == {"bands": 1.0}
    assert pc.mechanisms[0].cost.epsilon == 1.0 and report.charged().cost.epsilon == 2.0
