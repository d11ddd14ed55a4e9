"""An MPC session with record identifiers charges its ledger per record, as ``evaluate`` does:
the session's evaluations and the metric object's on it, after an evaluation of overlapping
records, leave the ledger as evaluating the same data with ``evaluate`` does."""

import multiprocessing

import numpy as np
import pytest

from secure_auc import FederatedAUC, Ledger, evaluate
from secure_auc.session import MPCSession
from secure_auc.validation import InputError

from test_record_accounting import MECH, contents, days


def test_a_session_with_identifiers_charges_each_record_as_evaluate(tmp_path):
    day1, day2 = days()
    want_ledger, ledger = Ledger(tmp_path / "evaluate.db"), Ledger(tmp_path / "session.db")
    for day in (day1, day2, day2):
        evaluate(day, MECH, protocol="plain", ledger=want_ledger)
    evaluate(day1, MECH, protocol="plain", ledger=ledger)
    with pytest.raises(InputError, match=r"client 1: record identifier 'v1' \(row 3\) appears more than once"):
        MPCSession([c.labels for c in day2], MECH, ledger=ledger,  # refused before any party starts
                   ids=[day2[0].ids, np.array(["v0", "v1", "v1", "v3", "v4", "v5"])])
    with MPCSession([c.labels for c in day2], MECH, computing=2, timeout=30, ledger=ledger,
                    ids=[c.ids for c in day2]) as session:
        first = session.evaluate([c.scores for c in day2])
        metric = FederatedAUC(session=session)
        for k, c in enumerate(day2):
            metric.update(c.scores, client=k)
        second = metric.compute()
        with pytest.raises(InputError, match="the session holds the record identifiers"):
            metric.update(day2[0].scores, client=0, ids=day2[0].ids)
    assert multiprocessing.active_children() == []
    assert first.samples == second.samples == sum(len(c) for c in day2)
    want = contents(want_ledger)
    assert [(h["kind"], h["count"], h["releases"]) for h in want[0]] == [("record", 11, 3), ("record", 5, 2),
                                                                         ("record", 5, 1)]
    assert contents(ledger) == want
