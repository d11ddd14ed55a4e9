"""``secure-auc simulate``: R repetitions of FedAUC's mechanisms, mean and std of the estimate."""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from ..validation import InputError, check_epsilon, check_fraction
from ..dp.registry import (DEFAULT_METHODS, DEFAULT_NOISE, METHODS, SHARE_NOISES, method_family, method_takes,
                             noise_takes_delta, noises, paper_noise)
from ..simulation.engine import Simulator
from .output import add_output_options, json_safe, check_not_given, progress_bar, progress_enabled, resolve_defaults

__all__ = ["add_parser", "run_simulation"]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate K clients over R repetitions: mean and std of each mechanism's estimate",
        description="Simulate FedAUC's DP mechanisms with K clients in one process (no MPC), R repetitions "
        "each with its own seed derived from --seed, and report the mean and standard deviation of the "
        "estimated AUC next to the true AUC, with closed-form standard deviations where the paper gives "
        "one and this project's delta-method std for every mechanism. Methods: "
        + "; ".join(f"{k}: {v[0]}" for k, v in METHODS.items())
        + ". Without files the built-in Criteo-like dataset is used. With files (one CSV per client, columns "
        "'score' and 'label', as for 'evaluate'), each file is one client (--partition files, the default "
        "then); with --partition iid/noniid their rows are pooled and split into --clients parts instead. "
        "rr reports the debiased estimate and the noisy AUC before debiasing. --exact-p gives the paper's "
        "appendix variant of global/local (P and N exact, the whole eps on localSum), whose std the "
        "paper's closed forms describe. Progress goes to stderr, one line per finished cell.",
    )
    p.add_argument("files", nargs="*", metavar="CLIENT.csv",
                   help="one CSV per client with columns 'score' and 'label' (default: the built-in dataset)")
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(DEFAULT_METHODS),
                   help=f"mechanisms to simulate (default: {' '.join(DEFAULT_METHODS)})")
    p.add_argument("--clients", type=int, nargs="+", default=None,
                   help="values of K for the iid and noniid splits (default 10 1000)")
    p.add_argument("--partition", nargs="+", choices=("iid", "noniid", "files"), default=None,
                   help="how samples are split over K clients: iid (uniform), noniid (consecutive score blocks), "
                        "files (each input file one client; K = the number of files). Default: files with input "
                        "files, else iid noniid")
    p.add_argument("--epsilon", type=float, nargs="+", default=[1.0], help="values of eps, each in [1e-6, 1e4]; with --methods rr "
                        "only, also inf (the no-noise limit, as in the paper's table). Default: 1")
    p.add_argument("--alpha", type=float, default=None,
                   help="global/local only: share of eps on localSum (default 0.5)")
    p.add_argument("--beta", type=float, default=None, help="orthogonal only: share of eps on localP (default 0.5)")
    p.add_argument("--noise", choices=noises(), default=DEFAULT_NOISE,
                   help="noise family; for distributed, laplace means discrete Laplace shares and skellam "
                        "Skellam shares (simulation only: releases use the exact discrete Gaussian; needs --delta). "
                        f"Default: {DEFAULT_NOISE}")
    p.add_argument("--honest-fraction", type=float, default=None,
                   help="distributed only: fraction of clients assumed honest (default 1)")
    p.add_argument("--delta", type=float, default=None,
                   help=f"delta in (0, 1), for --noise {' or '.join(n for n in noises() if noise_takes_delta(n))} "
                        "only (required there)")
    p.add_argument("--exact-p", action="store_true",
                   help="global/local only: release localSum alone with the whole eps, the server uses the true "
                        "P and N (the paper's appendix variant behind its closed forms)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads for the repetitions (default: the number of cores, at most 4); "
                        "results do not depend on it")
    p.add_argument("--reps", type=int, default=100, help="repetitions R (default 100)")
    p.add_argument("--seed", type=int, default=0,
                   help="root seed; repetition r uses SeedSequence(seed).spawn(R)[r] (default 0)")
    p.add_argument("--samples", type=int, default=None, help="M of the built-in dataset (default 458,407)")
    p.add_argument("--large", action="store_true", help="the 10x larger built-in set (M = 4,584,062)")
    p.add_argument("--data-seed", type=int, default=None,
                   help="seed of the built-in data and of the iid split (default 0)")
    p.add_argument("--json", action="store_true", help="print the whole result table as JSON")
    add_output_options(p)
    p.set_defaults(handler=_cmd)


def load_dataset(args):
    from ..evaluate import load_clients
    from ..data import CRITEO_LARGE, make_ctr_dataset

    if args.files:
        parts = load_clients(args.files)
        groups = np.repeat(np.arange(len(parts)), [len(d) for d in parts])
        return np.concatenate([d.scores for d in parts]), np.concatenate([d.labels for d in parts]), groups
    if args.large:
        return (*make_ctr_dataset(CRITEO_LARGE.samples, CRITEO_LARGE.positives, auc=CRITEO_LARGE.auc,
                                  seed=args.data_seed), None)
    if args.samples:
        return (*make_ctr_dataset(args.samples, seed=args.data_seed), None)
    return (*make_ctr_dataset(seed=args.data_seed), None)


def _job_count(args) -> int:
    per_part = sum(1 if part == "files" else len(args.clients) for part in args.partition)
    return len(args.epsilon) * sum(per_part if METHODS[m][2] else 1 for m in args.methods)


def run_simulation(sim: Simulator, methods, clients, partitions, epsilons, *, reps, seed, alpha=0.5, beta=0.5,
                   noise=None, delta=None, honest_fraction=1.0, exact_p=False, progress=None):
    cells = []
    jobs = []
    for eps in epsilons:
        for method in methods:
            if not METHODS[method][2]:  # no partition of the samples (randomized response)
                jobs.append((method, eps, None, None))
            else:
                for part in partitions:
                    ks = [sim.group_count] if part == "files" else clients
                    jobs.extend((method, eps, k, part) for k in ks)
    start = time.perf_counter()
    for i, (method, eps, k, part) in enumerate(jobs, 1):
        cells.append(sim.cell(method, eps, clients=k, partition=part, reps=reps, seed=seed,
                              alpha=alpha, beta=beta, noise=noise, delta=delta, honest_fraction=honest_fraction,
                              exact_p=exact_p and METHODS[method][2]))
        if progress:
            progress(f"[{i}/{len(jobs)}] {method} eps={eps:g}" + (f" K={k} {part}" if k else "")
                     + f"  ({time.perf_counter() - start:.1f} s)")
    return cells


def _check_applicable(args) -> None:
    """Options that no chosen method uses are refused, then defaults filled in."""
    for name in ("alpha", "beta", "honest_fraction"):  # as the methods' families declare them
        if not any(method_takes(m, name, args.noise) for m in args.methods):
            takers = [m for m in METHODS if method_takes(m, name)]
            check_not_given(args, [name], "to --methods " + " ".join(args.methods) + f", only to {' and '.join(takers)}")
    if not noise_takes_delta(args.noise):
        check_not_given(args, ["delta"], f"to --noise {args.noise} (pure eps-DP), only to "
                                         + " and ".join(n for n in noises() if noise_takes_delta(n)))
    if args.files:
        check_not_given(args, ["samples"], "to client files, only to the built-in dataset")
        if args.large:
            raise InputError("--large does not apply to client files, only to the built-in dataset")
    if args.files and (args.partition or ["files"]) == ["files"]:  # each file one client: nothing is split
        check_not_given(args, ["clients", "data_seed"], "to --partition files (each file is one client), only to "
                                                         "the iid and noniid splits")
    resolve_defaults(args, {"alpha": 0.5, "beta": 0.5, "honest_fraction": 1.0, "clients": [10, 1000],
                            "data_seed": 0})
    if not 0 <= args.seed < 2**63:
        raise InputError(f"--seed must be between 0 and 2^63 - 1, got {args.seed}")
    if not 0 <= args.data_seed < 2**63:
        raise InputError(f"--data-seed must be between 0 and 2^63 - 1, got {args.data_seed}")


def _cmd(args) -> int:
    _check_applicable(args)
    for e in args.epsilon:
        if e == float("inf"):  # the no-noise limit of randomized response (the paper's table), nothing else
            others = [m for m in args.methods if not method_family(m).flips_labels]
            if others:
                raise InputError(f"--epsilon inf (the no-noise limit) applies to --methods rr only, not to {others[0]}")
        else:
            check_epsilon(e)
    check_fraction(args.alpha, name="alpha")
    check_fraction(args.beta, name="beta")
    if args.reps < 2:
        raise InputError(f"reps must be at least 2 to estimate a standard deviation, got {args.reps}")
    if noise_takes_delta(args.noise) and args.delta is None:
        raise InputError(f"--noise {args.noise} needs --delta in (0, 1)")
    if args.noise in SHARE_NOISES and any(not method_takes(m, "noise") for m in args.methods):
        raise InputError(f"--noise {args.noise} applies to --methods "
                         f"{' and '.join(m for m in METHODS if method_takes(m, 'noise'))} only")
    if args.exact_p:
        other = {m for m in args.methods if METHODS[m][2] and METHODS[m][1].get("allocation") != "split"}
        if other:
            raise InputError(f"--exact-p applies to --methods global and local only, not {', '.join(sorted(other))}")
        if not paper_noise(args.noise):
            raise InputError("--exact-p is the paper's Laplace analysis: use --noise "
                             + " or ".join(n for n in noises() if paper_noise(n)))
    if args.threads is not None and args.threads < 1:
        raise InputError(f"threads must be at least 1, got {args.threads}")
    if args.partition is None:
        args.partition = ["files"] if args.files else ["iid", "noniid"]
    if "files" in args.partition and not args.files:
        raise InputError("--partition files needs client CSV files")
    scores, labels, groups = load_dataset(args)
    if set(args.partition) - {"files"}:
        for k in args.clients:
            if not 1 <= k <= len(scores):
                raise InputError(f"clients must be between 1 and the number of samples ({len(scores)}), got {k}")
    sim = Simulator(scores, labels, partition_seed=args.data_seed, workers=args.threads, groups=groups)
    if sim.p in (0, sim.m):
        raise InputError("all labels are of one class: AUC is undefined")
    with progress_bar(args, _job_count(args), "simulate") as bar:
        if progress_enabled(args):
            def progress(msg):
                bar.set_postfix_str(msg.split("] ", 1)[-1])
                bar.update()
        elif args.quiet or args.json:
            progress = None
        else:
            def progress(msg):
                print(msg, file=sys.stderr, flush=True)
        cells = run_simulation(sim, args.methods, args.clients, args.partition, args.epsilon, reps=args.reps,
                               seed=args.seed, alpha=args.alpha, beta=args.beta, noise=args.noise, delta=args.delta,
                               honest_fraction=args.honest_fraction, exact_p=args.exact_p, progress=progress)
    if args.json:
        print(json.dumps(json_safe({"samples": sim.m, "positives": sim.p, "true_auc": sim.true_auc, "reps": args.reps,
                          "seed": args.seed, "exact_p": args.exact_p, "cells": [c.to_dict() for c in cells]}), allow_nan=False))
        return 0
    print(f"M = {sim.m}, P = {sim.p}, N = {sim.n}, true AUC = {sim.true_auc:.6f}, R = {args.reps} repetitions"
          + ("; global/local with exact P and N, the whole eps on localSum" if args.exact_p else ""))
    print(f"{'method':<11} {'partition':<9} {'K':>7} {'eps':>5} {'mean AUC':>10} {'std':>10} "
          f"{'closed form':>11} {'delta-method':>12}")
    for c in cells:
        cf = "-" if c.closed_form_std is None else f"{c.closed_form_std:.3g}"
        print(f"{c.method:<11} {c.partition or '-':<9} {c.clients or '-':>7} {c.epsilon:>5g} {c.mean:>10.6f} "
              f"{c.std:>10.3g} {cf:>11} {'-' if c.linearised_std is None else format(c.linearised_std, '.3g'):>12}")
        if c.noisy_mean is not None:  # randomized response: before debiasing
            print(f"{'  (noisy AUC before debiasing)':<40} {c.noisy_mean:>10.6f} {c.noisy_std:>10.3g}")
            print(f"{'  (rank sum / (P N), exact P and N)':<40} {'':>10} {c.exact_pn_std:>10.3g} "
                  f"{c.closed_form_std:>11.3g}")
    print("closed form: the paper's formula, which assumes exact P and N (for rr: of the rank sum on flipped "
          "labels over P N, compare the line below each rr row; for global/local without --exact-p, with "
          "eps_localSum = alpha eps); delta-method: this project's first-order std of the full estimator "
          "(exact for --exact-p) (docs/reproduction.md).")
    return 0
