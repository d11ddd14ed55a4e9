#!/usr/bin/env python3
"""Benchmark the secure rank step alone: seconds, bytes and rounds per party.

    .venv/bin/python scripts/bench_rank.py                 # every method, 2^12..2^20 and 458,407 scores, 2 and 3 parties
    .venv/bin/python scripts/bench_rank.py --methods radix --sizes 4096 65536 --parties 3 --provider tfp --json

"Parties" counts the computing parties in the protocol's layout: the server
(rank 0, no scores) and parties - 1 clients holding equal slices of the
scores; with ``--provider ttp`` (default) a dealer process is extra.  Each
party runs :func:`secure_auc.mpc.ranks.rank_step` (limb agreement, sharing,
sort, mid-ranks, unsort, each client's ranks opened to it) on float32 scores
with ties (``--dtype float64`` for two key limbs), and every run is checked
against ``scipy.stats.rankdata``.

Peak GiB: the largest peak resident memory among the parties (and the dealer).
The full default run takes about 13 minutes, most of it the sorting network
at 2^19 and 2^20 (``--max-network 65536`` skips those).

Seconds: the rank step in each party, from its start to its ranks (process
start-up, about 3-5 s, excluded).  Bytes and rounds: CrypTen's communicator
counters (``get_communication_stats()``), which count what a party sends
plus what it receives in each collective, and one round per collective
(with TTP, rank 0 also counts its requests to the dealer).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def _job(rank, part, sizes, method):
    """One computing party: the rank step alone, with its seconds, bytes, rounds and peak memory."""
    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.ranks import rank_step

    comm = backend.comm()
    comm.barrier()
    comm.reset_communication_stats()
    start = time.perf_counter()
    twice = rank_step(part, sizes, rank, method=method)
    seconds = time.perf_counter() - start
    stats = comm.get_communication_stats()
    return {"seconds": seconds, "bytes": int(stats["bytes"]), "rounds": int(stats["rounds"]), "twice": twice,
            "peak_rss": _peak_rss()}


def _dealer_peak() -> dict:
    return {"peak_rss": _peak_rss()}


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def run(m: int, parties: int, provider: str, dtype: str, method: str = "radix", seed: int = 0,
        timeout: float = 1800) -> dict:
    from scipy.stats import rankdata

    from secure_auc.mpc.launch import spawn_parties

    if parties < 2:
        raise SystemExit("--parties: at least 2 (the server and one client)")
    rng = np.random.default_rng(seed)
    scores = rng.random(m)
    scores = np.round(scores, 4) if dtype == "float32" else scores  # float32: ties; float64: distinct
    scores = scores.astype(np.float32).astype(np.float64) if dtype == "float32" else scores
    parts = np.array_split(scores, parties - 1)
    sizes = [len(p) for p in parts]
    per_rank = {r: (parts[r - 1] if r >= 1 else None, sizes, method) for r in range(parties)}
    wall = time.perf_counter()
    done = spawn_parties(_job, per_rank, parties, provider=provider, timeout=120, deadline=timeout,
                         after_dealer=_dealer_peak)
    wall = time.perf_counter() - wall
    got = np.concatenate([done[r]["twice"] for r in range(1, parties)])
    exact = bool(np.array_equal(got, 2 * (rankdata(scores) - 1)))
    return {
        "method": method, "samples": m, "parties": parties, "provider": provider, "dtype": dtype,
        "seconds_per_party": [round(done[r]["seconds"], 2) for r in range(parties)],
        "bytes_per_party": [done[r]["bytes"] for r in range(parties)],
        "rounds_per_party": [done[r]["rounds"] for r in range(parties)],
        "peak_rss_per_party": [done[r]["peak_rss"] for r in range(parties)],
        "dealer_peak_rss": done[parties]["peak_rss"] if provider == "ttp" else None,
        "wall_seconds": round(wall, 2), "exact": exact,
    }


DEFAULT_SIZES = sorted([2**e for e in range(12, 21)] + [458_407])


def growth(rows: list[dict], min_size: int = 2**14) -> list[dict]:
    """Least-squares exponent b in seconds ~ M^b, and seconds / (M log2 M) at each end, per method and parties."""
    out = []
    for key in sorted({(r["method"], r["parties"]) for r in rows}):
        pts = sorted((r["samples"], max(r["seconds_per_party"])) for r in rows
                     if (r["method"], r["parties"]) == key and r["samples"] >= min_size)
        if len(pts) < 2:
            continue
        m, t = np.array(pts, dtype=float).T
        b = float(np.polyfit(np.log(m), np.log(t), 1)[0])
        per = t / (m * np.log2(m)) * 1e9
        out.append({"method": key[0], "parties": key[1], "sizes": [int(x) for x in m], "exponent": round(b, 3),
                    "ns_per_M_log2M": [round(float(x), 2) for x in per]})
    return out


def main() -> int:
    from secure_auc.mpc.ranks import RANK_METHODS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=DEFAULT_SIZES,
                   help="numbers of scores (default 2^12..2^20 and 458,407)")
    p.add_argument("--parties", type=int, nargs="+", default=[2, 3], help="computing parties (server + clients)")
    p.add_argument("--methods", nargs="+", choices=RANK_METHODS, default=list(RANK_METHODS),
                   help="rank methods to run (default: all)")
    p.add_argument("--max-network", type=int, default=2**20, metavar="M",
                   help="skip the sorting network above M scores (default 2^20, i.e. run every size)")
    p.add_argument("--provider", choices=("ttp", "tfp"), default="ttp")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="float32: one key limb; float64 (not float32-exact): two limbs")
    p.add_argument("--json", action="store_true", help="print one JSON object {rows, growth}")
    args = p.parse_args()
    rows = []
    if not args.json:
        print(f"{'method':>7} {'M':>8} {'parties':>7} {'seconds':>8} {'MB per party':>26} "
              f"{'rounds per party':>16} {'peak GiB':>8}  exact")
    for method in args.methods:
        for parties in args.parties:
            for m in args.sizes:
                if method == "network" and m > args.max_network:
                    continue
                print(f"running {method} M={m} parties={parties} provider={args.provider} {args.dtype} ...",
                      file=sys.stderr, flush=True)
                r = run(m, parties, args.provider, args.dtype, method=method)
                rows.append(r)
                if not args.json:
                    mb = "/".join(f"{b / 1e6:.0f}" for b in r["bytes_per_party"])
                    rounds = "/".join(str(x) for x in r["rounds_per_party"])
                    peak = max(r["peak_rss_per_party"] + [r["dealer_peak_rss"] or 0]) / 2**30
                    print(f"{method:>7} {m:>8} {parties:>7} {max(r['seconds_per_party']):>8.2f} {mb:>26} "
                          f"{rounds:>16} {peak:>8.2f}  {r['exact']}", flush=True)
    fits = growth(rows)
    if args.json:
        print(json.dumps({"rows": rows, "growth": fits}))
    else:
        print("\ngrowth (sizes >= 2^14): seconds ~ M^b; ns per M*log2(M) at the smallest and largest size")
        for g in fits:
            per = g["ns_per_M_log2M"]
            print(f"  {g['method']:>7}, {g['parties']} parties: b = {g['exponent']:.2f}; "
                  f"{per[0]:.1f} -> {per[-1]:.1f} ns per M log2 M")
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
