#!/usr/bin/env python3
"""The rank step on CrypTen-shared scores against the rank step on client-shared keys: same
run, same parties, same scores.

    .venv/bin/python scripts/bench_crypten_rank.py                  # 2^20 scores, 3 computing parties
    .venv/bin/python scripts/bench_crypten_rank.py --log2 16 --parties 2

Parties 1.. hold the scores (float32, one block each).  In the same processes:

* **client-shared**: today's rank step (:func:`secure_auc.mpc.ranks.rank_step`): the holders
  encode their scores as keys, share keys and digits, the radix sort, mid-ranks opened to
  the holders;
* **MPCTensor**: the holders share the same scores with CrypTen
  (``crypten.cryptensor(.., src=holder)``, 16 fractional bits, after
  :func:`secure_auc.mpc.crypten.install`), and
  :func:`secure_auc.mpc.crypten.bridge.twice_midranks_mpctensor` ranks the ``MPCTensor``:
  the conversion to keys and digits on shares, then the same radix sort; the mid-ranks
  opened to the holders (as for the AUC: scan in Z_2^32), or kept as shares in Z_2^64 (an
  ``MPCTensor`` out).

Printed: the slowest party's seconds and the most bytes any computing party counted (sent
and received), for each, and their ratio to the client-shared rank step.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def bench_party(rank, scores, sizes):
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.crypten import install
    from secure_auc.mpc.crypten.bridge import twice_midranks_mpctensor
    from secure_auc.mpc.ranks import rank_step, reveal_to_owners

    crypten = backend.crypten
    holders = list(range(1, len(sizes) + 1))
    mine = scores[rank - 1] if rank in holders else None
    out = {}
    rank_step(mine[:64] if mine is not None else None, [64] * len(sizes), rank)  # warm-up, not measured
    backend.barrier()
    before, start = backend.communication_stats()["bytes"], time.perf_counter()
    rank_step(mine, sizes, rank, method="radix")
    out["client-shared"] = (time.perf_counter() - start, backend.communication_stats()["bytes"] - before)
    with install():
        x = crypten.cat([crypten.cryptensor(torch.from_numpy(scores[h - 1]) if h == rank else torch.empty(n), src=h)
                         for h, n in zip(holders, sizes)])
        backend.barrier()
        for name, dtype in (("MPCTensor, ranks to their holders", torch.int32), ("MPCTensor, ranks as an MPCTensor",
                                                                                 torch.int64)):
            timings: dict = {}
            backend.barrier()
            before, start = backend.communication_stats()["bytes"], time.perf_counter()
            twice = twice_midranks_mpctensor(x, method="radix", timings=timings, dtype=dtype)
            if dtype == torch.int32:
                reveal_to_owners(twice, sizes, holders)
            out[name] = (time.perf_counter() - start, backend.communication_stats()["bytes"] - before)
            out["conversion"] = timings["conversion"], timings["conversion_bytes"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log2", type=int, default=20, help="log2 of the number of scores (default 20)")
    ap.add_argument("--parties", type=int, default=3, help="computing parties (default 3)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    from secure_auc.mpc.launch import run_parties

    m, w = 1 << args.log2, args.parties
    rng = np.random.default_rng(args.seed)
    sizes = [len(p) for p in np.array_split(np.arange(m), w - 1)]
    scores = [rng.random(n).astype(np.float32) for n in sizes]
    done = run_parties(bench_party, {r: (scores, sizes) for r in range(w)}, w, provider="ttp", timeout=600)
    rows = {}
    names = ("client-shared", "MPCTensor, ranks to their holders", "MPCTensor, ranks as an MPCTensor")
    for name in names:
        rows[name] = (max(done[r][name][0] for r in range(w)), max(done[r][name][1] for r in range(w)))
    conv = max(done[r]["conversion"][0] for r in range(w))
    conv_bytes = max(done[r]["conversion"][1] for r in range(w))
    print(f"{m:,} scores, {w} computing parties (and the dealer), radix sort")
    print("| rank step on | seconds | MB sent and received (most by one party) | time, bytes vs client-shared |")
    print("|---|---|---|---|")
    t0, b0 = rows[names[0]]
    for name, (sec, nbytes) in rows.items():
        print(f"| {name} | {sec:.2f} | {nbytes / 1e6:,.0f} | {sec / t0:.2f}x, {nbytes / b0:.2f}x |")
    print(f"the conversion to keys and digits (included): {conv:.2f} s, {conv_bytes / 1e6:,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
