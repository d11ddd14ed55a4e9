#!/usr/bin/env python3
"""Benchmark the simulator: the paper's whole different-methods table and the large-set RR table.

    .venv/bin/python scripts/bench_simulator.py            # R = 100, as in the paper
    .venv/bin/python scripts/bench_simulator.py --reps 20  # faster

Prints wall seconds (data generation and ranking included) and the peak
resident memory of this process (ru_maxrss).  Targets on a
2-core machine: the methods table (7 K x 4 eps x 6 rows x 100 repetitions,
M = 458,407) under 2 minutes; the large-set RR table (M = 4,584,062, 10 eps,
100 repetitions) under 5 minutes; memory under 4 GiB.
"""

import argparse
import os
import resource
import sys
import time

from secure_auc.data import CRITEO_LARGE, make_ctr_dataset
from secure_auc.cli.simulate import run_simulation
from secure_auc.simulation.engine import Simulator
from secure_auc.experiments.paper_tables import INF, METHOD_CLIENTS


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is KiB on Linux


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--threads", type=int, default=None, help="threads for the repetitions (default: cores, at most 4)")
    args = p.parse_args()
    progress = lambda m: print("  " + m, file=sys.stderr, flush=True)  # noqa: E731

    t = time.perf_counter()
    sim = Simulator(*make_ctr_dataset(), workers=args.threads)
    print(f"{os.cpu_count()} cores, {sim.workers} threads for the repetitions")
    cells = []
    # rows: RR, GlobalLaplace, LocalLaplace IID/non-IID, adaptive IID/non-IID
    cells += run_simulation(sim, ["rr"], [], [], [1, 2, 4, 8], reps=args.reps, seed=0, progress=progress)
    cells += run_simulation(sim, ["global"], METHOD_CLIENTS, ["iid"], [1, 2, 4, 8], reps=args.reps, seed=0, progress=progress)
    cells += run_simulation(sim, ["local", "adaptive"], METHOD_CLIENTS, ["iid", "noniid"], [1, 2, 4, 8],
                            reps=args.reps, seed=0, progress=progress)
    methods_s = time.perf_counter() - t
    print(f"different-methods table: {len(cells)} cells x {args.reps} repetitions, M = {sim.m:,}: "
          f"{methods_s:.1f} s; peak memory so far {peak_gib():.2f} GiB")

    t = time.perf_counter()
    large = Simulator(*make_ctr_dataset(CRITEO_LARGE.samples, CRITEO_LARGE.positives, auc=CRITEO_LARGE.auc),
                      workers=args.threads)
    eps = [0.1, 0.25, 0.5, 1, 2, 3, 4, 5, 10, INF]
    run_simulation(large, ["rr"], [], [], eps, reps=args.reps, seed=0, progress=progress)
    large_s = time.perf_counter() - t
    print(f"large-set RR table: 10 eps x {args.reps} repetitions, M = {large.m:,}: {large_s:.1f} s")
    print(f"peak resident memory: {peak_gib():.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
