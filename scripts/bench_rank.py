#!/usr/bin/env python3
"""Benchmark the secure rank step: seconds, bytes sent and rounds per party.

    .venv/bin/python scripts/bench_rank.py                      # 2^10..2^16, 2 and 3 parties
    .venv/bin/python scripts/bench_rank.py --sizes 4096 65536 --parties 3 --provider ttp --json

"Parties" counts the computing parties: the server plus (parties - 1) clients,
each client holding an equal share of the scores (the TTP dealer, if any, is
extra).  Every run also checks the ranks: the MPC AUC must equal the exact one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from secure_auc.data import make_ctr_dataset
from secure_auc.data.io import ClientData
from secure_auc.data.partition import partition_indices
from secure_auc.dp import NoNoise
from secure_auc.metrics import rank_auc
from secure_auc.mpc.launch import launch_local
from secure_auc.mpc.party import PartyConfig


def run(m: int, parties: int, provider: str, sort: str) -> dict:
    scores, labels = make_ctr_dataset(m, seed=m)
    parts = partition_indices(scores, parties - 1, "iid", seed=0)
    clients = [ClientData(scores[i], labels[i]) for i in parts]
    config = PartyConfig(mechanisms=(NoNoise(),), clients=parties - 1, provider=provider, sort=sort, progress=False)
    start = time.perf_counter()
    res = launch_local(clients, config, timeout=600)
    wall = time.perf_counter() - start
    exact = rank_auc(labels, scores)
    return {
        "samples": m, "parties": parties, "provider": provider, "sort": sort,
        "rank_step_seconds": round(res[0].rank_seconds, 2), "wall_seconds": round(wall, 2),
        "bytes_sent_per_party": [res[r].bytes_sent for r in sorted(res)],
        "rounds_per_party": [res[r].rounds for r in sorted(res)],
        "auc_exact": float(res[0].estimate.auc) == exact,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[2**e for e in range(10, 17)])
    p.add_argument("--parties", type=int, nargs="+", default=[2, 3])
    p.add_argument("--provider", choices=("ttp", "tfp"), default="ttp")
    p.add_argument("--sort", default="network")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = []
    if not args.json:
        print(f"{'M':>8} {'parties':>7} {'rank s':>8} {'wall s':>8} {'MB sent/party':>14} {'rounds/party':>12}  exact")
    for parties in args.parties:
        for m in args.sizes:
            print(f"running M={m} parties={parties} ...", file=sys.stderr, flush=True)
            r = run(m, parties, args.provider, args.sort)
            rows.append(r)
            if not args.json:
                mb = max(r["bytes_sent_per_party"]) / 1e6
                print(f"{m:>8} {parties:>7} {r['rank_step_seconds']:>8.2f} {r['wall_seconds']:>8.2f} "
                      f"{mb:>14.1f} {max(r['rounds_per_party']):>12}  {r['auc_exact']}", flush=True)
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
