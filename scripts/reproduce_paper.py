#!/usr/bin/env python3
"""Reproduce the FedAUC paper's tables and figures side by side with its own numbers.

    .venv/bin/python scripts/reproduce_paper.py --out results/paper          # everything, R = 100
    .venv/bin/python scripts/reproduce_paper.py --quick --out /tmp/paper     # a small subset, R = 20

Tables (paper's appendix, epoch 1): "Mean and standard deviation of AUC computed
by FedAUC_RR" with the noisy AUC before debiasing and the closed form; "Standard
deviation of AUC estimated by different methods" (7 K x 4 eps x 6 rows); "...
with accurate P and N" with the closed forms of GlobalLaplace and LocalLaplace
(one sample per client); the RR table on the 10x larger set.  Figures, each as
PNG and CSV: (a) RR std on the two set sizes, (b) std against alpha (1000
clients, IID and non-IID, eps 1, 2, 4, 8), (c) naive vs orthogonal vs adaptive
allocation (1000 samples per client, eps = 1).

Data: the paper's Criteo evaluation sets are not available here.  The built-in
Criteo-like stand-in has the same M, P, N (small and large set) and about the
same AUC (binormal scores; docs/reproduction.md).  Every cell prints the paper's
value, ours and their ratio; a cell is flagged "!!" when the two standard
deviations differ by more than 3 standard errors of a std estimated from R runs
(SE ~ std / sqrt(2 (R - 1)), for ours and the paper's R = 100 combined).
Each table cell has its own seeds (see --common-seeds).  Progress goes to stderr.
Writes CSV files and PNG figures to --out.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
import zlib
from pathlib import Path

import numpy as np

from secure_auc.data import CRITEO_LARGE, make_ctr_dataset
from secure_auc.simulation.engine import Simulator
from secure_auc.experiments.paper_tables import (
    ACCURATE_PN_CLIENTS, ACCURATE_PN_ROWS, ACCURATE_PN_STD, INF, METHOD_CLIENTS, METHODS_STD, ROW_NAMES, RR_LARGE,
    RR_NOISY, RR_SMALL, RR_SMALL_SKLEARN)

NOTE = ("NOTE: the paper's Criteo evaluation sets are not available here; these numbers come from the "
        "built-in Criteo-like data with the same M, P, N (docs/reproduction.md).")


# Table cells are independent by default: each gets its own root seed derived from (--seed, the cell's name),
# and its R repetitions the seeds SeedSequence(root).spawn(R), so the flags are independent tests.  With
# --common-seeds every cell uses SeedSequence(--seed).spawn(R) (common random numbers, as `secure-auc simulate`
# does): cells of one row, and one cell at different eps, then share their draws and their errors are correlated.
# The figures always use common random numbers along each curve, which makes the curves smooth.
INDEPENDENT = True


def cell_seed(seed: int, *key) -> int:
    if not INDEPENDENT:
        return seed
    name = "/".join(str(k) for k in key).encode()
    return int(np.random.SeedSequence([seed, zlib.crc32(name)]).generate_state(1)[0])


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def flag(ours, paper, reps, paper_reps=100):
    if paper is None or ours is None or paper == 0:
        return ""
    se = math.sqrt((ours**2) / (2 * (reps - 1)) + (paper**2) / (2 * (paper_reps - 1)))
    return "!!" if abs(ours - paper) > 3 * se else ""


def write_csv(path: Path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def rr_table(sim, epsilons, reps, seed, paper, out: Path, name: str, noisy_paper=None):
    print(f"\n{name}: mean and std of the AUC estimated by FedAUC_RR (true AUC here {sim.true_auc:.6f}, "
          f"paper's sklearn {RR_SMALL_SKLEARN if paper is RR_SMALL else 0.750509})")
    print(f"{'eps':>5} {'paper mean':>10} {'our mean':>10} {'paper std':>10} {'our std':>10} {'ratio':>6} {'':2} "
          f"{'delta-meth':>10} {'noisy AUC paper':>15} {'ours':>9} {'| exact P,N':>11} {'closed form':>11}")
    rows = []
    cells = {}
    for eps in epsilons:
        c = sim.cell("rr", eps, reps=reps, seed=cell_seed(seed, "rr", sim.m, eps))
        cells[eps] = c
        pm, ps = paper.get(eps, (None, None))
        ratio = c.std / ps if ps else float("nan")
        npaper = (noisy_paper or {}).get(eps)
        print(f"{eps:>5g} {pm if pm else float('nan'):>10.6f} {c.mean:>10.6f} {ps if ps is not None else float('nan'):>10.3g} "
              f"{c.std:>10.3g} {ratio:>6.2f} {flag(c.std, ps, reps):2} {c.linearised_std:>10.3g} "
              f"{npaper if npaper else float('nan'):>15.6f} {c.noisy_mean:>9.6f} {c.exact_pn_std:>11.3g} "
              f"{c.closed_form_std:>11.3g}")
        rows.append([eps, pm, c.mean, ps, c.std, ratio, flag(c.std, ps, reps), c.linearised_std, npaper, c.noisy_mean,
                     c.noisy_std, c.exact_pn_std, c.closed_form_std])
        log(f"  {name}: eps={eps:g} done")
    nflag = sum(1 for r in rows if r[6])
    ncomp = sum(1 for r in rows if r[3])
    print(f"  flagged cells (beyond 3 standard errors): {nflag} of {ncomp} with a paper std")
    print("  std: the debiased estimate (as the paper's table); delta-meth: this project's first-order std of it;\n"
          "  noisy AUC: before debiasing; exact P,N: std of sum r_i y~_i / (P N) with the true P and N, the quantity\n"
          "  the paper's closed form r(1-r) M(M-1)(2M-1)/6 / (P N)^2 describes (closed form).")
    write_csv(out / f"{name}.csv", ["eps", "paper_mean", "our_mean", "paper_std", "our_std", "ratio", "flag",
                                    "delta_method_std", "paper_noisy_auc", "our_noisy_auc", "our_noisy_std",
                                    "our_exact_pn_std", "paper_closed_form_std"], rows)
    return cells


def compared_cell(c, pv, reps, flagged, eps, name, k):
    """One "paper / ours / ratio" cell of a std table; records a flagged cell in ``flagged``."""
    f = flag(c.std, pv, reps)
    if f:
        flagged.append((eps, name, k, pv, c.std))
    ptxt = "-" if pv is None else f"{pv:.2e}"
    return f, f"{ptxt:>9}/{c.std:.2e}/{(c.std / pv if pv else float('nan')):4.2f}{f:2}".rjust(22)


def print_flagged(rows, flagged):
    print(f"\nflagged cells (beyond 3 standard errors): {len(flagged)} of {sum(r[3] is not None for r in rows)} "
          f"with a paper value")
    for eps, name, k, pv, ours in flagged:
        print(f"  eps={eps:g} {name} K={k}: paper {pv:.3g}, ours {ours:.3g} (ratio {ours / pv:.2f})")


def methods_table(sim, epsilons, clients, reps, seed, out: Path):
    print("\nStandard deviation of AUC estimated by different methods (alpha = 0.5): paper / ours / ratio")
    rows = []
    flagged = []
    start = time.perf_counter()
    for eps in epsilons:
        print(f"\neps = {eps:g}")
        print(f"{'':24}" + "".join(f"{k:>22}" for k in clients))
        for (method, part), name in ROW_NAMES.items():
            paper_row = dict(zip(METHOD_CLIENTS, METHODS_STD[eps][(method, part)]))
            line = f"{name:<24}"
            rr_cell = sim.cell("rr", eps, reps=reps, seed=cell_seed(seed, "rr", sim.m, eps)) if method == "rr" else None
            for k in clients:
                c = rr_cell or sim.cell(method, eps, clients=k, partition=part or "iid", reps=reps,
                                        seed=cell_seed(seed, method, part, k, eps))
                pv = paper_row.get(k)
                f, cell = compared_cell(c, pv, reps, flagged, eps, name, k)
                line += cell
                rows.append([eps, name, k, pv, c.std, c.std / pv if pv else "", f, c.closed_form_std, c.linearised_std, c.mean])
            print(line, flush=True)
            log(f"  {name} eps={eps:g} done ({time.perf_counter() - start:.1f} s)")
        # this project's extra row: noise on the aggregate in shares (MPC protocol), all clients honest
        line = f"{'distributed (ours, MPC)':<24}"
        for k in clients:
            c = sim.cell("distributed", eps, clients=k, partition="iid", reps=reps,
                         seed=cell_seed(seed, "distributed", k, eps))
            line += f"{'-':>9}/{c.std:.2e}/{'':4}{'':2}".rjust(22)
            rows.append([eps, "distributed (ours, MPC)", k, None, c.std, "", "", None, c.linearised_std, c.mean])
        print(line, flush=True)
    write_csv(out / "methods_std.csv", ["eps", "method", "clients", "paper_std", "our_std", "ratio", "flag",
                                        "paper_closed_form_std", "delta_method_std", "our_mean"], rows)
    print_flagged(rows, flagged)
    return rows


def accurate_pn_table(sim, epsilons, clients, reps, seed, out: Path):
    """The appendix table "std of estimated AUC with accurate P and N", with the paper's closed forms."""
    print("\nStandard deviation of estimated AUC with accurate P and N (only localSum noisy, with the whole eps):\n"
          "paper / ours / ratio, then the paper's closed form and ours / closed form where it has one")
    rows, flagged = [], []
    start = time.perf_counter()
    for eps in epsilons:
        print(f"\neps = {eps:g}")
        print(f"{'':24}" + "".join(f"{k:>22}" for k in clients))
        for (method, part), name in ACCURATE_PN_ROWS.items():
            paper_row = dict(zip(ACCURATE_PN_CLIENTS, ACCURATE_PN_STD[eps][(method, part)]))
            line, cf_line = f"{name:<24}", f"{'  closed form / ratio':<24}"
            for k in clients:
                c = sim.cell(method, eps, clients=k, partition=part or "iid", reps=reps,
                             seed=cell_seed(seed, "exact_p", method, part, k, eps), exact_p=True)
                pv = paper_row.get(k)
                f, cell = compared_cell(c, pv, reps, flagged, eps, name, k)
                line += cell
                cf = c.closed_form_std
                cf_line += (f"{cf:.2e} / {c.std / cf:4.2f}" if cf else "-").rjust(22)
                rows.append([eps, name, k, pv, c.std, c.std / pv if pv else "", f, cf, c.linearised_std, c.mean])
            print(line, flush=True)
            if any(r[7] for r in rows[-len(clients):]):
                print(cf_line, flush=True)
            log(f"  accurate P,N: {name} eps={eps:g} done ({time.perf_counter() - start:.1f} s)")
    write_csv(out / "accurate_pn_std.csv", ["eps", "method", "clients", "paper_std", "our_std", "ratio", "flag",
                                            "paper_closed_form_std", "exact_std", "our_mean"], rows)
    print_flagged(rows, flagged)
    return rows


def figures(sim_small, sim_large, small_cells, large_cells, reps, seed, out: Path, quick: bool):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # (a) RR on two set sizes
    eps = [e for e in small_cells if np.isfinite(e)]
    if large_cells:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        ax.plot(eps, [small_cells[e].std for e in eps], "o-", label=f"M = {sim_small.m:,} (ours)")
        ax.plot(eps, [RR_SMALL[e][1] for e in eps], "x:", label="M = 458,407 (paper)")
        ax.plot(eps, [large_cells[e].std for e in eps], "o-", label=f"M = {sim_large.m:,} (ours)")
        ax.plot(eps, [RR_LARGE[e][1] for e in eps], "x:", label="M = 4,584,062 (paper)")
        ax.plot(eps, [small_cells[e].linearised_std for e in eps], "k-", lw=0.6, alpha=0.5, label="delta method")
        ax.plot(eps, [large_cells[e].linearised_std for e in eps], "k-", lw=0.6, alpha=0.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("eps")
        ax.set_ylabel("std of estimated AUC")
        ax.set_title("(a) FedAUC_RR on two evaluation-set sizes")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "fig_a_rr_dataset_size.png", dpi=110)
        plt.close(fig)
        write_csv(out / "fig_a_rr_dataset_size.csv",
                  ["eps", "small_std", "large_std", "ratio_small_over_large", "paper_small_std", "paper_large_std",
                   "paper_ratio", "small_delta_method_std", "large_delta_method_std"],
                  [[e, small_cells[e].std, large_cells[e].std, small_cells[e].std / large_cells[e].std,
                    RR_SMALL[e][1], RR_LARGE[e][1], RR_SMALL[e][1] / RR_LARGE[e][1],
                    small_cells[e].linearised_std, large_cells[e].linearised_std] for e in eps])

    # (b) sensitivity to alpha, 1000 clients
    alphas = [0.1, 0.3, 0.5, 0.7, 0.9] if quick else [round(a, 2) for a in np.arange(0.1, 0.95, 0.1)]
    rows = []
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, part in zip(axes, ("iid", "noniid")):
        for e in (1.0, 2.0, 4.0, 8.0):
            cells = [sim_small.cell("local", e, clients=1000, partition=part, reps=reps, seed=seed, alpha=a) for a in alphas]
            stds = [c.std for c in cells]
            rows += [[part, e, a, c.std, c.linearised_std] for a, c in zip(alphas, cells)]
            ax.plot(alphas, stds, "o-", label=f"eps = {e:g}")
        ax.set_yscale("log")
        ax.set_xlabel("alpha (share of eps on localSum)")
        ax.set_title(f"(b) LocalLaplace, 1000 clients, {part}")
    axes[0].set_ylabel("std of estimated AUC")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig_b_alpha_sensitivity.png", dpi=110)
    plt.close(fig)
    write_csv(out / "fig_b_alpha_sensitivity.csv", ["partition", "eps", "alpha", "std", "delta_method_std"], rows)
    log("  figure (b) done")

    # (c) naive vs orthogonal vs adaptive: 1000 samples per client, eps = 1
    k = max(1, round(sim_small.m / 1000))
    grid = alphas + [0.95, 0.98]  # a shared beta close to 1 is where orthogonal is best with non-IID clients
    rows = []
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, part in zip(axes, ("noniid", "iid")):
        nc = [sim_small.cell("local", 1.0, clients=k, partition=part, reps=reps, seed=seed, alpha=a) for a in grid]
        oc = [sim_small.cell("orthogonal", 1.0, clients=k, partition=part, reps=reps, seed=seed, beta=b) for b in grid]
        ac = sim_small.cell("adaptive", 1.0, clients=k, partition=part, reps=reps, seed=seed)
        naive, ortho, adapt = [c.std for c in nc], [c.std for c in oc], ac.std
        rows += [[part, "naive (alpha)", a, c.std, c.linearised_std] for a, c in zip(grid, nc)]
        rows += [[part, "orthogonal (beta)", b, c.std, c.linearised_std] for b, c in zip(grid, oc)]
        rows.append([part, "adaptive", "", ac.std, ac.linearised_std])
        ax.plot(grid, naive, "o-", label="Naive (alpha)")
        ax.plot(grid, ortho, "s-", label="Orthogonal (shared beta)")
        ax.axhline(adapt, color="k", ls="--", label="Adaptive")
        ax.set_yscale("log")
        ax.set_xlabel("alpha or beta")
        ax.set_title(f"(c) {k} clients x 1000 samples, eps = 1, {part}")
    axes[0].set_ylabel("std of estimated AUC")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig_c_allocation.png", dpi=110)
    plt.close(fig)
    write_csv(out / "fig_c_allocation.csv", ["partition", "method", "alpha_or_beta", "std", "delta_method_std"], rows)
    log("  figure (c) done")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=None, help="repetitions per cell (default 100; 20 with --quick)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="results/paper", help="folder for CSV files and figures")
    p.add_argument("--quick", action="store_true", help="a small subset (K = 10, 458, 4584; eps = 1; no large set)")
    p.add_argument("--skip-large", action="store_true", help="skip the 4.6-million-row set")
    p.add_argument("--threads", type=int, default=None, help="threads for the repetitions (default: cores, at most 4)")
    p.add_argument("--common-seeds", action="store_true",
                   help="use the same R seeds in every table cell (common random numbers; the cells' errors are then "
                        "correlated); default: every cell its own seeds derived from --seed and the cell's name")
    args = p.parse_args()
    global INDEPENDENT
    INDEPENDENT = not args.common_seeds
    reps = args.reps or (20 if args.quick else 100)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(NOTE)
    print("seeds: " + (f"every table cell its own, derived from --seed {args.seed} and the cell's name; "
                       "common along each figure's curve" if INDEPENDENT else
                       f"the same R seeds SeedSequence({args.seed}).spawn(R) in every cell (common random numbers)"))
    start = time.perf_counter()
    small = Simulator(*make_ctr_dataset(), workers=args.threads)
    print(f"small set: M = {small.m:,}, P = {small.p:,}, N = {small.n:,}, AUC = {small.true_auc:.6f}; R = {reps}")
    rr_eps = [1.0, 4.0] if args.quick else [0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, INF]
    small_cells = rr_table(small, rr_eps, reps, args.seed, RR_SMALL, out, "rr_small", RR_NOISY)
    log(f"RR table done ({time.perf_counter() - start:.1f} s)")
    clients = [10, 458, 4584] if args.quick else METHOD_CLIENTS
    methods_table(small, [1.0] if args.quick else [1.0, 2.0, 4.0, 8.0], clients, reps, args.seed, out)
    log(f"methods table done ({time.perf_counter() - start:.1f} s)")
    accurate_pn_table(small, [1.0] if args.quick else [1.0, 2.0, 4.0, 8.0],
                      [10, 1000] if args.quick else ACCURATE_PN_CLIENTS, reps, args.seed, out)
    log(f"accurate P and N table done ({time.perf_counter() - start:.1f} s)")
    large, large_cells = None, None
    if not (args.quick or args.skip_large):
        large = Simulator(*make_ctr_dataset(CRITEO_LARGE.samples, CRITEO_LARGE.positives, auc=CRITEO_LARGE.auc),
                          workers=args.threads)
        print(f"\nlarge set: M = {large.m:,}, P = {large.p:,}, N = {large.n:,}, AUC = {large.true_auc:.6f}")
        large_cells = rr_table(large, rr_eps, reps, args.seed, RR_LARGE, out, "rr_large")
        print("\nstd small / std large (expected about sqrt(10) = 3.16):")
        print("  " + ", ".join(f"eps={e:g}: {small_cells[e].std / large_cells[e].std:.2f}" for e in rr_eps if np.isfinite(e)))
        log(f"large RR table done ({time.perf_counter() - start:.1f} s)")
    figures(small, large, small_cells, large_cells, reps, args.seed, out, args.quick)
    print(f"\nwrote CSV files and figures to {out}/ in {time.perf_counter() - start:.0f} s")
    print(NOTE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
