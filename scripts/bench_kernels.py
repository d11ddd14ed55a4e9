#!/usr/bin/env python3
"""One digit round's local work, compiled kernels against the numpy/torch reference, and the
kernels' compile and cached start-up times.

    .venv/bin/python scripts/bench_kernels.py                          # 2^20 rows, 1 and 2 threads
    taskset -c 0 .venv/bin/python scripts/bench_kernels.py --threads 1 # one core
    .venv/bin/python scripts/bench_kernels.py --compile                # first compile and cached start-up

A round's local work for one party (:mod:`secure_auc.mpc.kernels`), on random shares of M
rows with 2-bit digits: among 2 parties the differences to open and sigma from the opened
values (``beaver_round_bases``, ``beaver_sum``), among 3 the replicated round
(``replicated_round``), and the split of the opened window (``split_opened``); the
reference is the code of :mod:`secure_auc.mpc.sort.radix` they replace.  Milliseconds of
wall time and of CPU time (the process's, all threads) per round, the best of ``--repeat``.
``--compile``: a fresh process compiles every kernel into an empty cache folder
(:func:`secure_auc.mpc.kernels.warm_up`), then a second process loads them from it; the
seconds of each, and of importing numba.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def _round_work(m: int, rng):
    import torch

    from secure_auc.mpc import kernels
    from secure_auc.mpc.sort import radix

    v, rank = 4, 1
    e, e2, b, f = (rng.integers(-2**31, 2**31, (v - 1, m)).astype(np.int32) for _ in range(4))
    c, zero = rng.integers(-2**31, 2**31, (1, m)).astype(np.int32), rng.integers(-2**31, 2**31, m).astype(np.int32)
    u, tau = rng.integers(0, v, m), rng.permutation(m)
    k = max(1, (m - 1).bit_length())
    opened = (tau + (u << k)).astype(np.int32)
    et, ut, tt, ct, ft, ot, zt = map(torch.from_numpy, (e, u, tau, c, f, opened, zero))

    def ref2():
        inv = radix.inverse_permutation(tt)
        base = radix.shuffled_bases(radix.onehot_rows(et, ut, rank), tt, rank, inv)
        d_rot = radix.rotate_rows(base, ut)
        diff = d_rot[1:] - d_rot[0]
        diff -= torch.from_numpy(b)
        radix.digit_permutation(d_rot, et, ct, ft, rank)

    def ker2():
        t, uu = kernels.split_window(opened, k)
        diff, d0 = kernels.beaver_round_bases(e, uu, t, b, rank)
        kernels.beaver_sum(d0, e, f, c)

    def ref3():
        t = (ot & ((1 << k) - 1)).long()
        uu = (ot >> k).long()
        inv = radix.inverse_permutation(t)
        radix.replicated_digit_permutation((et, torch.from_numpy(e2)), uu, t, rank, zt, inv)

    def ker3():
        t, uu = kernels.split_window(opened, k)
        kernels.replicated_round(e, e2, uu, t, rank, zero)

    return {("2 parties", "numpy"): ref2, ("2 parties", "numba"): ker2,
            ("3 parties", "numpy"): ref3, ("3 parties", "numba"): ker3}


def timings(m: int, threads: int, repeat: int) -> list[dict]:
    from secure_auc.mpc import kernels

    kernels.warm_up()
    kernels.set_threads(threads)
    rows = []
    for (parties, code), fn in _round_work(m, np.random.default_rng(0)).items():
        fn()
        best_wall = best_cpu = float("inf")
        for _ in range(repeat):
            w, c = time.perf_counter(), time.process_time()
            fn()
            best_wall, best_cpu = min(best_wall, time.perf_counter() - w), min(best_cpu, time.process_time() - c)
        rows.append({"M": m, "parties": parties, "code": code, "threads": threads,
                     "cores": kernels.default_threads(), "wall_ms": round(1e3 * best_wall, 1),
                     "cpu_ms": round(1e3 * best_cpu, 1)})
    return rows


_CHILD = """
import time
t = time.perf_counter()
import numba
numba_import = time.perf_counter() - t
t = time.perf_counter()
from secure_auc.mpc import kernels
imported = time.perf_counter() - t
print({"numba_import_s": round(numba_import, 2), "kernels_import_s": round(imported, 2),
       "warm_up_s": round(kernels.warm_up(), 2)})
"""


def compile_times() -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for name in ("first compile", "cached start-up"):
            start = time.perf_counter()
            got = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
            out[name] = eval(got.stdout.strip().splitlines()[-1]) | {"process_s": round(time.perf_counter() - start, 2)}
        out["cache_bytes"] = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(cache) for f in fs)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 20], help="rows (default 2^20)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="kernel threads (default 1 2)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each, the best kept (default 5)")
    ap.add_argument("--compile", action="store_true", help="measure the first compile and the cached start-up")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args()
    if args.compile:
        result = compile_times()
        print(json.dumps(result, indent=1))
        return 0
    rows = [r for m in args.sizes for t in args.threads for r in timings(m, t, args.repeat)]
    if args.json:
        print(json.dumps({"rows": rows, "load": os.getloadavg()}, indent=1))
        return 0
    print(f"one digit round's local work, one party (load average {os.getloadavg()[0]:.1f})\n")
    print("| M | parties | code | threads | cores | wall ms | CPU ms |\n|---:|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['M']:,} | {r['parties']} | {r['code']} | {r['threads']} | {r['cores']} | {r['wall_ms']} | "
              f"{r['cpu_ms']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
