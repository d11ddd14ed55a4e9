#!/usr/bin/env python3
"""Vertical federated learning with CrypTen: private inference, then the DP AUC on shares.

    .venv/bin/python scripts/crypten_vfl_example.py                        # 3 parties, 2^16 samples
    .venv/bin/python scripts/crypten_vfl_example.py --parties 2 --samples 5000 --mechanism rr --epsilon 2

The parties hold different feature columns of the same samples.  Party 0 (the platform,
also the server) holds a small model's weights (a two-layer network trained beforehand)
and some columns; parties 1.. (the advertisers) hold the other columns and the labels of
their own rows (advertiser k: a contiguous block of rows).  Every party runs, with
CrypTen's tensors (:func:`secure_auc.mpc.crypten.vfl.vfl_party`):

1. :func:`secure_auc.mpc.crypten.install` — CrypTen's randomness from the project's
   dealer and AES-CTR streams, its openings point-to-point over the encrypted links;
2. private inference: each party shares its columns (``crypten.cryptensor(.., src=rank)``),
   party 0 its weights; ``sigmoid(relu(x W1) W2)`` — an ``MPCTensor`` no party can read;
3. :func:`secure_auc.mpc.crypten.evaluate_mpctensor` — the scores go straight into the
   rank step (keys and digits computed on shares), each advertiser gets the mid-ranks of
   its own rows, adds its own noise to its statistics, and only the sum is opened, to
   the server.

With ``--verify`` (on by default here, for the demonstration; a deployment would not)
the scores are opened at the end to party 0 only (point-to-point; no advertiser learns a
score), whose result the launcher reads to check the estimate against the plain protocol
on the same decoded scores with the same noise keys, and the AUC without noise against
scikit-learn's.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def make_data(samples: int, parties: int, columns: int, seed: int):
    """Feature columns per party (the same samples), labels of a logistic model, and the
    weights of a two-layer network fitted on them (plaintext training stands in for the
    federation's training)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, parties * columns)).astype(np.float32)
    w_true = rng.standard_normal(parties * columns)
    y = (rng.random(samples) < 1 / (1 + np.exp(-(x @ w_true) + 1.0))).astype(np.int8)
    hidden = 4
    w1 = (rng.standard_normal((parties * columns, hidden)) / np.sqrt(parties * columns)).astype(np.float32)
    w1[:, 0] = w_true / np.linalg.norm(w_true)  # one unit sees the true direction
    h = np.maximum(x @ w1, 0)
    w2 = np.linalg.lstsq(np.c_[h, np.ones(samples)], 4 * (y - 0.5), rcond=None)[0][:hidden]
    cols = [x[:, r * columns : (r + 1) * columns].copy() for r in range(parties)]
    return cols, y, w1, w2.astype(np.float32).reshape(hidden, 1)


def advertiser_rows(samples: int, parties: int) -> list[int]:
    """Rows of each advertiser (parties 1..), in order."""
    return [len(p) for p in np.array_split(np.arange(samples), parties - 1)]


def run(parties: int = 3, samples: int = 1 << 16, mechanism: str = "laplace", epsilon: float = 1.0, seed: int = 1,
        sort: str = "radix", verify: bool = True, timeout: float = 120.0) -> dict:
    """Run the example with local processes; returns the estimate and, with ``verify``,
    the references (the plain protocol on the decoded scores, scikit-learn's AUC)."""
    from sklearn.metrics import roc_auc_score

    from secure_auc import ClientData, make_mechanism
    from secure_auc.dp.rng import ClientRngs, client_key
    from secure_auc.mpc.crypten.vfl import vfl_party
    from secure_auc.mpc.launch import run_parties
    from secure_auc.protocol import Client, Server
    from secure_auc.protocol.plain import run_plain

    if parties not in (2, 3):
        raise SystemExit("--parties must be 2 or 3")
    cols, y, w1, w2 = make_data(samples, parties, 2, seed)
    sizes = advertiser_rows(samples, parties)
    label_parts = np.split(y, np.cumsum(sizes)[:-1])
    mech = make_mechanism(mechanism, epsilon) if mechanism != "none" else make_mechanism("none")
    keys = [client_key(seed, k) for k in range(parties - 1)]
    per_rank = {r: (cols, w1, w2, label_parts[r - 1] if r else None, sizes, mech, keys[r - 1] if r else None, sort,
                    verify) for r in range(parties)}
    start = time.perf_counter()
    done = run_parties(vfl_party, per_rank, parties, provider="ttp", timeout=timeout)
    wall = time.perf_counter() - start
    done = {r: done[r] for r in range(parties)}  # the dealer returns nothing
    estimates, aggregates = done[0]["result"]
    out = {"estimate": float(estimates[0].auc), "aggregate": aggregates[0], "wall_seconds": wall,
           "party_seconds": max(d["seconds"] for d in done.values()),
           "inference_seconds": max(d["inference"] for d in done.values()),
           "bytes": [d["bytes"] for d in done.values()]}
    if verify:
        scores = done[0]["decoded"]
        out["scores"] = scores
        parts = np.split(scores, np.cumsum(sizes)[:-1])
        roles = [Client(k, ClientData(p, yk), mech, ClientRngs.from_key(keys[k]))
                 for k, (p, yk) in enumerate(zip(parts, label_parts))]
        out["plain_estimate"] = float(run_plain(roles, Server(mech))[0].auc)
        out["sklearn_auc"] = float(roc_auc_score(y, scores))
        none = make_mechanism("none")
        roles = [Client(k, ClientData(p, yk), none, ClientRngs.from_key(keys[k]))
                 for k, (p, yk) in enumerate(zip(parts, label_parts))]
        out["plain_auc_no_noise"] = float(run_plain(roles, Server(none))[0].auc)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parties", type=int, default=3, help="computing parties: 2 or 3 (default 3)")
    ap.add_argument("--samples", type=int, default=1 << 16, help="samples (default 65536)")
    ap.add_argument("--mechanism", default="laplace", help="DP mechanism (secure-auc's names; default laplace)")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--sort", default="radix", choices=["radix", "network"])
    ap.add_argument("--seed", type=int, default=1, help="data, weights and the advertisers' noise keys")
    ap.add_argument("--no-verify", dest="verify", action="store_false",
                    help="do not open the scores at the end to check the estimate")
    args = ap.parse_args(argv)
    out = run(args.parties, args.samples, args.mechanism, args.epsilon, args.seed, args.sort, args.verify)
    print(f"DP AUC estimate ({args.mechanism}, eps {args.epsilon:g}): {out['estimate']:.6f}")
    if args.verify:
        print(f"plain protocol, same decoded scores and noise keys: {out['plain_estimate']:.6f}")
        print(f"AUC without noise: {out['plain_auc_no_noise']:.6f}; scikit-learn on the decoded scores: "
              f"{out['sklearn_auc']:.6f}")
    print(f"{args.samples} samples, {args.parties} parties: inference {out['inference_seconds']:.1f} s, "
          f"inference + rank step + AUC {out['party_seconds']:.1f} s (wall {out['wall_seconds']:.1f} s); "
          f"MB sent and received per party: {', '.join(f'{b / 1e6:.0f}' for b in out['bytes'])}")
    ok = not args.verify or out["estimate"] == out["plain_estimate"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
