"""The whole evaluation with every client a computing party (the clients layout): each client
computes its report vector from its own global ranks, the vectors are summed in shares with
the AUC's statistics and only the sum is opened, to the server, which derives the report as
the plain protocol's server does (bit for bit under the same keys; without noise, equal to
scikit-learn at the band edges, ties included).  The audit of what each process received and
opened covers the report's values and catches a canary that opens one client's vector."""

import json

import numpy as np
import pytest
from sklearn.metrics import precision_recall_curve, roc_curve

from secure_auc import ClientData, FederatedAUC, evaluate, make_mechanism
from secure_auc.cli import main
from secure_auc.data import write_client_csv
from secure_auc.dp import StatisticsMechanism
from secure_auc.dp.rng import client_key
from secure_auc.mpc.launch import launch_local
from secure_auc.mpc.party import PartyConfig
from secure_auc.report import ReportSpec
from secure_auc.report.release import plan_report, report_plan

from .test_leakage import _scalar_patterns, client_secrets, leaks, recognisable_clients
from .test_report_mpc import _report_secrets

ALL = ["roc", "pr", "ks", "lift", "precision-at", "calibration", "logloss", "brier"]
KEYS = ("roc", "pr", "ks", "ks_at", "average_precision", "lift", "precision_at", "recall_at", "calibration",
        "log_loss", "brier", "privacy")
CLIENTS = {"computing": 0, "timeout": 60, "progress": False}


def _data(sizes=(150, 1), seed=4):
    """Clients with many ties across them (scores on a grid of 0.05), one with one sample."""
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        y = (rng.random(n) < 0.4).astype(np.int8)
        out.append(ClientData(np.round(np.clip(rng.random(n) * 0.8 + 0.2 * y, 0, 1) * 20) / 20, y))
    return out


def _at_edges(out, s, thr, values, empty=0.0):
    """scikit-learn's values at the thresholds of the report's points (the lowest score above
    each band edge; ``empty`` where no sample is above it)."""
    top = np.sort(s)[::-1]
    counts = np.rint(np.array(out["roc"]["fraction"][1:]) * len(s)).astype(int)
    idx = [np.flatnonzero(thr == top[c - 1])[0] if c else -1 for c in counts]
    return [np.where(counts > 0, v[idx], empty) for v in values]


def test_the_clients_layout_releases_the_plain_protocols_report_bit_for_bit():
    clients = _data()
    seed = (1 << 200) | 777
    mech = make_mechanism("laplace", 1.0)
    mpc = evaluate(clients, mech, protocol="mpc", seed=seed, metrics=ALL, mpc_options=CLIENTS)
    plain = evaluate(clients, mech, protocol="plain", seed=seed, metrics=ALL)
    assert mpc.extra["layout"] == "clients"
    for key in KEYS + ("ks_std",):
        assert mpc.extra[key] == plain.extra[key], key
    assert mpc.auc == plain.auc and mpc.epsilon == plain.epsilon == 1.0
    assert mpc.extra["privacy"]["auc"] >= 0.5 and sum(mpc.extra["privacy"].values()) == pytest.approx(1.0)


def test_without_noise_the_metric_object_in_the_clients_layout_equals_scikit_learn_at_the_band_edges():
    clients = _data(sizes=(90, 70), seed=9)
    spec = ReportSpec(["auc", "roc", "pr", "ks", "precision-at"], bands=7, head=(0.02,), fractions=(0.1, 0.5))
    metric = FederatedAUC(make_mechanism("none"), protocol="mpc", mpc_options=CLIENTS, metrics=spec)
    for k, c in enumerate(clients):
        metric.update(c.scores, c.labels, client=k)
    out = metric.compute().extra
    s = np.concatenate([c.scores for c in clients])
    y = np.concatenate([c.labels for c in clients])
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    f, t = _at_edges(out, s, thr, [fpr, tpr])
    assert len(f) >= 8 and len(set(s)) < len(s)  # 7 bands, the head and the top fractions; ties
    assert out["roc"]["fpr"][1:] == pytest.approx(f, abs=1e-15)
    assert out["roc"]["tpr"][1:] == pytest.approx(t, abs=1e-15)
    assert out["ks"] == pytest.approx(np.max(t - f), abs=1e-15)
    prec, _, pthr = precision_recall_curve(y, s)
    (p,) = _at_edges(out, s, pthr, [prec], empty=1.0)
    assert out["pr"]["precision"][1:] == pytest.approx(p, abs=1e-15)
    ys = y[np.argsort(-s, kind="stable")]
    for key, frac in out["top_fraction"].items():
        c = int(round(frac * len(s)))
        assert out["precision_at"][key] == pytest.approx(ys[:c].mean() if c else 1.0, abs=1e-15)
    plain = evaluate(clients, make_mechanism("none"), protocol="plain", metrics=spec).extra
    assert all(out[key] == plain[key] for key in ("roc", "pr", "ks", "precision_at", "recall_at"))


def test_the_cli_with_layout_clients_prints_the_report(tmp_path, capsys):
    clients = _data(sizes=(60, 50), seed=2)
    paths = []
    for k, c in enumerate(clients):
        write_client_csv(tmp_path / f"c{k}.csv", c.scores, c.labels)
        paths.append(str(tmp_path / f"c{k}.csv"))
    assert main(["evaluate", "--protocol", "mpc", "--layout", "clients", *paths, "--mechanism", "none", "--json",
                 "--metrics", "roc", "ks", "--rank-bands", "5", "--top-fractions", "0.1"]) == 0
    d = json.loads(capsys.readouterr().out)
    s = np.concatenate([c.scores for c in clients])
    y = np.concatenate([c.labels for c in clients])
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    f, t = _at_edges(d, s, thr, [fpr, tpr])
    assert d["roc"]["fpr"][1:] == pytest.approx(f, abs=1e-15) and d["roc"]["tpr"][1:] == pytest.approx(t, abs=1e-15)
    assert d["ks"] == pytest.approx(np.max(t - f), abs=1e-15)


@pytest.mark.parametrize("canary", [None, "one client's vector opened"])
def test_only_the_aggregate_report_is_opened_to_the_server_and_the_canary_is_caught(monkeypatch, canary):
    from secure_auc.mpc import launch

    from .canaries import one_client_report_opened_job

    clients = recognisable_clients([160, 140], seed=3)
    k = len(clients)
    mechanisms = (StatisticsMechanism(1.0, allocation="adaptive"),)
    keys = [client_key(5, i) for i in range(k)]
    spec = ReportSpec(["roc", "logloss", "brier"], bands=4, head=(), fractions=(), lift_bins=1)
    # the report's noise on the aggregate (each client draws a share of it): the helpers layout's
    # audit covers per-client noise
    distributed = make_mechanism("distributed", 2.0, clients=k)
    _, eps, kind, _ = plan_report(distributed, spec)
    plan = report_plan(spec, eps, kind, distributed, k)
    assert plan.kind == "aggregate" and plan.shares == k
    config = PartyConfig(mechanisms=mechanisms, clients=k, progress=False, computing=0, report=plan)
    if canary is not None:
        monkeypatch.setattr(launch, "run_party", one_client_report_opened_job)
    received: dict = {}
    done = launch_local(clients, config, timeout=60, noise_keys=keys, received=received)
    secrets_by_client, aggregate, _ = client_secrets(clients, mechanisms, keys)
    opened = _report_secrets(clients, keys, plan, secrets_by_client)
    aggregate.patterns |= _scalar_patterns(opened)
    aggregate.scalars += [int(x) for x in opened if abs(int(x)) >= 1 << 16]
    found = leaks(received, secrets_by_client, aggregate)  # client k is process k + 1
    if canary is None:
        assert done[0].report == [int(x) for x in opened]  # exactly the sum of the clients' noisy vectors
        assert found == []
        assert all(done[r].report is None for r in done if r != 0)
    else:
        assert done[0].report != [int(x) for x in opened]
        assert any(f.startswith("process 0 holds") and "client 0's" in f for f in found), found


def test_the_torchrun_entry_of_the_clients_layout_releases_the_plain_protocols_report(tmp_path, free_port):
    import os
    import subprocess

    from .conftest import BIN, PARTY

    clients = _data(sizes=(70, 40), seed=6)
    seed = (1 << 255) | 99
    paths = []
    for k, c in enumerate(clients):
        write_client_csv(tmp_path / f"c{k}.csv", c.scores, c.labels)
        paths.append(str(tmp_path / f"c{k}.csv"))
        key = tmp_path / f"client{k}.key"
        key.write_text(f"{client_key(seed, k):032x}\n")
        os.chmod(key, 0o600)
    cmd = [str(BIN / "torchrun"), "--nproc-per-node", "3", "--master-port", str(free_port), str(PARTY), *paths,
           "--provider", "tfp", "--mechanism", "laplace", "--epsilon", "1", "--json", "--timeout", "60",
           "--noise-key-file", str(tmp_path / "client{client}.key"),
           "--metrics", "roc", "ks", "logloss", "--rank-bands", "5", "--top-fractions", "0.1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    d = json.loads(res.stdout.strip().splitlines()[-1])
    spec = ReportSpec(["roc", "ks", "logloss"], bands=5, fractions=(0.1,))
    plain = evaluate(clients, make_mechanism("laplace", 1.0), protocol="plain", seed=seed, metrics=spec)
    for key in ("roc", "ks", "ks_std", "log_loss", "privacy"):
        assert d[key] == plain.extra[key], key
    assert d["auc"] == plain.auc and d["epsilon"] == plain.epsilon == 1.0
    assert d["protocol"] == "mpc" and d["samples"] == 110 and d["clients"] == 2
