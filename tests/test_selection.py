"""DP selection of the best candidate (:mod:`secure_auc.selection`, :mod:`secure_auc.dp.selection`)
without MPC: the plain reference against scikit-learn, random tie-breaking, the exact
output distribution between neighbouring label sets (e^eps), the ledger's charge and the
privacy events against dp-accounting, the command line's errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from secure_auc import CandidateScores, Ledger, select
from secure_auc.cli import main
from secure_auc.dp.events import compose, pure_event
from secure_auc.dp.selection import (doubled_rank_sums, repeat_select_epsilon, repeat_select_event, selection_pmf,
                                     selection_sensitivity)
from secure_auc.validation import InputError


def candidates(t_count=6, m=300, k=3, seed=0, ties=True):
    rng = np.random.default_rng(seed)
    y = (rng.random(m) < 0.3).astype(np.int8)
    cols = [rng.random(m) + 0.15 * j * y for j in range(t_count)]
    if ties:
        cols = [np.round(c, 2) for c in cols]  # many tied scores
    s = np.stack(cols, axis=1)
    parts = np.array_split(np.arange(m), k)
    return [CandidateScores(y[p], s[p], f"client {i}") for i, p in enumerate(parts)], y, s


def test_rank_sums_order_the_aucs_like_sklearn():
    for seed in range(5):
        _, y, s = candidates(seed=seed)
        d = doubled_rank_sums(y, s)
        aucs = [roc_auc_score(y, s[:, t]) for t in range(s.shape[1])]
        p, n = int(y.sum()), int(len(y) - y.sum())
        np.testing.assert_allclose((d / 2 - p * (p - 1) / 2) / (p * n), aucs, rtol=0, atol=1e-12)


def test_without_noise_the_plain_selection_is_sklearns_argmax():
    for seed in range(5):
        data, y, s = candidates(seed=seed, ties=False)
        names = [f"c{t}" for t in range(s.shape[1])]
        res = select(data, names, epsilon=None, protocol="plain", seed=seed, reference=True)
        best = int(np.argmax([roc_auc_score(y, s[:, t]) for t in range(s.shape[1])]))
        assert res.index == best and res.selected == names[best]
        assert res.reference_aucs[best] == pytest.approx(roc_auc_score(y, s[:, best]))


def test_every_candidate_equal_but_one():
    data, y, s = candidates(t_count=1, seed=3)
    base = s[:, 0]
    better = base + 0.3 * y  # strictly better AUC
    cols = np.stack([base] * 7 + [better] + [base] * 4, axis=1)
    parts = np.array_split(np.arange(len(y)), 3)
    data = [CandidateScores(y[p], cols[p]) for p in parts]
    res = select(data, [f"e{t}" for t in range(12)], epsilon=None, protocol="plain", seed=1)
    assert res.selected == "e7"


def test_ties_between_candidates_are_broken_at_random():
    data, y, s = candidates(t_count=1, seed=4)
    good = s[:, 0] + 0.4 * y
    cols = np.stack([s[:, 0], good, good], axis=1)  # candidates 1 and 2 tie at the top
    parts = np.array_split(np.arange(len(y)), 3)
    data = [CandidateScores(y[p], cols[p]) for p in parts]
    picks = [select(data, ["a", "b", "c"], epsilon=None, protocol="plain", seed=i).index for i in range(200)]
    counts = np.bincount(picks, minlength=3)
    assert counts[0] == 0 and 60 < counts[1] < 140 and counts[1] + counts[2] == 200


def test_report_noisy_max_is_eps_dp_between_neighbouring_labels():
    """The exact output distribution on every label set one label apart: the ratio is at most
    e^eps, and half the noise (the scale a non-monotone argument would not allow halving) breaks it."""
    eps, m = 2.0, 4
    s = np.array([[0.1, 0.7], [0.5, 0.5], [0.9, 0.2], [0.5, 0.9]])  # 2 candidates, a tied score
    worst, worst_half = 0.0, 0.0
    for y_int in range(1, 2**m - 1):
        y = np.array([(y_int >> i) & 1 for i in range(m)])
        for i in range(m):
            y2 = y.copy()
            y2[i] ^= 1
            if y2.sum() in (0, m):
                continue
            p1 = selection_pmf(doubled_rank_sums(y, s), eps, m)
            p2 = selection_pmf(doubled_rank_sums(y2, s), eps, m)
            worst = max(worst, float(np.max(np.abs(np.log(p1 / p2)))))
            h1 = selection_pmf(doubled_rank_sums(y, s), 2 * eps, m)  # the noise of scale Delta / (2 eps)
            h2 = selection_pmf(doubled_rank_sums(y2, s), 2 * eps, m)
            worst_half = max(worst_half, float(np.max(np.abs(np.log(h1 / h2)))))
    # three candidates with a tie at the top, one label apart
    s3 = np.array([[0.1, 0.1, 0.5], [0.9, 0.9, 0.2], [0.4, 0.4, 0.8], [0.6, 0.6, 0.3]])
    y, y2 = np.array([0, 1, 0, 1]), np.array([0, 1, 1, 1])
    p1 = selection_pmf(doubled_rank_sums(y, s3), 4.0, 4)
    p2 = selection_pmf(doubled_rank_sums(y2, s3), 4.0, 4)
    assert p1[0] == pytest.approx(p1[1]) and np.max(np.abs(np.log(p1 / p2))) <= 4.0 * (1 + 1e-9)
    assert worst <= eps * (1 + 1e-9)
    assert worst > 0.5 * eps  # the bound is not vacuous here
    assert worst_half > eps


def test_sensitivity_is_the_largest_change_of_a_rank_sum():
    rng = np.random.default_rng(2)
    m = 40
    s = rng.random((m, 4))
    y = (rng.random(m) < 0.5).astype(int)
    d = doubled_rank_sums(y, s)
    changes = []
    for i in range(m):
        y2 = y.copy()
        y2[i] ^= 1
        delta = doubled_rank_sums(y2, s) - d
        assert (np.sign(delta) == np.sign(delta[0])).all() or (delta == 0).any()  # monotone: one sign
        changes.append(np.abs(delta).max())
    assert max(changes) == selection_sensitivity(m)  # the top-ranked sample of some candidate


def test_ledger_charges_eps_once_whatever_the_number_of_candidates(tmp_path):
    import dp_accounting as dpa

    for t_count in (2, 40):
        data, _, _ = candidates(t_count=t_count, seed=5)
        ledger = Ledger(tmp_path / f"l{t_count}.db")
        res = select(data, [f"c{t}" for t in range(t_count)], epsilon=0.7, protocol="plain", ledger=ledger)
        assert res.epsilon == 0.7 and res.extra["total_epsilon_spent"] == pytest.approx(0.7)
        # a second selection plus a release at 0.3: composed by the ledger as dp-accounting does
        res = select(data, [f"c{t}" for t in range(t_count)], epsilon=0.7, release_epsilon=0.3, protocol="plain",
                     ledger=ledger)
        assert res.epsilon == pytest.approx(1.0)
        acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
        for e in (0.7, 0.7, 0.3):
            acc.compose(dpa.dp_event.DiscreteLaplaceDpEvent(noise_parameter=e, sensitivity=1))
        assert ledger.spent().epsilon == pytest.approx(min(1.7, acc.get_epsilon(0.0)), rel=1e-3)


def test_repeat_and_select_event_against_dp_accounting():
    import dp_accounting as dpa
    from dp_accounting.rdp import RdpAccountant

    eps0, mean, delta = 0.2, 50.0, 1e-6
    ours = compose([repeat_select_event(eps0, mean)], delta)
    assert ours.accountant == "rdp" and ours.pld is None
    acc = RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.dp_event.RepeatAndSelectDpEvent(
        dpa.RandomizedResponseDpEvent(noise_parameter=2 / (1 + math.exp(eps0)), num_buckets=2), mean, 1.0))
    reference = acc.get_epsilon(delta)  # dp-accounting's default orders: a coarser grid, never tighter
    assert 0.95 * reference <= ours.epsilon <= reference * (1 + 1e-9)
    assert 2 * eps0 < ours.epsilon < 3.05 * eps0  # Papernot & Steinke: about (2 + eta) eps0, eta = 1
    # composed with an earlier evaluation
    both = compose([pure_event(0.5), repeat_select_event(eps0, mean)], delta)
    assert ours.epsilon < both.epsilon < ours.epsilon + 0.5 + 1e-9
    assert repeat_select_epsilon(eps0, mean, delta) == pytest.approx(ours.epsilon)


def test_repeat_and_select_plain_picks_an_evaluated_candidate(tmp_path):
    data, y, s = candidates(t_count=5, seed=6)
    ledger = Ledger(tmp_path / "l.db")
    res = select(data, list("abcde"), epsilon=1.0, method="repeat-and-select", mean=3, protocol="plain", seed=2,
                 ledger=ledger)
    assert res.index in res.extra["evaluated"] and res.extra["runs"] == len(res.extra["evaluated"])
    assert 0.99 < res.epsilon <= 1.0 + 1e-9 and res.delta == 1e-6
    events = [r["event"] for r in ledger.releases()]
    assert len(events) == 3 and all(e["kind"] == "repeat_select" and e["mean"] == 3.0 for e in events)
    assert ledger.spent().epsilon == pytest.approx(res.epsilon, rel=1e-6)  # charged once, not once per run


def test_bad_arguments_are_named():
    data, _, _ = candidates(t_count=2)
    for kwargs, text in [({"epsilon": 0}, "epsilon"), ({"epsilon": math.nan}, "epsilon"),
                         ({"method": "best"}, "method"), ({"protocol": "x"}, "protocol"),
                         ({"seed": 3}, "seed applies"), ({"mpc_options": {"bogus": 1}}, "unknown option"),
                         ({"epsilon": 1e-17}, "64-bit range")]:
        with pytest.raises(InputError, match=text):
            select(data, ["a", "b"], **kwargs)
    with pytest.raises(InputError, match="named twice"):
        select(data, ["a", "a"], protocol="plain")
    with pytest.raises(InputError, match="shape"):
        select(data, ["a", "b", "c"], protocol="plain")


def _write(tmp_path, rows, header="label,e1,e2"):
    p = tmp_path / f"c{len(list(tmp_path.iterdir()))}.csv"
    p.write_text(header + "\n" + "\n".join(rows) + "\n")
    return str(p)


def test_cli_select_plain_json_and_errors(tmp_path, capsys):
    a = _write(tmp_path, ["1,0.9,0.2", "0,0.1,0.3", "1,0.8,0.1"])
    b = _write(tmp_path, ["0,0.3,0.9", "1,0.7,0.2"])
    assert main(["select", a, b, "--candidates", "e1", "e2", "--epsilon", "1", "--protocol", "plain", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["selected"] in ("e1", "e2") and out["epsilon"] == 1.0 and out["delta"] == 0.0
    for argv, text in [([a, b, "--candidates", "e1", "e9", "--epsilon", "1"], "missing column 'e9'"),
                       ([a, b, "--candidates", "e1", "e1", "--epsilon", "1"], "named twice"),
                       ([a, b, "--candidates", "e1", "--epsilon", "1", "--mean", "3"], "--mean applies"),
                       ([a, b, "--candidates", "e1", "--epsilon", "1", "--delta", "1e-5"], "--delta applies"),
                       ([a, b, "--candidates", "e1", "--epsilon", "1", "--budget", "3"], "needs --ledger"),
                       ([a, a, "--candidates", "e1", "--epsilon", "1"], "")]:
        assert main(["select", *argv, "--protocol", "plain"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and text in err and "Traceback" not in err
    c = _write(tmp_path, ["1,0.9,oops"])
    assert main(["select", a, c, "--candidates", "e1", "e2", "--epsilon", "1", "--protocol", "plain"]) == 2
    err = capsys.readouterr().err.strip()
    assert c in err and err.count("\n") == 0


@pytest.mark.parametrize("name", ["secure_auc.selection", "secure_auc.dp.selection",
                                  "secure_auc.mpc.primitives.argmax"])
def test_examples_of_the_selection_modules_run(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_a_selection_with_its_release_is_one_composed_charge_and_the_release_mechanism_is_the_sessions():
    """``session.select(release_epsilon=E2)``'s charge: the selection's pure eps event composed with
    the session's mechanism at E2, which equals the mechanism made afresh at E2 for every family;
    its eps at delta = 1e-6 against dp-accounting's PLD accountant on the two events."""
    import dataclasses

    import dp_accounting as dpa
    from dp_accounting.pld import PLDAccountant

    from secure_auc import make_mechanism
    from secure_auc.dp.events import compose
    from secure_auc.dp.selection import SelectAndRelease, SelectionCharge, release_mechanism

    for family, kw in [("distributed", {"clients": 3}), ("distributed", {"clients": 3, "delta": 1e-6}),
                       ("laplace", {"allocation": "adaptive"}), ("rr", {}), ("gaussian", {"delta": 1e-6}),
                       ("orthogonal", {})]:
        session = make_mechanism(family, 1.0, **kw).for_clients(3)
        assert release_mechanism(session, 0.3) == make_mechanism(family, 0.3, **kw).for_clients(3), family
        assert dataclasses.replace(session) == session
    with pytest.raises(InputError, match="release_epsilon needs a private session mechanism"):
        release_mechanism(make_mechanism("none"), 1.0)
    charge = SelectAndRelease(SelectionCharge(1.0), make_mechanism("distributed", 0.5, clients=3).for_clients(3))
    assert (charge.cost.epsilon, charge.cost.delta) == (1.5, 0.0) and charge.name == "select-noisy-max+distributed"
    event = charge.privacy_event(100)
    assert event["kind"] == "composed" and event["events"][0] == pure_event(1.0)
    leaves = [1.0] + [e["epsilon"] for e in event["events"][1]["events"]]  # the release's two noises
    assert sum(leaves) == pytest.approx(1.5)
    acc = PLDAccountant()
    acc.compose(dpa.ComposedDpEvent([dpa.dp_event.DiscreteLaplaceDpEvent(noise_parameter=e, sensitivity=1)
                                     for e in leaves]))
    ours = compose([event], 1e-6).epsilon
    assert ours <= 1.5 + 1e-9 and ours == pytest.approx(min(1.5, acc.get_epsilon(1e-6)), abs=1e-3)
