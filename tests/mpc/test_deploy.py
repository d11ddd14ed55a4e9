"""The helpers layout deployed as separate programs: the computing parties under torchrun,
each client its own `secure-auc client` process, keys and roster from `secure-auc keygen`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from secure_auc.mpc.launch import free_port
from secure_auc.validation import InputError

from .mapped import MappedFiles

BIN = Path(sys.executable).parent


def _keygens(paths: dict) -> dict:
    """``secure-auc keygen`` for each path (independent commands, so at once): the public keys."""
    procs = {name: subprocess.Popen([sys.executable, "-m", "secure_auc", "keygen", str(path)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for name, path in paths.items()}
    keys = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        keys[name] = out.strip().split()[-1]
    return keys


def _ports():
    """Three free ports base..base + 2 for the computing parties' client listeners, and a
    rendezvous port (with its + 1) apart from them."""
    for _ in range(100):
        base, master = free_port(span=3), free_port()
        if master + 1 < base or master > base + 2:
            return base, master
    raise AssertionError("no free ports")


@pytest.mark.skipif(not (BIN / "torchrun").exists(), reason="torchrun not installed")
def test_torchrun_computing_parties_and_client_commands(tmp_path):
    rng = np.random.default_rng(2)
    files, scores, labels = [], [], []
    for k, n in enumerate([70, 1]):
        s, y = np.round(rng.random(n), 2), (rng.random(n) < 0.5).astype(int)
        y[0] = k % 2
        f = tmp_path / f"c{k}.csv"
        f.write_text(("score,label\n" if k == 0 else "id,p,y\n")  # client 1 names its columns
                     + "".join(f"{a},{b}\n" if k == 0 else f"x{i},{a},{b}\n" for i, (a, b) in enumerate(zip(s, y))))
        files.append(f), scores.append(s), labels.append(y)
    keys = tmp_path / "keys"
    keys.mkdir()
    roles = ["server", "helper1", "helper2", "dealer", "client0", "client1"]
    pub = _keygens({r: keys / f"{r}.pem" for r in roles})
    roster = tmp_path / "roster.json"
    roster.write_text(json.dumps({"server": pub["server"], "helpers": [pub["helper1"], pub["helper2"]],
                                  "dealer": pub["dealer"], "clients": [pub["client0"], pub["client1"]]}))
    base, master = _ports()
    common = ["--clients", "2", "--mechanism", "laplace", "--epsilon", "1e4", "--roster", str(roster),
              "--timeout", "60"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    compute = subprocess.Popen(
        [str(BIN / "torchrun"), "--nnodes", "1", "--nproc-per-node", "4", "--master-addr", "127.0.0.1",
         "--master-port", str(master), "-m", "secure_auc.cli.compute", *common,
         "--identity-template", str(keys / "{role}.pem"), "--client-port", str(base), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    clients = [subprocess.Popen(
        [sys.executable, "-m", "secure_auc", "client", str(files[k]), "--client", str(k), *common,
         *([] if k == 0 else ["--score-column", "p", "--label-column", "y"]),
         "--parties", *[f"127.0.0.1:{base + r}" for r in range(3)], "--identity", str(keys / f"client{k}.pem")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for k in range(2)]
    mapped = [MappedFiles(c.pid) for c in clients]  # what each client process loads, read while it runs
    try:
        out, err = compute.communicate(timeout=240)
        client_out = []
        for c in clients:  # each ends when the server ends the deployment
            try:
                client_out.append(c.communicate(timeout=120))
            except subprocess.TimeoutExpired:
                c.kill()
                client_out.append(("", "still running 120 s after the computing parties ended: "
                                   + c.communicate()[1][-2000:]))
    finally:
        for p in [compute, *clients]:
            if p.poll() is None:
                p.kill()
    assert compute.returncode == 0, err[-3000:] + "\n".join(e[-2000:] for _, e in client_out)
    assert all(c.returncode == 0 for c in clients), [e[-2000:] for _, e in client_out]
    assert [m.heavy() for m in mapped] == [[], []]  # a client host maps no torch (so runs no CrypTen) and no numba
    report = json.loads(out.strip().splitlines()[-1])
    assert report["auc"] == pytest.approx(roc_auc_score(np.concatenate(labels), np.concatenate(scores)), abs=1e-3)
    assert report["layout"] == "helpers" and report["clients"] == 2 and report["samples"] == 71
    # the same result as every other path: std and interval from the hosts' public sizes, start-up apart
    assert report["std"] > 0 and report["ci_low"] < report["auc"] < report["ci_high"]
    assert 0 < report["startup_seconds"] and 0 < report["seconds"]


@pytest.mark.skipif(not (BIN / "torchrun").exists(), reason="torchrun not installed")
def test_torchrun_runs_the_services_of_a_configuration_for_several_epochs(tmp_path):
    """torchrun starts the server, the helpers and the dealer from a deployment's file (the services'
    code, torchrun's rendezvous); the clients are `secure-auc serve` services scoring each epoch with
    their hook. `--epochs 2`: two reports, each the plain protocol's bit for bit with the same noise
    keys; `--select-epsilon --release-epsilon`: then the best of the two and its DP AUC; then every
    process ends by itself, each client's ledger charged three times."""
    import importlib.util

    from secure_auc import evaluate
    from secure_auc.data import ClientData
    from secure_auc.dp import StatisticsMechanism
    from secure_auc.dp.accountant import Ledger, label_commitment
    from secure_auc.dp.rng import ClientRngs, client_key, release_key
    from secure_auc.metrics import rank_auc
    from secure_auc.protocol import Client, Server
    from secure_auc.protocol.plain import run_plain

    spec = importlib.util.spec_from_file_location("bench_deploy", Path(__file__).parents[2] / "scripts" /
                                                  "bench_deploy.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sizes = [60, 41, 30]
    base, master = _ports()
    data = bench.write_deployment(tmp_path, sizes, epochs=2, ports=(master, base, free_port()), timeout=60.0)
    # client 0's labels carry record identifiers (its entry's id_column): its ledger charges each record, as
    # evaluate does; half of them were in an evaluation of another file before
    ids0 = np.array([f"r{i}" for i in range(sizes[0])])
    rows = "".join(f"{i},{y}\n" for i, y in zip(ids0, data["labels"][0]))
    (tmp_path / "labels-0.csv").write_text("id,label\n" + rows)
    config = (tmp_path / "deploy.toml").read_text()
    (tmp_path / "deploy.toml").write_text(config.replace('ledger = "ledger-0.db"\n',
                                                         'ledger = "ledger-0.db"\nid_column = "id"\n'))
    earlier = np.array([f"r{i}" for i in range(sizes[0] // 2, sizes[0] + 20)])
    evaluate([ClientData(np.linspace(0, 1, len(earlier)), np.arange(len(earlier)) % 2, ids=earlier)],
             StatisticsMechanism(1.0, allocation="adaptive"), protocol="plain", ledger=Ledger(tmp_path / "ledger-0.db"))
    for role in ("helper-1", "helper-2"):  # the identity template's names
        (tmp_path / "keys" / f"{role.replace('-', '')}.pem").symlink_to(tmp_path / "keys" / f"{role}.pem")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    compute = subprocess.Popen(
        [str(BIN / "torchrun"), "--nnodes", "1", "--nproc-per-node", "4", "--master-addr", "127.0.0.1",
         "--master-port", str(master), "-m", "secure_auc.cli.compute", "--config", str(tmp_path / "deploy.toml"),
         "--identity-template", str(tmp_path / "keys" / "{role}.pem"), "--epochs", "2", "--json",
         "--select-epsilon", "50", "--release-epsilon", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    clients = [bench.start_service(tmp_path, f"client-{k}") for k in range(len(sizes))]
    mapped = [MappedFiles(c.pid) for c in clients]
    try:
        out, err = compute.communicate(timeout=300)
        client_err = [c.communicate(timeout=60)[1] for c in clients]
    finally:
        bench.stop([compute, *clients])
    assert compute.returncode == 0, err[-3000:]
    assert all(c.returncode == 0 for c in clients), [e[-1500:] for e in client_err]
    assert [m.heavy() for m in mapped] == [[]] * len(sizes)  # the client services too, through a selection
    reports = [json.loads(line) for line in out.strip().splitlines() if line.startswith("{")]
    selection = reports.pop()  # then the best of the two epochs (noise of scale 5 on rank sums 2,500 apart)
    assert [r["extra"]["epoch"] if "extra" in r else r["epoch"] for r in reports] == [0, 1]
    y = np.concatenate(data["labels"])
    aucs = [rank_auc(y, np.concatenate([bench.model_scores(tmp_path, k, e) for k in range(3)])) for e in range(2)]
    assert selection["selected"] == str(int(np.argmax(aucs))) and selection["candidates"] == ["0", "1"]
    assert selection["epsilon"] == 70.0 and selection["release_epsilon"] == 20.0
    assert selection["ci_low"] < selection["auc"] < selection["ci_high"]
    assert abs(selection["auc"] - max(aucs)) < 5 * selection["std"]
    mechanism = StatisticsMechanism(1.0, allocation="adaptive")
    for epoch, report in enumerate(reports):
        roles = [Client(k, ClientData(bench.model_scores(tmp_path, k, epoch), y), mechanism,
                        ClientRngs.from_key(release_key(client_key(1000 + epoch, k), epoch)))  # service's release i
                 for k, y in enumerate(data["labels"])]
        estimate, aggregate, _ = run_plain(roles, Server(mechanism))
        assert report["auc"] == float(estimate.auc)
        assert report["estimated_positives"] == float(aggregate.positives)
        assert report["std"] > 0 and report["ci_low"] < report["auc"] < report["ci_high"]
    assert "startup_seconds" in json.dumps(reports[0]) and "startup_seconds" not in json.dumps(reports[1])
    for k, y in enumerate(data["labels"][1:], start=1):  # two evaluations, one selection with its release
        assert Ledger(tmp_path / f"ledger-{k}.db").spent(label_commitment(y)).releases == 3
    # client 0, per record: those also in the earlier file 1 + 3 releases, its others 3, the earlier's others 1
    assert [(h["kind"], h["count"], h["releases"]) for h in Ledger(tmp_path / "ledger-0.db").histories()] == [
        ("record", sizes[0] - sizes[0] // 2, 4), ("record", sizes[0] // 2, 3), ("record", 20, 1)]


@pytest.mark.parametrize("extra, message", [
    (["--epsilon", "2"], "--epsilon does not apply with --config"),
    (["--clients", "3"], "--clients does not apply with --config"),
    (["--client-port", "30000"], "--client-port does not apply with --config"),
    (["--release-epsilon", "1"], "--release-epsilon needs --select-epsilon"),
    (["--select-epsilon", "1"], "--select-epsilon needs --epochs N"),
    (["--epochs", "2", "--select-epsilon", "0"], "--select-epsilon must be a finite number > 0, got 0.0"),
])
def test_the_torchrun_entry_refuses_options_a_configuration_file_replaces(monkeypatch, tmp_path, extra, message):
    from secure_auc.cli import compute

    for key, value in {"RANK": 0, "WORLD_SIZE": 4, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 1}.items():
        monkeypatch.setenv(key, str(value))
    args = compute.build_parser().parse_args(["--config", str(tmp_path / "deploy.toml"), "--identity-template", "x",
                                              *extra])
    with pytest.raises(InputError, match=message):
        compute._run_computing(args, 0.0)
