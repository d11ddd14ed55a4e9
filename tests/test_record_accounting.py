"""Per-record privacy accounting on every path: two evaluations over overlapping record sets leave
the ledger as ``evaluate`` leaves it (per record with identifiers, per dataset without), through
the metric object, the scikit-learn-style function and a deployed client's configuration entry
(its service's own charging code: :func:`secure_auc.deploy.inputs.client_inputs` and the answer
to the server's ``open``).  The MPC session's path: tests/mpc/test_session_records.py."""

import numpy as np
import pytest

from secure_auc import ClientData, FederatedAUC, Ledger, dp_roc_auc_score, evaluate, make_mechanism
from secure_auc.deploy import load_config
from secure_auc.deploy.inputs import client_inputs
from secure_auc.mpc.roles.host import answer_open
from secure_auc.validation import InputError
from tests.test_deploy_config import CONFIG as DEPLOY_CONFIG

MECH = make_mechanism("laplace", 1.0)


def contents(ledger):
    """What a ledger holds, without the times and notes that name the path: each release history
    (kind, records, spending) and each charge (evaluation, client, mechanism, eps, event, records)."""
    keep = ("evaluation", "client", "mechanism", "state", "epsilon", "delta", "event", "units")
    return ledger.histories(), [{k: r[k] for k in keep} for r in ledger.releases()]


def days(with_ids=True):
    """Two evaluations of two clients: client 0's records u5..u9 in both (the second day reordered),
    u0..u4 on day 1 only, u10..u14 on day 2 only; client 1 the same six records both days."""
    rng = np.random.default_rng(3)

    def client(ids):
        n = len(ids)
        return ClientData(rng.random(n), (np.arange(n) % 3 == 0).astype(np.int8), ids=np.array(ids) if with_ids
                          else None)

    day1 = [client([f"u{i}" for i in range(10)]), client([f"v{i}" for i in range(6)])]
    day2 = [client([f"u{i}" for i in [9, 7, 5, 6, 8, *range(10, 15)]]), client([f"v{i}" for i in range(6)][::-1])]
    return day1, day2


def reference(tmp_path, with_ids=True):
    ledger = Ledger(tmp_path / f"evaluate-{with_ids}.db")
    for day in days(with_ids):
        evaluate(day, MECH, protocol="plain", ledger=ledger)
    return contents(ledger)


@pytest.mark.parametrize("with_ids", [True, False])
def test_the_metric_object_and_the_function_charge_as_evaluate(tmp_path, with_ids):
    want = reference(tmp_path, with_ids)
    kinds = {h["kind"] for h in want[0]}
    if with_ids:  # 5 + 6 records in both, 5 + 5 in one (one history each, whatever the client)
        assert kinds == {"record"} and [(h["count"], h["releases"]) for h in want[0]] == [(11, 2), (10, 1)]
    else:  # each client's labels one dataset, known by its size and positives: client 0's two days alike
        assert kinds == {"dataset"} and [(h["count"], h["releases"]) for h in want[0]] == [(2, 2)]
    metric_ledger, function_ledger = Ledger(tmp_path / "metric.db"), Ledger(tmp_path / "function.db")
    for day in days(with_ids):
        metric = FederatedAUC(MECH, protocol="plain", ledger=metric_ledger)
        for k, c in enumerate(day):  # batch by batch
            for rows in np.array_split(np.arange(len(c)), 3):
                metric.update(c.scores[rows], c.labels[rows], client=k,
                              ids=None if c.ids is None else c.ids[rows])
        metric.compute()
        client = np.repeat(np.arange(len(day)), [len(c) for c in day])
        data = {"y": np.concatenate([c.labels for c in day]), "s": np.concatenate([c.scores for c in day]),
                "client": client} | ({"id": np.concatenate([c.ids for c in day])} if with_ids else {})
        dp_roc_auc_score("y", "s", client="client", data=data, ids="id" if with_ids else None, mechanism=MECH,
                         protocol="plain", ledger=function_ledger)
    assert contents(metric_ledger) == want
    assert contents(function_ledger) == want


def test_the_metric_object_refuses_identifiers_it_cannot_charge(tmp_path):
    metric = FederatedAUC(MECH, protocol="plain", ledger=Ledger(tmp_path / "l.db"))
    with pytest.raises(InputError, match="3 scores but 2 record identifiers"):
        metric.update([0.1, 0.2, 0.3], [0, 1, 1], ids=["a", "b"])
    metric.update([0.1, 0.2], [0, 1], ids=["a", "b"])
    with pytest.raises(InputError, match="client 0: record identifiers must come with every batch or with none"):
        metric.update([0.3], [1])
    metric.update([0.3], [1], ids=["a"])
    with pytest.raises(InputError, match=r"record identifier 'a' \(row 3\) appears more than once"):
        metric.compute()  # refused before anything runs: nothing charged
    assert Ledger(tmp_path / "l.db").releases() == []
    with pytest.raises(InputError, match="ids has 2 entries but there are 3 samples"):
        dp_roc_auc_score([0, 1, 1], [0.1, 0.2, 0.3], ids=["a", "b"], protocol="plain")
    with pytest.raises(InputError, match="data has no column 'uid' \\(the record identifiers\\)"):
        dp_roc_auc_score("y", "s", data={"y": [0, 1], "s": [0.1, 0.2]}, ids="uid", protocol="plain")
    with pytest.raises(InputError, match="the session holds the record identifiers"):
        dp_roc_auc_score([0, 1], [0.1, 0.2], ids=["a", "b"], session=object())


CONFIG = DEPLOY_CONFIG[:DEPLOY_CONFIG.index("[[clients]]")] + """[[clients]]
labels = "labels-{day}.csv"
scores = "scores-{day}-{{epoch}}.npy"
ledger = "client.db"
"""


def _deployed_client(tmp_path, day: int, c: ClientData, entry: str = 'id_column = "uid"\n'):
    """Client 0 of a deployment (its labels file with a column uid when ``c`` has ids) and its inputs."""
    rows = [f"{i},{y}" for i, y in zip(c.ids, c.labels)] if c.ids is not None else [str(y) for y in c.labels]
    head = "uid,label" if c.ids is not None else "label"
    (tmp_path / f"labels-{day}.csv").write_text(head + "\n" + "\n".join(rows) + "\n")
    np.save(tmp_path / f"scores-{day}-0.npy", c.scores)
    path = tmp_path / f"deploy-{day}.toml"
    path.write_text(CONFIG.format(day=day) + (entry if c.ids is not None else ""))
    return load_config(path)


@pytest.mark.parametrize("with_ids", [True, False])
def test_a_deployed_client_charges_its_records_as_evaluate(tmp_path, with_ids):
    """Client 0's service on each day's labels file (``id_column`` in its entry, or not): its ledger
    after the two evaluations holds what evaluate's holds after evaluating client 0's data."""
    want_ledger = Ledger(tmp_path / "evaluate.db")
    for day, data in enumerate(days(with_ids)):
        evaluate([data[0]], MECH, protocol="plain", ledger=want_ledger)
        config = _deployed_client(tmp_path, day, data[0])
        inputs = client_inputs(config, 0)  # labels, identifiers and ledger read at start-up
        assert np.array_equal(inputs.labels, data[0].labels)
        scores, _, reservation, refusal = answer_open({"evaluation": 1, "epoch": 0}, inputs, config.charged(), 0,
                                                      len(config.clients))
        assert refusal is None and np.array_equal(scores, data[0].scores)
        inputs.ledger.finish(reservation)
    want = contents(want_ledger)
    assert {h["kind"] for h in want[0]} == {"record" if with_ids else "dataset"}
    assert contents(Ledger(tmp_path / "client.db")) == want


def test_a_deployed_clients_identifier_column_is_checked(tmp_path):
    day1, _ = days()
    config = _deployed_client(tmp_path, 0, day1[0], 'id_column = "user"\n')
    with pytest.raises(InputError, match=r"labels-0.csv: missing column 'user' \(clients\[0\]\.id_column in "
                                         r".*deploy-0.toml\) \(header has 'uid', 'label'\)"):
        client_inputs(config, 0)
    twice = ClientData(np.zeros(4), np.array([0, 1, 1, 0]), ids=np.array(["a", "b", "c", "b"]))
    config = _deployed_client(tmp_path, 1, twice)
    with pytest.raises(InputError, match=r"labels-1.csv: row 4, column 'uid': record identifier 'b' appears again "
                                         r"\(first in row 2\)"):
        client_inputs(config, 0)
    (tmp_path / "labels-1.csv").write_text("uid,label\na,1\n,0\n")
    with pytest.raises(InputError, match=r"labels-1.csv: row 2 \(line 3\), column 'uid': empty record identifier"):
        client_inputs(config, 0)
    for entry, message in [('id_column = "uid"\n', r"clients\[0\]\.id_column needs clients\[0\]\.ledger"),
                           ("id_column = 3\n", r"clients\[0\]\.id_column must be the name of a column"),
                           ('id_column = "uid"\nlabels = "y.npy"\n', "needs labels in a CSV or Parquet file")]:
        text = CONFIG.format(day=0) + entry
        if "needs clients" in message:
            text = text.replace('ledger = "client.db"\n', "")
        if "y.npy" in entry:
            text = text.replace('labels = "labels-0.csv"\n', "")
        (tmp_path / "bad.toml").write_text(text)
        with pytest.raises(InputError, match=message):
            load_config(tmp_path / "bad.toml")
