"""The documented training-loop example runs: a model trained for a few epochs, evaluated each
epoch with the plain protocol and an MPC session, every evaluation charged to one ledger."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

ROOT = Path(__file__).resolve().parents[2]


def _example():
    spec = importlib.util.spec_from_file_location("train_and_evaluate", ROOT / "scripts" / "train_and_evaluate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_training_example_evaluates_every_epoch_within_the_budget(tmp_path):
    ex = _example()
    rows = ex.run(epochs=3, samples=3000, clients=3, epsilon=1.0, budget=20.0, ledger_path=tmp_path / "l.json",
                  seed=1, computing=2)
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    # the model's true AUC after the last epoch; both private estimates are near it
    xs, ys = ex.make_data(3000, 3, 8, 1)
    w = np.zeros(8)
    for _ in range(3):
        w = ex.train_epoch(w, xs, ys)
    truth = roc_auc_score(np.concatenate(ys), np.concatenate([x @ w for x in xs]))
    last = rows[-1]
    assert abs(last["plain_auc"] - truth) < 6 * last["plain_std"] + 1e-3
    assert abs(last["mpc_auc"] - truth) < 6 * last["plain_std"] + 1e-3
    # two releases per epoch, each charged before it ran: 6 releases, at most 6 x eps
    assert last["releases"] == 6 and 0 < last["epsilon_spent"] <= 6.0 + 1e-9
    assert rows[0]["epsilon_spent"] < rows[-1]["epsilon_spent"]


def test_the_session_refuses_an_epoch_beyond_the_budget(tmp_path):
    from secure_auc import InputError, Ledger, make_mechanism
    from secure_auc.dp.accountant import label_commitment
    from secure_auc.session import MPCSession

    ex = _example()
    xs, ys = ex.make_data(600, 2, 8, 2)
    ledger = Ledger(tmp_path / "l.json")
    for y in ys:
        ledger.set_budget(label_commitment(y), 1.5)
    with MPCSession(ys, make_mechanism("laplace", 1.0, allocation="adaptive"), computing=2, ledger=ledger,
                    timeout=60) as session:
        session.evaluate([x[:, 0] for x in xs])
        with pytest.raises(InputError, match="budget"):
            session.evaluate([x[:, 1] for x in xs])
