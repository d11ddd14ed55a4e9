"""The training-loop layers (metric object, scikit-learn-style function) and the input checks
every path shares: exact against scikit-learn, inputs refused before anything is charged."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from secure_auc import ClientData, FederatedAUC, InputError, Ledger, dp_roc_auc_score, evaluate, make_mechanism


def _data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(np.int8)
    s = np.round(rng.random(n) + 0.3 * y, 1)  # many ties, within and across clients
    client = rng.integers(0, 3, n)
    return y, s, client


def test_the_function_is_exact_without_noise_ties_included():
    y, s, client = _data()
    r = dp_roc_auc_score(y, s, client=client, mechanism=make_mechanism("none"), protocol="plain")
    assert float(r) == r.auc == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert r.clients == 3 and r.samples == len(y)


def test_the_function_takes_named_columns_with_a_client_column():
    y, s, client = _data(seed=1)
    df = {"label": y, "score": s, "advertiser": np.array(["x", "y", "z"])[client]}  # a DataFrame is looked up alike
    r = dp_roc_auc_score("label", "score", client="advertiser", data=df, mechanism=make_mechanism("none"),
                         protocol="plain")
    assert r.auc == pytest.approx(roc_auc_score(y, s), abs=1e-12) and r.clients == 3
    with pytest.raises(InputError, match="no column 'labels'"):
        dp_roc_auc_score("labels", "score", data=df, protocol="plain")


def test_the_metric_object_accumulates_batches_and_resets():
    y, s, client = _data(seed=2)
    metric = FederatedAUC(make_mechanism("none"), protocol="plain")
    for batch in np.array_split(np.arange(len(y)), 7):
        metric.update(torch.tensor(s[batch]).reshape(-1, 1).requires_grad_(), torch.tensor(y[batch]),
                      client=client[batch])
    assert metric.compute().auc == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    metric.reset()
    metric.update(s[:10], y[:10], client=0)
    metric.update(s[10:], y[10:], client=2)
    with pytest.raises(InputError, match="no scores for client"):
        metric.compute()


def test_the_metric_with_noise_matches_evaluate_with_the_same_seed():
    y, s, client = _data(seed=3)
    mech = make_mechanism("laplace", 1.0)
    metric = FederatedAUC(mech, protocol="plain", seed=5)
    metric.update(s, y, client=client)
    clients = [ClientData(s[client == k], y[client == k]) for k in range(3)]
    ref = evaluate(clients, mech, protocol="plain", seed=5)
    got = metric.compute()
    assert (got.auc, got.std, got.ci_low, got.ci_high) == (ref.auc, ref.std, ref.ci_low, ref.ci_high)


@pytest.mark.parametrize("labels, scores, message", [
    ([0, 1, 2, 0], [0.1, 0.2, 0.3, 0.4], r"client 0: labels\[2\] is 2"),
    ([0, 1, 0.5, 0], [0.1, 0.2, 0.3, 0.4], r"client 0: labels\[2\] is 0.5"),
    ([0, 1, 1, 0], [0.1, np.nan, 0.3, 0.4], r"client 0: scores\[1\] is nan"),
    ([0, 1, 1, 0], np.zeros((2, 2)), "one-dimensional"),
])
def test_bad_inputs_are_refused_in_every_protocol_before_anything_is_charged(tmp_path, labels, scores, message):
    path = tmp_path / "ledger.db"
    ledger = Ledger(path)
    for protocol in ("plain", "mpc"):
        with pytest.raises(InputError, match=message):
            evaluate([ClientData(scores, labels, "client 0")], make_mechanism("laplace", 1.0), protocol=protocol,
                     ledger=ledger)
        with pytest.raises(InputError):
            dp_roc_auc_score(labels, scores, protocol=protocol, ledger=ledger)
    assert not path.exists() or ledger.releases() == []  # nothing charged


def test_torch_inputs_are_detached_and_flattened():
    y, s, _ = _data(seed=4)
    c = ClientData(torch.tensor(s, requires_grad=True).reshape(-1, 1), torch.tensor(y))
    assert c.scores.shape == (len(s),) and c.scores.dtype == np.float64 and c.labels.dtype == np.int8
    assert evaluate([c], make_mechanism("none"), protocol="plain").auc == pytest.approx(roc_auc_score(y, s))


def test_a_deployed_session_is_refused_where_scores_are_passed_in():
    """A deployed session's clients score their own samples: the metric object and the function,
    which pass scores in, say so in one line instead of failing on a missing attribute."""
    from secure_auc.deploy.session import DeployedSession
    from secure_auc.session import MPCSession
    from secure_auc.training import FederatedAUC, dp_roc_auc_score

    deployed = object.__new__(DeployedSession)  # no services needed: refused before any use
    for call in (lambda: FederatedAUC(session=deployed),
                 lambda: dp_roc_auc_score(None, [0.1, 0.2], client=[0, 1], session=deployed)):
        with pytest.raises(InputError, match=r"deployed session's clients score their own samples.*"
                                             r"session\.evaluate\(epoch=\.\.\.\)"):
            call()
    assert MPCSession.deployed is False
