#!/usr/bin/env python3
"""Benchmark the secure rank step alone: seconds, bytes and rounds per party.

    .venv/bin/python scripts/bench_rank.py                       # 2^10..2^16 scores, 2 and 3 parties
    .venv/bin/python scripts/bench_rank.py --sizes 4096 65536 --parties 3 --provider tfp --json

"Parties" counts the computing parties in the protocol's layout: the server
(rank 0, no scores) and parties - 1 clients holding equal slices of the
scores; with ``--provider ttp`` (default) a dealer process is extra.  Each
party runs :func:`secure_auc.mpc.ranks.rank_step` (limb agreement, sharing,
sort, mid-ranks, unsort, each client's ranks opened to it) on float32 scores
with ties (``--dtype float64`` for two key limbs), and every run is checked
against ``scipy.stats.rankdata``.

Seconds: the rank step in each party, from its start to its ranks (process
start-up, about 3-5 s, excluded).  Bytes and rounds: CrypTen's communicator
counters (``get_communication_stats()``), which count what a party sends
plus what it receives in each collective, and one round per collective
(with TTP, rank 0 also counts its requests to the dealer).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue as queue_mod
import sys
import time
import traceback

import numpy as np


def _party(rank, world, port, provider, parts, results):
    try:
        from secure_auc.mpc.runtime import init_party, run_dealer, shutdown_party

        init_party(rank=rank, parties=world, master_addr="127.0.0.1", master_port=port,
                   provider=provider, timeout=120)
        if rank == world:
            run_dealer()
            results.put((rank, "ok", None))
            return
        from secure_auc.mpc._crypten import crypten
        from secure_auc.mpc.ranks import rank_step

        comm = crypten.comm.get()
        comm.barrier()
        comm.reset_communication_stats()
        start = time.perf_counter()
        twice = rank_step(parts[rank - 1] if rank >= 1 else None, [len(p) for p in parts], rank)
        seconds = time.perf_counter() - start
        stats = comm.get_communication_stats()
        shutdown_party()
        results.put((rank, "ok", {"seconds": seconds, "bytes": int(stats["bytes"]),
                                  "rounds": int(stats["rounds"]), "twice": twice}))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
        results.close()
        results.join_thread()
        os._exit(1)


def run(m: int, parties: int, provider: str, dtype: str, seed: int = 0, timeout: float = 1800) -> dict:
    from scipy.stats import rankdata

    from secure_auc.mpc.launch import free_port

    if parties < 2:
        raise SystemExit("--parties: at least 2 (the server and one client)")
    rng = np.random.default_rng(seed)
    scores = rng.random(m)
    scores = np.round(scores, 4) if dtype == "float32" else scores  # float32: ties; float64: distinct
    scores = scores.astype(np.float32).astype(np.float64) if dtype == "float32" else scores
    parts = np.array_split(scores, parties - 1)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    ranks = list(range(parties)) + ([parties] if provider == "ttp" else [])
    procs = [ctx.Process(target=_party, args=(r, parties, port, provider, parts, results), daemon=True)
             for r in ranks]
    wall = time.perf_counter()
    for p in procs:
        p.start()
    done = {}
    deadline = time.monotonic() + timeout
    try:
        while len(done) < len(ranks):
            try:
                rank, status, out = results.get(timeout=0.5)
            except queue_mod.Empty:
                if any(p.exitcode not in (None, 0) for p in procs) or time.monotonic() > deadline:
                    raise RuntimeError("a party died or the run timed out") from None
                continue
            if status == "error":
                raise RuntimeError(f"party {rank} failed:\n{out}")
            done[rank] = out
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=5)
    wall = time.perf_counter() - wall
    got = np.concatenate([done[r]["twice"] for r in range(1, parties)])
    exact = bool(np.array_equal(got, 2 * (rankdata(scores) - 1)))
    return {
        "samples": m, "parties": parties, "provider": provider, "dtype": dtype,
        "seconds_per_party": [round(done[r]["seconds"], 2) for r in range(parties)],
        "bytes_per_party": [done[r]["bytes"] for r in range(parties)],
        "rounds_per_party": [done[r]["rounds"] for r in range(parties)],
        "wall_seconds": round(wall, 2), "exact": exact,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[2**e for e in range(10, 17)], help="numbers of scores")
    p.add_argument("--parties", type=int, nargs="+", default=[2, 3], help="computing parties (server + clients)")
    p.add_argument("--provider", choices=("ttp", "tfp"), default="ttp")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="float32: one key limb; float64 (not float32-exact): two limbs")
    p.add_argument("--json", action="store_true", help="print one JSON list of rows")
    args = p.parse_args()
    rows = []
    if not args.json:
        print(f"{'M':>8} {'parties':>7} {'seconds':>8} {'MB per party':>22} {'rounds per party':>22}  exact")
    for parties in args.parties:
        for m in args.sizes:
            print(f"running M={m} parties={parties} provider={args.provider} {args.dtype} ...",
                  file=sys.stderr, flush=True)
            r = run(m, parties, args.provider, args.dtype)
            rows.append(r)
            if not args.json:
                mb = "/".join(f"{b / 1e6:.1f}" for b in r["bytes_per_party"])
                rounds = "/".join(str(x) for x in r["rounds_per_party"])
                print(f"{m:>8} {parties:>7} {max(r['seconds_per_party']):>8.2f} {mb:>22} {rounds:>22}  {r['exact']}",
                      flush=True)
    if args.json:
        print(json.dumps(rows))
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
