#!/usr/bin/env python3
"""Train a small model and evaluate its AUC every epoch, privately, with the budget tracked.

    .venv/bin/python scripts/train_and_evaluate.py                      # 5 epochs, 3 clients, 12,000 samples
    .venv/bin/python scripts/train_and_evaluate.py --epochs 3 --samples 4000 --epsilon 0.5

A logistic regression is trained by gradient descent on synthetic features (the clients'
samples, labels from a logistic model).  After each epoch the model scores every client's
samples and the AUC is evaluated twice over the clients' private labels:

* with the plain protocol, :func:`secure_auc.evaluate` (the server would see the scores);
* with the MPC protocol, an :class:`secure_auc.session.MPCSession` whose parties start
  once, before the first epoch, and evaluate each epoch's scores.

Both evaluations charge one privacy ledger (a temporary file, or ``--ledger``), which
refuses any evaluation that would exceed the clients' budget (``--budget``); the table
shows each estimate with its standard deviation and the budget spent so far.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np


def make_data(samples: int, clients: int, features: int, seed: int):
    """Features, labels (a logistic model with noise), split into ``clients`` parts."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, features))
    w_true = rng.standard_normal(features)
    y = (rng.random(samples) < 1 / (1 + np.exp(-(x @ w_true) - 1.0))).astype(np.int8)
    parts = np.array_split(rng.permutation(samples), clients)
    return [x[p] for p in parts], [y[p] for p in parts]


def train_epoch(w, xs, ys, lr: float = 0.5):
    """One pass of full-batch gradient descent on the logistic loss (the data are the
    clients' own; in a real deployment this step is the federated training's)."""
    x, y = np.concatenate(xs), np.concatenate(ys)
    p = 1 / (1 + np.exp(-(x @ w)))
    return w - lr * x.T @ (p - y) / len(y)


def run(epochs: int, samples: int, clients: int, epsilon: float, budget: float, ledger_path, seed: int,
        computing: int = 3, timeout: float = 120.0) -> list[dict]:
    from secure_auc import ClientData, Ledger, evaluate, make_mechanism
    from secure_auc.dp.accountant import label_commitment
    from secure_auc.session import MPCSession

    xs, ys = make_data(samples, clients, 8, seed)
    mechanism = make_mechanism("laplace", epsilon, allocation="adaptive")
    ledger = Ledger(ledger_path)
    for y in ys:
        ledger.set_budget(label_commitment(y), budget, name="example labels")
    w = np.zeros(xs[0].shape[1])
    rows = []
    with MPCSession(ys, mechanism, computing=computing, timeout=timeout, ledger=ledger) as session:
        for epoch in range(epochs):
            w = train_epoch(w, xs, ys)
            scores = [x @ w for x in xs]
            plain = evaluate([ClientData(s, y) for s, y in zip(scores, ys)], mechanism, protocol="plain",
                             ledger=ledger)
            result = session.evaluate(scores)
            spent = ledger.spent(label_commitment(ys[0]))
            rows.append({"epoch": epoch + 1, "plain_auc": plain.auc, "plain_std": plain.std,
                         "mpc_auc": result.auc, "mpc_std": result.std, "mpc_seconds": round(result.seconds, 3),
                         "rank_step_seconds": result.extra["rank_step_seconds"], "epsilon_spent": spent.epsilon,
                         "releases": spent.releases})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--samples", type=int, default=12_000)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--epsilon", type=float, default=1.0, help="per evaluation (default 1.0)")
    ap.add_argument("--budget", type=float, default=20.0, help="each client's total eps (default 20)")
    ap.add_argument("--ledger", default=None, help="ledger file (default: a temporary one)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic data (default 0)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.ledger) if args.ledger else Path(tmp) / "ledger.db"
        rows = run(args.epochs, args.samples, args.clients, args.epsilon, args.budget, path, args.seed)
    print(f"{'epoch':>5} {'plain AUC':>10} {'+/- std':>8} {'MPC AUC':>9} {'MPC s':>7} {'rank s':>7} "
          f"{'eps spent':>10} {'releases':>8}")
    for r in rows:
        print(f"{r['epoch']:>5} {r['plain_auc']:>10.4f} {r['plain_std']:>8.4f} {r['mpc_auc']:>9.4f} "
              f"{r['mpc_seconds']:>7.2f} {r['rank_step_seconds']:>7.2f} {r['epsilon_spent']:>10.3f} "
              f"{r['releases']:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
