#!/usr/bin/env python3
"""Accuracy of choosing the best of T checkpoints privately, and the secure argmax's cost.

    .venv/bin/python scripts/select_accuracy.py                      # T = 10, 100, 1000 at total eps = 1
    .venv/bin/python scripts/select_accuracy.py --candidates 100 --runs 2000
    .venv/bin/python scripts/select_accuracy.py --cost 100 1000      # the secure argmax among 3 parties

Candidates.  The built-in Criteo-like data (M = 458,407, P = 117,317, AUC 0.7494): candidate
t's scores are the built-in scores plus independent Gaussian noise whose standard deviation
falls like a training run's loss (fast at first, then a plateau, with a slight rise at the
end: over-fitting), so that the exact AUCs climb from about 0.70 to about 0.749 and the last
half of the candidates lie within a few 1e-4 of each other.  Their exact AUCs (mid-ranks) are
computed once; each method is then simulated ``--runs`` times on them, with exactly the noise
distributions the protocol uses:

* noisy-max: report-noisy-max, DLap(2 (M - 1) / eps) on every D_t = 2 S_t (what the MPC
  selection computes in shares; the sum of the clients' NB shares is exactly this), ties at
  random; eps-DP whatever T.
* release all: every candidate's DP AUC with the ``distributed`` mechanism (discrete Laplace
  on the aggregate) at the per-evaluation eps of the PLD planner for T evaluations within
  (eps, delta = 1e-6), the best noisy AUC taken.
* repeat-and-select: a geometric number of evaluations (mean T) of candidates drawn at
  random, each with the ``distributed`` mechanism at the eps0 whose repeat-and-select spends
  (eps, 1e-6) by dp-accounting's RDP accountant; the best noisy AUC taken.

Reported: the median and 95th percentile of (best exact AUC - selected's exact AUC) and the
share of runs within 1e-4 of the best.
"""

import argparse
import sys
import time

import numpy as np


def candidate_aucs(t_count: int, seed: int = 0) -> tuple[np.ndarray, int, int]:
    from secure_auc.data import make_ctr_dataset
    from secure_auc.metrics import rank_auc

    scores, labels = make_ctr_dataset(seed=0)
    rng = np.random.default_rng(seed)
    u = np.linspace(0, 1, t_count)
    sd = 0.05 + 0.6 * np.exp(-6 * u) + 0.02 * np.maximum(u - 0.8, 0) / 0.2  # learning, plateau, slight over-fit
    aucs = np.array([rank_auc(labels, scores + sd[t] * rng.standard_normal(len(scores))) for t in range(t_count)])
    return aucs, len(labels), int(labels.sum())


def noisy_max(aucs, m, p, eps, runs, rng):
    from secure_auc.dp.discrete import discrete_laplace
    from secure_auc.dp.selection import selection_scale

    n = m - p
    d = 2 * (aucs * p * n + p * (p - 1) / 2)  # D_t = 2 S_t from the AUC (P, N the same for every t)
    noise = discrete_laplace(rng, selection_scale(m, eps), (runs, len(aucs)), exact=False)
    noisy = d[None, :] + noise
    tie = rng.random((runs, len(aucs)))  # a random priority among equal noisy values
    pick = np.lexsort((tie, noisy), axis=1)[:, -1]
    return aucs[pick]


def _dp_aucs(aucs, picks, mech, m, p, rng):
    """Each picked candidate's DP AUC from the distributed mechanism's exact aggregate noise."""
    n = m - p
    e_c, e_p = mech.aggregate_noise(rng, m, reps=picks.size)
    e_c, e_p = e_c.reshape(picks.shape), e_p.reshape(picks.shape)
    c = (aucs[picks] - 0.5) * p * n
    p2 = p + e_p
    return 0.5 + (c + e_c) / (p2 * (m - p2))


def release_all(aucs, m, p, eps, runs, rng, clients=10):
    from secure_auc import make_mechanism
    from secure_auc.dp.planning import plan_evaluations

    t = len(aucs)
    plan = plan_evaluations(lambda e: make_mechanism("distributed", e, clients=clients), t, eps, 1e-6)
    mech = make_mechanism("distributed", plan.per_epsilon, clients=clients)
    picks = np.broadcast_to(np.arange(t), (runs, t))
    est = _dp_aucs(aucs, picks, mech, m, p, rng)
    return aucs[np.argmax(est, axis=1)], plan.per_epsilon


def repeat_and_select(aucs, m, p, eps, runs, rng, clients=10):
    from secure_auc import make_mechanism
    from secure_auc.dp.selection import base_epsilon_for

    t = len(aucs)
    eps0 = base_epsilon_for(eps, t, 1e-6)
    mech = make_mechanism("distributed", eps0, clients=clients)
    out = np.empty(runs)
    for r in range(runs):
        k = int(rng.geometric(1.0 / t))
        picks = rng.integers(0, t, k)
        est = _dp_aucs(aucs, picks, mech, m, p, rng)
        out[r] = aucs[picks[int(np.argmax(est))]]
    return out, eps0


def summary(best, chosen) -> str:
    gap = best - chosen
    return (f"median {np.median(gap):.1e}  p95 {np.quantile(gap, 0.95):.1e}  "
            f"within 1e-4: {100 * np.mean(gap <= 1e-4):5.1f} %")


def argmax_cost(counts, parties: int = 3) -> None:
    from secure_auc.mpc.launch import run_parties

    done = run_parties(_argmax_job, {r: (counts,) for r in range(parties)}, parties, provider="ttp", timeout=60)
    print(f"secure argmax among {parties} computing parties (TTP dealer), this machine:")
    print("| T | levels | seconds | rounds (server) | bytes sent+received per party (max) |")
    print("|---|---|---|---|---|")
    for i, t in enumerate(counts):
        sec = max(done[r][i][0] for r in range(parties))
        rounds = done[0][i][1]
        nbytes = max(done[r][i][2] for r in range(parties))
        print(f"| {t:,} | {max(0, (t - 1).bit_length())} | {sec:.3f} | {rounds} | {nbytes:,} |")


def _argmax_job(rank, counts):
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.primitives.argmax import secure_argmax
    from secure_auc.mpc.primitives.opening import open_to

    out = []
    for t in counts:
        rng = np.random.default_rng([t, rank])
        shares = torch.from_numpy(rng.integers(-2**40, 2**40, t))
        backend.barrier()
        backend.reset_communication_stats()
        start = time.perf_counter()
        open_to(secure_argmax(shares), 0)
        sec = time.perf_counter() - start
        stats = backend.communication_stats()
        out.append((sec, int(stats["rounds"]), int(stats["bytes"])))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cost", type=int, nargs="*", default=None, metavar="T",
                    help="measure the secure argmax over these T instead (3 local parties)")
    args = ap.parse_args(argv)
    if args.cost is not None:
        argmax_cost(args.cost or [100, 1000])
        return 0
    rng = np.random.default_rng(args.seed)
    print(f"total eps = {args.epsilon:g}, {args.runs} runs per cell; best - selected exact AUC")
    for t in args.candidates:
        start = time.perf_counter()
        aucs, m, p = candidate_aucs(t, args.seed)
        best = aucs.max()
        print(f"T = {t:,}: exact AUCs {aucs.min():.4f} .. {best:.5f}, "
              f"{int(np.sum(aucs >= best - 1e-4))} within 1e-4 of the best ({time.perf_counter() - start:.0f} s)")
        print(f"  noisy-max (eps = {args.epsilon:g}):           {summary(best, noisy_max(aucs, m, p, args.epsilon, args.runs, rng))}")
        chosen, per = release_all(aucs, m, p, args.epsilon, args.runs, rng)
        print(f"  release all (eps = {per:.3g} each, PLD): {summary(best, chosen)}")
        chosen, eps0 = repeat_and_select(aucs, m, p, args.epsilon, args.runs, rng)
        print(f"  repeat-and-select (eps0 = {eps0:.3g}):  {summary(best, chosen)}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
