"""Accuracy of the whole evaluation (DP curves, KS, average precision, lift, log-loss, Brier,
calibration) on the built-in data, by simulation: the exact per-client report vectors are
computed once, then each run draws the noise of every client (or the shares of one noise on
the aggregate), and the server's post-processing gives the metrics.

Prints, per number of clients K and noise kind, the 95th percentile over the runs of:
the largest |TPR error| over the band edges, |KS error|, |average precision error|, the largest
|lift error|, |log-loss error|, |Brier error|, the largest calibration error over the bins holding 1 % of the samples or more; and the coverage
of the 95 % error bars (the fraction of runs whose interval holds the exact value).

    python scripts/report_accuracy.py                      # M = 458,407, K = 10 and 1,000, 200 runs, eps = 1
    python scripts/report_accuracy.py --samples 20000 --runs 50 --csv out.csv --plot figs/
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from secure_auc import builtin_clients, make_mechanism  # noqa: E402
from secure_auc.metrics import twice_midranks  # noqa: E402
from secure_auc.report import Layout, ReportSpec, client_vectors, derive, noise_vectors  # noqa: E402
from secure_auc.report.derive import _all  # noqa: E402
from secure_auc.result import error_bars  # noqa: E402

ALL = ["auc", "roc", "pr", "ks", "lift", "precision-at", "calibration", "logloss", "brier"]


def exact_vectors(k: int, samples: int | None, spec: ReportSpec):
    clients = builtin_clients(k, samples=samples)
    scores = np.concatenate([c.scores for c in clients])
    labels = np.concatenate([c.labels for c in clients])
    owner = np.repeat(np.arange(k), [len(c) for c in clients])
    layout = Layout(spec, len(scores))
    return layout, client_vectors(layout, twice_midranks(scores), labels, scores, owner, k), clients


def simulate(layout, vectors, epsilons, kind, runs, rng, coverage_runs):
    k = vectors.shape[0]
    exact_agg = vectors.sum(axis=0)
    truth = _all(layout, exact_agg[None, :].astype(np.float64))
    aggs = np.empty((runs, layout.width), dtype=np.float64)
    for r in range(runs):
        noise = noise_vectors(layout, epsilons, rng, k, kind, exact=False)
        aggs[r] = (vectors + noise).sum(axis=0)
    est = _all(layout, aggs)
    big = exact_agg[layout.parts["cal_n"]] >= 0.01 * layout.total
    errors = {
        "max_tpr": np.max(np.abs(est["tpr"] - truth["tpr"]), axis=1),
        "ks": np.abs(est["ks"] - truth["ks"]),
        "average_precision": np.abs(est["average_precision"] - truth["average_precision"]),
        "max_lift": np.max(np.abs(est["lift"] - truth["lift"]), axis=1),
        "log_loss": np.abs(est["log_loss"] - truth["log_loss"]),
        "brier": np.abs(est["brier"] - truth["brier"]),
        # bins holding at least 1 % of the samples (a bin of a few samples has a rate of little meaning)
        "max_calibration": np.nanmax(np.abs(est["calibration"] - truth["calibration"])[:, big], axis=1),
    }
    cover = {"ks": [], "average_precision": [], "log_loss": [], "brier": [], "tpr": []}
    for r in range(min(coverage_runs, runs)):
        out = derive(layout, aggs[r].astype(np.int64), epsilons, k, kind, draws=200)
        for name in ("ks", "average_precision", "log_loss", "brier"):
            lo, hi = out[f"{name}_interval"]
            cover[name].append(lo <= float(truth[name][0]) <= hi)
        lo, hi = np.array(out["roc"]["tpr_low"][1:]), np.array(out["roc"]["tpr_high"][1:])
        t = truth["tpr"][0]
        cover["tpr"].append(np.mean((lo <= t + 1e-12) & (t - 1e-12 <= hi)))
    return errors, {name: float(np.mean(v)) for name, v in cover.items()}, est, truth


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=None, help="M (default 458,407, the built-in set)")
    p.add_argument("--clients", type=int, nargs="+", default=[10, 1000], help="K values (default 10 1000)")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--coverage-runs", type=int, default=100, help="runs whose error bars are checked (default 100)")
    p.add_argument("--epsilon", type=float, default=1.0, help="the total eps of the evaluation (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--csv", default=None, help="write the table here")
    p.add_argument("--plot", default=None, metavar="DIR", help="write the ROC error figure there (PNG)")
    args = p.parse_args(argv)
    spec = ReportSpec(ALL)
    shares = spec.shares
    epsilons = {g: args.epsilon * s for g, s in shares.items() if g != "auc"}
    print(f"eps = {args.epsilon:g} in all; split: " + ", ".join(f"{g} {args.epsilon * s:g}" for g, s in shares.items()))
    rng = np.random.default_rng(args.seed)
    rows = []
    curves = {}
    for k in args.clients:
        t0 = time.perf_counter()
        layout, vectors, clients = exact_vectors(k, args.samples, spec)
        m = layout.total
        positives = float(sum(c.labels.sum() for c in clients))
        for kind, mech in (("aggregate", make_mechanism("distributed", args.epsilon * shares["auc"], clients=k)),
                           ("client", make_mechanism("laplace", args.epsilon * shares["auc"]))):
            errors, cover, est, truth = simulate(layout, vectors, epsilons, kind, args.runs, rng, args.coverage_runs)
            from secure_auc.metrics import rank_auc

            auc = rank_auc(np.concatenate([c.labels for c in clients]), np.concatenate([c.scores for c in clients]))
            auc_std = error_bars(mech, auc, positives, m, [len(c) for c in clients])[0]
            row = {"clients": k, "noise": kind, "samples": m, "auc_std_at_share": auc_std}
            row |= {f"p95_{name}": float(np.percentile(v, 95)) for name, v in errors.items()}
            row |= {f"coverage_{name}": v for name, v in cover.items()}
            rows.append(row)
            curves[(k, kind)] = (truth["fpr"][0], np.percentile(np.abs(est["tpr"] - truth["tpr"]), 95, axis=0))
        print(f"  K = {k}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    keys = list(rows[0])
    widths = [max(len(k), 10) for k in keys]
    print("  ".join(k.rjust(w) for k, w in zip(keys, widths)))
    for r in rows:
        print("  ".join((f"{r[k]:.3g}" if isinstance(r[k], float) else str(r[k])).rjust(w) for k, w in zip(keys, widths)))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        Path(args.plot).mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        for (k, kind), (fpr, err) in curves.items():
            ax.plot(fpr, err, label=f"K = {k}, noise {'on the aggregate' if kind == 'aggregate' else 'per client'}")
        ax.set(xlabel="false positive rate", ylabel="95th percentile of |TPR error|", yscale="log",
               title=f"DP ROC at eps = {args.epsilon:g} in all ({args.runs} runs)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(Path(args.plot) / "report_tpr_error.png", dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
