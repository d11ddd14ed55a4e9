#!/usr/bin/env python3
"""Where the rank step's time goes: each computing party's profile, by kind of work.

    .venv/bin/python scripts/profile_rank.py                      # 2^20 scores among 3 parties
    .venv/bin/python scripts/profile_rank.py --sizes 1048576 --parties 2 --json
    .venv/bin/python scripts/profile_rank.py --sizes 262144 --parties 2 3 --kernels numba numpy  # both, back to back

Runs :func:`secure_auc.mpc.ranks.rank_step` (radix) as ``scripts/bench_rank.py`` does (the
server and parties - 1 clients holding equal slices, the dealer extra), with Python's
``cProfile`` around the rank step in every computing party, and sums each function's own
time (``tottime``) into kinds of work:

* compiled kernels: the fused loops of :mod:`secure_auc.mpc.kernels` (digit rounds, words);
* permutations: the shuffles' random permutations (AES keys sorted by numpy);
* gathers and scatters: moving rows by an index (``index_select``, ``gather``, numpy's fancy
  indexing), the permutations' inverses and checks;
* AES-CTR randomness: the pads, the dealer's randomness and input shares drawn from the PRG
  (and assembled);
* links: encrypting and decrypting the links' records (OpenSSL through ``ssl``) and framing;
* kernel: socket reads and writes (``recv``, ``sendmsg``);
* waiting: ``poll`` (blocked for another party: not CPU);
* packing: low bytes and words on the wire (``words.py``, the openings' codecs);
* arithmetic: sums, prefix sums and products (torch and numpy element-wise work, and the
  protocol's own functions that do it);
* other: the rest (Python's own work between them).

By default cProfile's clock is the wall clock, so a kind's seconds include the time its
thread waited for a core on a busy machine; ``--clock cpu`` counts each thread's CPU time
(``time.thread_time``) instead, robust to other load (``waiting`` is then near 0).  The
dealer is profiled the same way (its kinds of work, ``--dealer``).

The party's CPU seconds (``time.process_time``, all its threads) and the dealer's are given
too; the ranks are checked against ``scipy.stats.rankdata``.  Every party has the same code,
so the table gives the mean over the computing parties, and the busiest party's CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

KINDS = ["compiled kernels", "permutations", "gathers and scatters", "AES-CTR randomness", "links (TLS, framing)", "kernel", "waiting",
         "packing", "arithmetic", "other"]
_RULES = [  # (kind, substrings of cProfile's function label), first match wins
    ("compiled kernels", ["kernels.py:"]),
    ("permutations", ["sort_permutation", "method 'sort' of 'numpy", "torch.sort", "'shuffle' of"]),
    ("gathers and scatters", ["index_select", "index_copy", "torch.gather", "inverse_permutation", "permute_rows",
                              "scatter_rows", "bincount", "_check_permutation", "'take'"]),
    ("AES-CTR randomness", ["update_into", "prg.py", "dealer.py:"]),
    ("links (TLS, framing)", ["_ssl.", "ssl.py", "MemoryBIO", "tls.py", "transport.py", "p2p.py"]),
    ("waiting", ["'poll' of"]),
    ("kernel", ["'recv' of", "'sendmsg' of", "'send' of", "'recv_into' of"]),
    ("packing", ["words.py", "opening.py:", "bits.py"]),
    ("arithmetic", ["built-in method torch.", "of 'torch._C.TensorBase'", "numpy", "radix.py:", "scan.py:",
                    "beaver.py:", "circuits.py:", "b2a.py:", "shuffle.py:", "ranks.py:", "inputs.py:"]),
]


def kind_of(label: str) -> str:
    for kind, needles in _RULES:
        if any(n in label for n in needles):
            return kind
    return "other"


def _clock(name: str):
    return time.thread_time if name == "cpu" else time.perf_counter


def _by_kind(prof) -> tuple[dict, dict]:
    import pstats

    by_kind, by_function = dict.fromkeys(KINDS, 0.0), {}
    for (path, line, name), (_, _, tottime, _, _) in pstats.Stats(prof).stats.items():
        label = f"{name}" if path == "~" else f"{Path(path).name}:{line}({name})"
        by_kind[kind_of(label)] += tottime
        by_function[label] = by_function.get(label, 0.0) + tottime
    return by_kind, by_function


def _job(rank, part, sizes, kernels="numba", threads=None, clock="wall"):
    import cProfile

    from secure_auc.mpc import kernels as compiled
    from secure_auc.mpc.comm import backend

    os.environ["SECURE_AUC_KERNELS"] = kernels  # read at each call; the processes come from a fork server
    if threads is not None:  # else the launcher's default (the cores divided among the processes)
        compiled.set_threads(threads)
    from secure_auc.mpc.ranks import rank_step

    backend.comm().barrier()
    prof = cProfile.Profile(_clock(clock))
    start, cpu = time.perf_counter(), time.process_time()
    prof.enable()
    twice = rank_step(part, sizes, rank, method="radix")
    prof.disable()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    by_kind, by_function = _by_kind(prof)
    return {"twice": twice, "seconds": seconds, "cpu": cpu, "by_kind": by_kind, "by_function": by_function}


_DEALER: dict = {}  # the dealer's profile (in the dealer's process)


def _profile_dealer(clock: str) -> None:
    """In every party's process (this module is imported there): profile the dealer's service."""
    import cProfile

    from secure_auc.mpc.primitives import dealer

    serve = dealer.run_dealer
    if getattr(serve, "profiled", False):
        return

    def run_dealer(*args, **kwargs):
        prof = cProfile.Profile(_clock(clock))
        prof.enable()
        try:
            return serve(*args, **kwargs)
        finally:
            prof.disable()
            _DEALER["by_kind"], _DEALER["by_function"] = _by_kind(prof)

    run_dealer.profiled = True
    dealer.run_dealer = run_dealer


def _dealer():
    return {"cpu": time.process_time(), **_DEALER}


_CLOCK_ENV = "SECURE_AUC_PROFILE_CLOCK"  # the clock, as the fork server (started by the first run) passes it on

if __name__ != "__main__":  # imported in a party's process: the dealer's service is profiled too
    _profile_dealer(os.environ.get(_CLOCK_ENV, "wall"))


def profile(m: int, parties: int, kernels: str = "numba", threads: int | None = None, clock: str = "wall") -> dict:
    from scipy.stats import rankdata

    from bench_rank import scores_for
    from secure_auc.mpc.launch import run_parties

    scores, _ = scores_for(m, "float32", 0)
    parts = np.array_split(scores, parties - 1)
    sizes = [len(p) for p in parts]
    per_rank = {r: (parts[r - 1] if r >= 1 else None, sizes, kernels, threads, clock) for r in range(parties)}
    done = run_parties(_job, per_rank, parties, provider="ttp", timeout=120, deadline=3600, after_dealer=_dealer)
    got = np.concatenate([done[r]["twice"] for r in range(1, parties)])
    mean = {k: float(np.mean([done[r]["by_kind"][k] for r in range(parties)])) for k in KINDS}
    labels = {f for r in range(parties) for f in done[r]["by_function"]}
    functions = {f: float(np.mean([done[r]["by_function"].get(f, 0.0) for r in range(parties)])) for f in labels}
    dealer = done[parties]
    return {"samples": m, "parties": parties, "kernels": kernels, "threads": threads, "clock": clock, "exact": bool(np.array_equal(got, 2 * (rankdata(scores) - 1))),
            "seconds": max(done[r]["seconds"] for r in range(parties)),
            "cpu_per_party": [round(done[r]["cpu"], 2) for r in range(parties)],
            "dealer_cpu": round(done[parties]["cpu"], 2), "mean_seconds_by_kind": mean,
            "mean_seconds_by_function": dict(sorted(functions.items(), key=lambda kv: -kv[1])),
            "dealer_seconds_by_kind": dealer.get("by_kind", {}),
            "dealer_seconds_by_function": dict(sorted(dealer.get("by_function", {}).items(), key=lambda kv: -kv[1]))}


def markdown(rows: list[dict], dealer: bool = False) -> str:
    key = "dealer_seconds_by_kind" if dealer else "mean_seconds_by_kind"
    head = f"| kind of work ({'the dealer' if dealer else 'mean per computing party'}) | " + " | ".join(f"M = {r['samples']:,}, {r['parties']} parties, {r['kernels']}"
                                         + (f", {r['threads']} threads" if r.get("threads") else "") for r in rows) + " |"
    lines = [head, "|---|" + "---:|" * len(rows)]
    for k in KINDS:
        lines.append(f"| {k} | " + " | ".join(f"{r[key].get(k, 0.0):.2f}" for r in rows) + " |")
    lines.append("| CPU s, busiest party | " + " | ".join(f"{max(r['cpu_per_party']):.2f}" for r in rows) + " |")
    lines.append("| CPU s, dealer | " + " | ".join(f"{r['dealer_cpu']:.2f}" for r in rows) + " |")
    lines.append("| rank step s | " + " | ".join(f"{r['seconds']:.2f}" for r in rows) + " |")
    lines.append("| exact | " + " | ".join("yes" if r["exact"] else "NO" for r in rows) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 20], help="numbers of scores (default 2^20)")
    ap.add_argument("--parties", type=int, nargs="+", default=[3], help="computing parties (default 3)")
    ap.add_argument("--kernels", nargs="+", choices=["numba", "numpy"], default=["numba"],
                    help="the compiled kernels, the numpy/torch reference code, or both in turn (default numba)")
    ap.add_argument("--threads", type=int, nargs="+", default=[None],
                    help="threads per computing party (default: the launcher's, the cores divided among the processes)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cProfile's clock: wall (default) or each thread's CPU time (robust to other load)")
    ap.add_argument("--dealer", action="store_true", help="also the dealer's table (and its costliest functions)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--top", type=int, default=0, metavar="N", help="also list each run's N costliest functions")
    args = ap.parse_args()
    if any(p < 2 for p in args.parties) or any(m < 2 for m in args.sizes):
        ap.error("--parties and --sizes: at least 2")
    os.environ[_CLOCK_ENV] = args.clock  # before the fork server starts: the dealer's process reads it
    rows = []
    for m in args.sizes:
        for p in args.parties:
            for kern in args.kernels:
                for th in args.threads:
                    print(f"profiling M={m} parties={p} kernels={kern} threads={th} ...", file=sys.stderr)
                    rows.append(profile(m, p, kern, th, args.clock))
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
    else:
        print(f"seconds in each kind of work (cProfile's own time, {args.clock} clock)\n")
        print(markdown(rows))
        if args.dealer:
            print()
            print(markdown(rows, dealer=True))
        for r in rows if args.top else []:
            for key, who in [("mean_seconds_by_function", "")] + [("dealer_seconds_by_function", ", the dealer")] * args.dealer:
                print(f"\nM = {r['samples']:,}, {r['parties']} parties, {r['kernels']}{who}: the {args.top} costliest functions")
                for f, t in list(r[key].items())[: args.top]:
                    print(f"  {t:6.2f}  {kind_of(f):22s}  {f}")
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
