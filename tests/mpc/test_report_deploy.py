"""The whole evaluation in a deployment: the configuration's [report] table, carried by every
service (server, helpers, dealer, clients) and by the deployed session; `session.evaluate`
returns the plain protocol's report bit for bit under the hooks' noise keys, and each client's
ledger is charged the composed cost once per evaluation."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

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

SIZES = [60, 41]  # the smallest deployment: server, 2 helpers, dealer, 2 clients
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
    from secure_auc.session import MPCSession

    ports = (free_port(), free_port(span=3), free_port())
    data = bench.write_deployment(tmp_path, SIZES, epochs=2, ports=ports, timeout=60.0,
                                  mechanism='name = "laplace"\nepsilon = 1.0\nallocation = "adaptive"\n' + REPORT)
    config = load_config(tmp_path / "deploy.toml")
    services = [bench.start_service(tmp_path, role) for role in bench.ROLES[:4 + len(SIZES)]]
    try:
        with MPCSession.connect(tmp_path / "deploy.toml", key=tmp_path / "keys" / "server.pem") as session:
            assert isinstance(session, MPCSession)  # a DeployedSession, registered as a kind of MPCSession
            results = [session.evaluate(epoch=epoch) for epoch in range(2)]
            assert session.shutdown() is None  # the end asked for: no error, and every service ends with 0
        codes = [p.communicate(timeout=30) and p.returncode for p in services]
    finally:
        bench.stop(services)
    assert codes == [0] * len(services), codes
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
    from secure_auc.mpc.roles.control import differences

    assert any("report.metrics" in d for d in differences(plain.agreed(), report.agreed()))
    pc = report.party_config()
    assert pc.report.spec.bands == 5 and pc.report.eps == {"bands": 1.0}
    assert pc.mechanisms[0].cost.epsilon == 1.0 and report.charged().cost.epsilon == 2.0


@pytest.mark.skipif(not (bench.Path(sys.executable).parent / "torchrun").exists(), reason="torchrun not installed")
def test_torchrun_and_client_commands_take_the_report_options(tmp_path):
    """The computing parties under torchrun (`python -m secure_auc.cli.compute`) and each client's
    `secure-auc client`, all with --metrics: the server prints the report (JSON: one object, as
    `secure-auc evaluate --json`), with --mechanism none the plain protocol's exact report, ties included."""
    from secure_auc import evaluate, make_mechanism

    from .test_deploy import BIN, _keygens, _ports

    rng = np.random.default_rng(4)
    clients, files = [], []
    for k, n in enumerate([50, 31]):
        s, y = np.round(rng.random(n), 1), (rng.random(n) < 0.4).astype(int)  # many ties
        y[0] = 1 - k
        f = tmp_path / f"c{k}.csv"
        f.write_text("score,label\n" + "".join(f"{a},{b}\n" for a, b in zip(s, y)))
        clients.append(ClientData(s, y)), files.append(f)
    keys = tmp_path / "keys"
    keys.mkdir()
    roles = ["server", "helper1", "dealer", "client0", "client1"]
    pub = _keygens({r: keys / f"{r}.pem" for r in roles})
    roster = tmp_path / "roster.json"
    roster.write_text(json.dumps({"server": pub["server"], "helpers": [pub["helper1"]], "dealer": pub["dealer"],
                                  "clients": [pub["client0"], pub["client1"]]}))
    base, master = _ports()
    metrics = ["roc", "pr", "ks", "lift", "precision-at", "calibration", "logloss", "brier"]
    common = ["--clients", "2", "--mechanism", "none", "--roster", str(roster), "--timeout", "60",
              "--metrics", *metrics, "--rank-bands", "20", "--top-fractions", "0.1", "0.3"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    compute = subprocess.Popen(
        [str(BIN / "torchrun"), "--nnodes", "1", "--nproc-per-node", "3", "--master-addr", "127.0.0.1",
         "--master-port", str(master), "-m", "secure_auc.cli.compute", *common,
         "--identity-template", str(keys / "{role}.pem"), "--client-port", str(base), "--json",
         "--csv", str(tmp_path / "tables")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    procs = [subprocess.Popen(
        [sys.executable, "-m", "secure_auc", "client", str(files[k]), "--client", str(k), *common,
         "--parties", *[f"127.0.0.1:{base + r}" for r in range(2)], "--identity", str(keys / f"client{k}.pem")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for k in range(2)]
    try:
        out, err = compute.communicate(timeout=240)
        client_err = [p.communicate(timeout=120)[1] for p in procs]
    finally:
        bench.stop([compute, *procs])
    assert compute.returncode == 0, err[-3000:] + "\n".join(e[-1500:] for e in client_err)
    assert all(p.returncode == 0 for p in procs), [e[-1500:] for e in client_err]
    report = json.loads(out.strip().splitlines()[-1])
    from secure_auc.report import ReportSpec

    spec = ReportSpec(metrics, bands=20, fractions=(0.1, 0.3))
    plain = evaluate(clients, make_mechanism("none"), protocol="plain", metrics=spec).extra
    keys = [k for k in REPORT_KEYS if k in plain]  # exact: no std
    assert len(keys) == len(REPORT_KEYS) - 1 and [k for k in REPORT_KEYS if k in report] == keys
    for key in keys:
        assert report[key] == json.loads(json.dumps(plain[key])), key
    assert report["auc"] == pytest.approx(roc_auc_score(np.concatenate([c.labels for c in clients]),
                                                        np.concatenate([c.scores for c in clients])))
    assert len(report["precision_at"]) == 2 and report["epsilon"] is None
    # --csv: the tables of each evaluation in a folder of its own, as `evaluate --csv` writes them
    written = sorted(p.name for p in (tmp_path / "tables" / "epoch-0").iterdir())
    assert written == ["calibration.csv", "lift.csv", "pr.csv", "roc.csv", "summary.csv"]
    roc = np.loadtxt(tmp_path / "tables" / "epoch-0" / "roc.csv", delimiter=",", skiprows=1)
    assert np.array_equal(roc[:, 2], report["roc"]["tpr"])


def test_the_report_options_of_the_torchrun_entry_and_the_client_command_are_checked(monkeypatch, tmp_path, capsys):
    from secure_auc.cli import compute, main

    for key, value in {"RANK": 0, "WORLD_SIZE": 4, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 1}.items():
        monkeypatch.setenv(key, str(value))
    args = compute.build_parser().parse_args(["--config", str(tmp_path / "deploy.toml"), "--identity-template", "x",
                                              "--metrics", "roc"])
    with pytest.raises(InputError, match="--metrics does not apply with --config"):
        compute._run_computing(args, 0.0)
    args = compute.build_parser().parse_args(["--clients", "2", "--roster", "r.json", "--identity-template", "x",
                                              "--metrics", "roc", "f1"])
    with pytest.raises(InputError, match="unknown metric 'f1'"):
        compute._run_computing(args, 0.0)
    args = compute.build_parser().parse_args(["--clients", "2", "--roster", "r.json", "--identity-template", "x",
                                              "--csv", str(tmp_path)])
    with pytest.raises(InputError, match=r"--csv needs a report: --metrics, or a \[report\] table"):
        compute._run_computing(args, 0.0)
    client = ["client", "x.csv", "--client", "0", "--clients", "2", "--roster", "r.json", "--parties", "a:1", "b:2",
              "--identity", "k.pem"]
    assert main(client + ["--rank-bands", "5"]) == 2
    assert capsys.readouterr().err.strip().endswith("--rank-bands does not apply without --metrics")


def test_a_deployed_session_takes_its_metrics_from_the_configuration(tmp_path):
    from secure_auc.session import MPCSession

    with pytest.raises(InputError, match=r"the configuration holds the mechanism, the layout and the metrics: its "
                                         r"\[report\] table"):
        MPCSession(deploy=tmp_path / "deploy.toml", key=tmp_path / "server.pem", metrics=["roc"])
