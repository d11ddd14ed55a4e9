#!/usr/bin/env python3
"""Per-evaluation std of the AUC for T evaluations within one total budget, on the built-in data.

    .venv/bin/python scripts/accounting_table.py                      # (eps, delta) = (10, 1e-6), T = 1 ... 1000
    .venv/bin/python scripts/accounting_table.py --reps 2000          # also simulate the T = 100 cells
    .venv/bin/python scripts/accounting_table.py --epsilon 4 --evaluations 1 10 --clients 10

For every mechanism and T, two per-evaluation budgets that fit T evaluations
within the total (eps, delta):

* basic: eps / T each (and delta / T for the mechanisms that take a delta);
* best: the largest per-evaluation eps whose T-fold composition, with the
  tightest of basic composition, the RDP and the PLD accountant of
  dp-accounting, is within (eps, delta) (secure_auc.dp.planning).

Each cell is the delta-method std of one evaluation's estimate
(Mechanism.delta_method_std, randomized_response: rr_linearised_std) for K
clients on an IID split of the built-in Criteo-like data; with ``--reps R`` the
T = 100 column is also simulated (R repetitions of the simulator, whose
estimates use the same integer noise distributions).
"""

import argparse
import sys
import time

import numpy as np

from secure_auc import make_mechanism
from secure_auc.data import make_ctr_dataset, partition_owner
from secure_auc.dp.planning import plan_evaluations
from secure_auc.dp.variance import rr_linearised_std
from secure_auc.local_stats import LocalStatistics
from secure_auc.metrics import midranks, rank_auc
from secure_auc.simulation.engine import Simulator

# (row label, mechanism name, options, takes a delta)
MECHANISMS = [
    ("rr", "rr", {}, False),
    ("laplace (discrete, adaptive)", "adaptive", {}, False),
    ("gaussian (discrete, adaptive)", "adaptive", {"noise": "gaussian"}, True),
    ("distributed discrete Laplace", "distributed", {"noise": "laplace"}, False),
    ("distributed Skellam", "distributed", {"noise": "skellam"}, True),
    ("distributed discrete Gaussian", "distributed", {"noise": "gaussian"}, True),
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epsilon", type=float, default=10.0, help="total eps (default 10)")
    p.add_argument("--delta", type=float, default=1e-6, help="total delta (default 1e-6)")
    p.add_argument("--evaluations", type=int, nargs="+", default=[1, 10, 100, 1000])
    p.add_argument("--clients", type=int, default=10, help="K (default 10)")
    p.add_argument("--reps", type=int, default=0, help="simulate the T = 100 cells with R repetitions (default: no)")
    args = p.parse_args()

    scores, labels = make_ctr_dataset()
    m, pos = len(labels), int(labels.sum())
    ranks = midranks(scores)
    auc = rank_auc(labels, scores)
    k = args.clients
    stats = LocalStatistics.from_owner(ranks, labels, partition_owner(scores, k, "iid", seed=0), k)
    print(f"built-in data: M = {m:,}, P = {pos:,}, AUC = {auc:.4f}; K = {k} clients (IID); total budget "
          f"eps = {args.epsilon:g}, delta = {args.delta:g}")

    def build(name, opts, takes_delta):
        def make(e, d=None):
            return make_mechanism(name, e, delta=d if takes_delta else None, clients=k, **opts)
        return make

    def std(name, mech, e):
        if name == "rr":
            return rr_linearised_std(ranks, labels, e)
        return mech.delta_method_std(stats, m, auc)

    print("cells: std of one evaluation's AUC (its eps; the accountant that fits T of them)")
    head = f"{'mechanism':<30} {'accounting':<10}" + "".join(f"{'T = ' + str(t):>24}" for t in args.evaluations)
    print(head)
    print("-" * len(head))
    simulated = []
    for label, name, opts, takes_delta in MECHANISMS:
        make = build(name, opts, takes_delta)
        rows = {"basic": [], "best": []}
        for t in args.evaluations:
            e1 = args.epsilon / t
            d1 = args.delta / t if takes_delta else None
            basic = make(e1, d1)
            rows["basic"].append((e1, std(name, basic, e1)))
            start = time.perf_counter()
            plan = plan_evaluations(make, t, args.epsilon, args.delta, total=m)
            rows["best"].append((plan.per_epsilon, std(name, plan.mechanism, plan.per_epsilon),
                                 plan.composition.accountant))
            if args.reps and t == 100 and name != "rr":
                sim = Simulator(scores, labels)
                cell = sim.cell(name, plan.per_epsilon, clients=k,
                                partition="iid", reps=args.reps, seed=1,
                                noise=opts.get("noise", "laplace"),
                                delta=plan.per_delta if takes_delta else None)
                simulated.append((label, plan.per_epsilon, cell.std, cell.linearised_std))
            print(f"  [{label}: T = {t} planned in {time.perf_counter() - start:.1f} s]", file=sys.stderr)
        for kind in ("basic", "best"):
            cells = []
            for row in rows[kind]:
                acc = f" {row[2]}" if kind == "best" else ""
                cells.append(f"{row[1]:.2e} ({row[0]:.3g}{acc})")
            print(f"{label:<30} {kind:<10}" + "".join(f"{c:>24}" for c in cells))
    if simulated:
        print(f"\nT = 100, best accountant, simulated with R = {args.reps} (std [delta method]):")
        for label, e, sd, lin in simulated:
            print(f"  {label:<30} eps {e:.4g} per evaluation: {sd:.3e} [{lin:.3e}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
