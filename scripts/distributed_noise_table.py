#!/usr/bin/env python3
"""Std of the AUC estimate with noise on the aggregate (distributed shares), on the built-in data.

    .venv/bin/python scripts/distributed_noise_table.py                       # discrete Laplace, R = 10000
    .venv/bin/python scripts/distributed_noise_table.py --noise skellam --delta 1e-6
    .venv/bin/python scripts/distributed_noise_table.py --per-client --reps 100 --clients 10 4584

Rows: eps and the fraction of honest clients; columns: K.  Each cell is the
standard deviation over R repetitions of the server's estimate
(secure_auc.dp.base.estimate_auc on globalSum' = S + E_C + rbar E_P and
P' = P + E_P), with its delta-method value in brackets.

By default the total noise of the K clients is drawn in one go
(DistributedNoiseMechanism.aggregate_noise: NB(K/h, p) - NB(K/h, p) is exactly
the sum of the K shares NB(1/h, p) - NB(1/h, p); Poisson likewise for
Skellam), which makes R = 10000 take seconds.  ``--per-client`` instead draws
every client's share, K x R of them, with the mechanism's ``privatize`` on the
IID partition (numpy's samplers of the same distributions, in chunks of about
2^20 shares) and sums them, as the protocol does.

The global sums S and P do not depend on K or the partition, so the only
thing K changes is the noise: with all clients honest, none at all.
"""

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np

from secure_auc.data import make_ctr_dataset
from secure_auc.dp.distributed import DistributedNoiseMechanism
from secure_auc.dp.base import estimate_auc
from secure_auc.metrics import midranks, rank_auc
from secure_auc.data.partition import partition_owner
from secure_auc.local_stats import LocalStatistics
from secure_auc.experiments.paper_tables import METHODS_STD

# The paper's best cell for each eps (over all its methods, partitions and K), for comparison.
PAPER_BEST = {e: min(v for row in t.values() for v in row if v) for e, t in METHODS_STD.items()}


def single_laplace_floor(m: int, p: int, auc: float, eps: float) -> float:
    """One continuous Laplace release of C (sensitivity (M-1)/2) and P, best split (delta method)."""
    n = m - p
    g = (auc - 0.5) * (n - p)
    dc = (m - 1) / 2
    best = math.inf
    for s in np.linspace(0.01, 0.99, 9801):
        best = min(best, math.sqrt(2 * (dc / (s * eps)) ** 2 + g * g * 2 / ((1 - s) * eps) ** 2))
    return best / (p * n)


CHUNK_SHARES = 1 << 20  # shares drawn at once with --per-client


def per_client_estimates(mech, stats: LocalStatistics, total: int, reps: int, rng) -> np.ndarray:
    """The server's estimate in ``reps`` repetitions, every client's share drawn (``privatize``: shape
    (r, K) per chunk of r repetitions) and the K noisy releases summed."""
    k = stats.clients
    per = max(1, CHUNK_SHARES // k)
    out = []
    for at in range(0, reps, per):
        noisy = mech.privatize(stats, rng, reps=min(per, reps - at), total=total)
        out.append(estimate_auc(noisy.local_sum.sum(axis=1), noisy.local_p.sum(axis=1), total, mech).auc)
    return np.concatenate(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=10000, help="repetitions R per cell (default 10000)")
    p.add_argument("--clients", type=int, nargs="+", default=[10, 458, 4584, 45840, 458407])
    p.add_argument("--epsilon", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    p.add_argument("--honest", type=float, nargs="+", default=[1.0, 0.5, 0.1], help="honest fractions")
    p.add_argument("--noise", choices=("discrete_laplace", "skellam", "gaussian"), default="discrete_laplace")
    p.add_argument("--delta", type=float, default=None, help="for skellam / gaussian")
    p.add_argument("--per-client", action="store_true", help="draw every client's share (slow for large K)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--csv", default=None, help="also write the table to this CSV file")
    args = p.parse_args()

    scores, labels = make_ctr_dataset()
    m, pos = len(labels), int(labels.sum())
    ranks = midranks(scores)
    s = float(ranks @ labels)  # exact: multiples of 1/2 below 2^53
    true_auc = rank_auc(labels, scores)
    rbar = (m - 1) / 2.0
    print(f"built-in Criteo-like data: M = {m:,}, P = {pos:,}, AUC = {true_auc:.6f}; noise {args.noise}"
          + (f", delta = {args.delta:g}" if args.delta else "") + f"; R = {args.reps}"
          + (", every client's share drawn" if args.per_client else ", total noise drawn in one go"))
    head = f"{'eps':>4} {'honest':>6} " + "".join(f"{'K=' + format(k, ','):>22}" for k in args.clients)
    print(head + f"{'1 Laplace':>11}{'paper best':>12}")
    rows = []
    start = time.perf_counter()
    for eps in args.epsilon:
        for h in args.honest:
            line = f"{eps:>4g} {h:>6g} "
            for k in args.clients:
                mech = DistributedNoiseMechanism(eps, k, noise=args.noise, delta=args.delta, honest_fraction=h)
                rng = np.random.default_rng([args.seed, k, int(eps * 1000), int(h * 1000)])
                if args.per_client:
                    stats = LocalStatistics.from_owner(ranks, labels, partition_owner(scores, k, "iid"), k)
                    est = per_client_estimates(mech, stats, m, args.reps, rng)
                else:
                    e_c, e_p = mech.aggregate_noise(rng, m, reps=args.reps)
                    est = estimate_auc(s + e_c + rbar * e_p, pos + e_p, m, mech).auc
                sd = float(np.std(est, ddof=1))
                lin = mech.linearised_std(m, pos, true_auc)
                line += f"{sd:>11.3e} ({lin:.2e})"
                rows.append([args.noise, eps, h, k, mech.honest, round(mech.eps_split, 4), sd, lin,
                             float(np.mean(est))])
                if args.per_client:
                    print(f"  eps={eps:g} honest={h:g} K={k}: {sd:.3g} ({time.perf_counter() - start:.0f} s)",
                          file=sys.stderr, flush=True)
            floor = single_laplace_floor(m, pos, true_auc, eps)
            print(line + f"{floor:>11.2e}{PAPER_BEST.get(eps, float('nan')):>12.2e}", flush=True)
    print("cells: simulated std (delta-method std).  1 Laplace: a single continuous Laplace release of the\n"
          "centred statistic and of P by a trusted curator, best split (the floor for pure eps).  paper best:\n"
          "the smallest std in the paper's Table 6 for that eps (any method, K, partition).")
    print(f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
    if args.csv:
        with open(Path(args.csv), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["noise", "eps", "honest_fraction", "clients", "honest", "split", "std", "delta_method_std",
                        "mean"])
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
