#!/usr/bin/env python3
"""Benchmark the MPC protocol against the number of clients K at a fixed M.

    .venv/bin/python scripts/bench_clients.py                       # built-in set, K = 2, 10, 100, 1000; w = 3
    .venv/bin/python scripts/bench_clients.py --clients 2 16 --samples 16384 --layout clients helpers
    .venv/bin/python scripts/bench_clients.py --clients 458407 --hosts 2   # one sample per client

Each row is one whole evaluation (``launch_local``) of the built-in Criteo-like set
split IID over K clients, with adaptive Laplace and distributed noise evaluated on the
same ranks (one run, two mechanisms), every client with its own noise key.  Layouts:
``helpers`` (the server and w - 1 helpers compute; the clients are input parties,
hosted by ``--hosts`` local processes) and ``clients`` (every client computes).

Columns: wall seconds of the run (process start-up included), the rank step's
seconds at the server, the bytes (sent + received) of the busiest computing party,
and the mean bytes per client (a host's bytes over its clients).  Each row checks
that the DP estimates equal the plain protocol's with the same client keys.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def run(k: int, samples: int | None, layout: str, w: int, hosts: int, seed: int) -> dict:
    from secure_auc.dp.registry import make_mechanism
    from secure_auc.dp.rng import client_key
    from secure_auc.evaluate import builtin_clients
    from secure_auc.mpc.launch import launch_local
    from secure_auc.mpc.party import PartyConfig
    from secure_auc.protocol import Server
    from secure_auc.protocol.client import ClientGroup

    clients = builtin_clients(k, samples=samples)
    mechanisms = (make_mechanism("laplace", 1.0, allocation="adaptive"),
                  make_mechanism("distributed", 1.0, clients=k))
    keys = [client_key(seed, i) for i in range(k)]
    config = PartyConfig(mechanisms=mechanisms, clients=k, progress=False, computing=w if layout == "helpers" else 0)
    start = time.perf_counter()
    done = launch_local(clients, config, timeout=600, noise_keys=keys, hosts=hosts)
    wall = time.perf_counter() - start
    computing = [r for r in done if r >= 0]
    host_bytes = [done[r]["bytes"] for r in done if r < 0]
    m = sum(len(c) for c in clients)
    # the same keys in the plain protocol's client code give the same statistics (not for distributed noise,
    # whose shares need the secure sum: its aggregate is compared with the exact one plus the clients' shares)
    mech = mechanisms[0]
    from secure_auc.protocol.plain import run_plain

    _, plain_aggregate, _ = run_plain([ClientGroup(0, clients, mech, keys)], Server(mech))
    same = done[0].aggregates[0] == plain_aggregate
    if layout == "helpers":
        per_client = sum(host_bytes) / k
    else:
        per_client = float(np.mean([done[r].bytes_sent for r in computing if r > 0]))
    return {"K": k, "M": m, "layout": layout, "w": w if layout == "helpers" else k + 1, "hosts": len(host_bytes),
            "wall_seconds": round(wall, 2), "rank_seconds": round(done[0].rank_seconds, 2),
            "busiest_party_bytes": max(done[r].bytes_sent for r in computing),
            "bytes_per_client": round(per_client), "auc_adaptive": float(done[0].estimates[0].auc),
            "auc_distributed": float(done[0].estimates[1].auc), "equals_plain": bool(same)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[2, 10, 100, 1000])
    ap.add_argument("--samples", type=int, default=None, help="M (default: the built-in set's 458,407)")
    ap.add_argument("--layout", nargs="+", choices=("helpers", "clients"), default=["helpers"])
    ap.add_argument("--computing", type=int, default=3, choices=(2, 3), help="w in the helpers layout (default 3)")
    ap.add_argument("--hosts", type=int, default=1, help="client-host processes in the helpers layout (default 1)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    if not args.json:
        print(f"{'layout':>8} {'w':>4} {'K':>8} {'M':>8} {'wall s':>8} {'rank s':>8} {'busiest party':>14} "
              f"{'per client':>11} {'= plain':>7}")
    for layout in args.layout:
        for k in args.clients:
            r = run(k, args.samples, layout, args.computing, args.hosts, args.seed)
            rows.append(r)
            if not args.json:
                print(f"{r['layout']:>8} {r['w']:>4} {r['K']:>8,} {r['M']:>8,} {r['wall_seconds']:>8.1f} "
                      f"{r['rank_seconds']:>8.1f} {r['busiest_party_bytes'] / 1e9:>11.2f} GB "
                      f"{r['bytes_per_client'] / 1e3:>8.1f} kB {str(r['equals_plain']):>7}", flush=True)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    return 0 if all(r["equals_plain"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
