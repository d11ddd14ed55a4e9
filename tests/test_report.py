"""The whole evaluation in the plain protocol: exact without noise (scikit-learn at the same
thresholds, ties included), monotone and private with noise, one composed charge."""

import numpy as np
import pytest
from sklearn.metrics import (average_precision_score, brier_score_loss, log_loss, precision_recall_curve,
                             roc_curve)

from secure_auc import ClientData, Ledger, evaluate, make_mechanism
from secure_auc.metrics import twice_midranks
from secure_auc.report import Layout, ReportSpec, client_vectors, derive, split_budget
from secure_auc.report.release import client_report, plan_report
from secure_auc.validation import InputError

ALL = ["roc", "pr", "ks", "lift", "precision-at", "calibration", "logloss", "brier"]


def _data(m=1500, k=3, seed=5, decimals=2):
    rng = np.random.default_rng(seed)
    y = (rng.random(m) < 0.3).astype(np.int8)
    s = np.round(np.clip(rng.random(m) * 0.8 + 0.25 * y, 0, 1), decimals)  # many ties, across clients
    owner = rng.integers(0, k, m)
    owner[:k] = np.arange(k)
    clients = [ClientData(s[owner == j], y[owner == j]) for j in range(k)]
    return clients, np.concatenate([c.scores for c in clients]), np.concatenate([c.labels for c in clients])


def _at_thresholds(out, s, thr, values, empty=0.0):
    """sklearn's values at the thresholds of the report's points (the lowest score above each
    edge; ``empty`` where no sample is above it: a head band emptied by the tie rule)."""
    top = np.sort(s)[::-1]
    counts = np.rint(np.array(out["roc"]["fraction"][1:]) * len(s)).astype(int)
    idx = [np.flatnonzero(thr == top[c - 1])[0] if c else -1 for c in counts]
    return [np.where(counts > 0, v[idx], empty) for v in values]


@pytest.mark.parametrize("bands", [100, 7])
def test_without_noise_every_point_equals_scikit_learn_at_the_same_thresholds(bands):
    clients, s, y = _data()
    r = evaluate(clients, make_mechanism("none"), protocol="plain", metrics=ALL + ["auc"],
                 budget=None) if bands == 100 else \
        evaluate(clients, make_mechanism("none"), protocol="plain",
                 metrics=ReportSpec(["auc"] + ALL, bands=bands, head=(0.013,), fractions=(0.03, 0.5)))
    out = r.extra
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    f, t = _at_thresholds(out, s, thr, [fpr, tpr])
    assert out["roc"]["fpr"][1:] == pytest.approx(f, abs=1e-15) and out["roc"]["tpr"][1:] == pytest.approx(t, abs=1e-15)
    assert out["ks"] == pytest.approx(np.max(t - f), abs=1e-15)
    ks_idx = int(np.argmax(t - f))
    assert out["ks_at"] == out["roc"]["fraction"][1 + ks_idx]
    prec, rec, pthr = precision_recall_curve(y, s)
    top = np.sort(s)[::-1]
    (p,) = _at_thresholds(out, s, pthr, [prec], empty=1.0)
    (r_,) = _at_thresholds(out, s, pthr, [rec])
    assert out["pr"]["precision"][1:] == pytest.approx(p, abs=1e-15)
    assert out["pr"]["recall"][1:] == pytest.approx(r_, abs=1e-15)
    # average precision at the same thresholds: scikit-learn's sum over those points
    rr = np.concatenate([[0.0], r_])
    assert out["average_precision"] == pytest.approx(np.sum(np.diff(rr) * p), abs=1e-12)
    # lift per bin and precision/recall at k, computed directly on the sorted data (whole tie groups)
    order = np.argsort(-s, kind="stable")
    ys = y[order]
    for frac_key, frac in out["top_fraction"].items():
        c = int(round(frac * len(s)))
        assert out["precision_at"][frac_key] == pytest.approx(ys[:c].mean() if c else 1.0, abs=1e-15)
        assert out["recall_at"][frac_key] == pytest.approx(ys[:c].sum() / y.sum(), abs=1e-15)
        assert c == 0 or c == len(s) or top[c - 1] != top[c]  # an edge never splits a tie group
    lo = 0
    for lift, frac in zip(out["lift"], out["lift_fraction"]):
        hi = int(round(frac * len(s)))
        assert lift == pytest.approx(ys[lo:hi].mean() / y.mean(), abs=1e-12)
        lo = hi
    q = np.clip(s, 1e-4, 1 - 1e-4)
    assert out["log_loss"] == pytest.approx(log_loss(y, q), abs=1e-6)
    assert out["brier"] == pytest.approx(brier_score_loss(y, s), abs=1e-6)
    cal = out["calibration"]
    edges_bins = np.searchsorted(np.linspace(0, 1, 11)[1:-1], s, side="right")  # a score on an edge goes up
    for b in range(10):
        sel = edges_bins == b
        assert cal["samples"][b] == sel.sum()
        if sel.any():
            assert cal["positive_rate"][b] == pytest.approx(y[sel].mean(), abs=1e-15)
    assert r.epsilon is None and "ks_std" not in out


def test_with_one_band_per_distinct_score_average_precision_is_scikit_learns():
    clients, s, y = _data(m=600, decimals=2)
    r = evaluate(clients, make_mechanism("none"), protocol="plain",
                 metrics=ReportSpec(["pr"], bands=600, head=(), fractions=()))
    assert r.extra["average_precision"] == pytest.approx(average_precision_score(y, s), abs=1e-12)


def test_tie_rule_a_group_goes_to_the_band_of_its_middle_position():
    # 8 samples, edges at positions 2, 4, 6 (bands = 4); from the top: 0.9, 0.8 x3, 0.5 x2, 0.3, 0.1
    s = np.array([0.9, 0.8, 0.8, 0.8, 0.5, 0.5, 0.3, 0.1])
    lay = Layout(ReportSpec(["roc"], bands=4, head=(), fractions=(), lift_bins=1), 8)
    band = lay.band_of(twice_midranks(s))
    # 0.8 occupies positions 1..3 (middle 2: on the edge at 2, so the band that starts there);
    # 0.5 occupies 4..5 (middle 4.5: band 2)
    assert band.tolist() == [0, 1, 1, 1, 2, 2, 3, 3]
    s2 = np.array([0.9, 0.8, 0.8, 0.7, 0.5, 0.5, 0.3, 0.1])  # 0.8 at positions 1..2, middle 1.5: band 0
    assert lay.band_of(twice_midranks(s2)).tolist() == [0, 0, 0, 1, 2, 2, 3, 3]


def test_noisy_curves_are_monotone_in_the_unit_square_with_error_bars_and_one_composed_charge(tmp_path):
    clients, s, y = _data(m=3000)
    ledger = Ledger(tmp_path / "l.db")
    r = evaluate(clients, make_mechanism("laplace", 0.2), protocol="plain", metrics=ALL, seed=3, ledger=ledger)
    out = r.extra
    for a in (np.array(out["roc"]["fpr"]), np.array(out["roc"]["tpr"])):
        assert np.all(np.diff(a) >= 0) and a[0] == 0 and a[-1] == 1 and np.all((a >= 0) & (a <= 1))
    assert np.all(np.array(out["roc"]["tpr_low"]) <= np.array(out["roc"]["tpr"]) + 1e-12)
    prec = np.array(out["pr"]["precision"])
    assert np.all((prec >= 0) & (prec <= 1)) and 0 <= out["ks"] <= 1
    assert out["ks_interval"][0] <= out["ks"] <= out["ks_interval"][1] and out["ks_std"] > 0
    assert out["privacy"] == pytest.approx({"auc": 0.1, "bands": 0.07, "calibration": 0.01, "log_loss": 0.01,
                                            "brier": 0.01})
    assert r.epsilon == 0.2
    rel = ledger.releases()
    assert len(rel) == len(clients) and all(x["epsilon"] == pytest.approx(0.2) for x in rel)
    assert rel[0]["event"]["kind"] == "composed" and len(rel[0]["event"]["events"]) == 5
    # the AUC is that of the mechanism alone at its share: the same std
    alone = evaluate(clients, make_mechanism("laplace", 0.1), protocol="plain", seed=3)
    assert r.std == alone.std and r.auc == alone.auc  # release 0 under one seed: the same AUC noise


def test_band_noise_has_the_discrete_laplace_variance_per_client_and_on_the_aggregate():
    from secure_auc.dp.discrete import dlap_variance
    from secure_auc.report.stats import noise_vectors

    lay = Layout(ReportSpec(["roc"], bands=50, head=(), fractions=(), lift_bins=1), 1000)
    rng = np.random.default_rng(0)
    for kind, k, want in (("client", 4, 4 * dlap_variance(2.0)), ("aggregate", 4, dlap_variance(2.0))):
        # 300 evaluations of k clients at once (the shares of one noise: k)
        draws = noise_vectors(lay, {"bands": 2.0}, rng, 300 * k, kind, shares=k).reshape(300, k, -1).sum(axis=1)
        pos = draws[:, lay.parts["band_pos"]]
        assert np.all(draws[:, lay.parts["band_n"]] == 0)  # the band sizes are never noised
        assert pos.var() == pytest.approx(want, rel=0.1)


def test_a_client_alone_draws_the_noise_it_draws_among_others():
    clients, s, y = _data(m=300)
    lay = Layout(ReportSpec(["roc", "logloss"]), len(s))
    twice = twice_midranks(s)
    owner = np.repeat(np.arange(3), [len(c) for c in clients])
    both = client_report(lay, twice, y, s, owner, [11, 12, 13], {"bands": 1.0, "log_loss": 1.0}, "client")
    one = client_report(lay, twice[owner == 1], y[owner == 1], s[owner == 1], np.zeros((owner == 1).sum(), int),
                        [12], {"bands": 1.0, "log_loss": 1.0}, "client")
    assert np.array_equal(both[1], one[0])
    exact = client_vectors(lay, twice, y, s, owner, 3)
    assert not np.array_equal(both, exact)


def test_budget_split_and_bad_reports_are_refused_in_one_line():
    assert split_budget(["auc", "bands", "brier"], {"bands": 0.3, "brier": 0.2}) == \
        {"auc": 0.5, "bands": 0.3, "brier": 0.2}
    with pytest.raises(InputError, match="add up to 1"):
        split_budget(["auc", "bands"], {"auc": 0.5, "bands": 0.2})
    with pytest.raises(InputError, match="not a release"):
        split_budget(["auc"], {"brier": 0.5})
    clients, _, _ = _data(m=200)
    with pytest.raises(InputError, match="unknown metric 'f1'"):
        evaluate(clients, make_mechanism("none"), protocol="plain", metrics=["f1"])
    with pytest.raises(InputError, match="top fractions"):
        ReportSpec(["roc"], fractions=(0.0,))
    auc, eps, kind, cost = plan_report(make_mechanism("distributed", 1.0, clients=3), ReportSpec(["roc"]))
    assert kind == "aggregate" and eps == {"bands": 0.5} and auc.epsilon == 0.5


def test_the_metric_object_and_the_function_release_the_same_report():
    from secure_auc import FederatedAUC, dp_roc_auc_score

    clients, s, y = _data(m=800, k=2)
    owner = np.repeat([0, 1], [len(c) for c in clients])
    direct = evaluate(clients, make_mechanism("none"), protocol="plain", metrics=["roc", "ks", "logloss"])
    metric = FederatedAUC(make_mechanism("none"), protocol="plain", metrics=["roc", "ks", "logloss"])
    for k, c in enumerate(clients):
        for part in np.array_split(np.arange(len(c)), 3):
            metric.update(c.scores[part], c.labels[part], client=k)
    got = metric.compute()
    fn = dp_roc_auc_score(y, s, client=owner, mechanism=make_mechanism("none"), protocol="plain",
                          metrics=["roc", "ks", "logloss"])
    for r in (got, fn):
        assert r.extra["roc"] == direct.extra["roc"] and r.extra["ks"] == direct.extra["ks"]
        assert r.extra["log_loss"] == direct.extra["log_loss"] and r.auc == direct.auc
    with pytest.raises(InputError, match="unknown metric"):
        FederatedAUC(make_mechanism("none"), protocol="plain", metrics=["nope"])


@pytest.mark.parametrize("mechanism", ["laplace", "rr"])
def test_a_ledger_refuses_a_report_seed_used_twice_even_with_randomized_response(tmp_path, mechanism):
    clients, _, _ = _data(m=400)
    ledger = Ledger(tmp_path / "l.db")
    mech = make_mechanism(mechanism, 1.0)
    evaluate(clients, mech, protocol="plain", metrics=["roc"], seed=4, ledger=ledger)
    with pytest.raises(InputError, match="seed was already used"):
        evaluate(clients, mech, protocol="plain", metrics=["roc"], seed=4, ledger=ledger)
    assert all(r["epsilon"] == pytest.approx(1.0) for r in ledger.releases())
