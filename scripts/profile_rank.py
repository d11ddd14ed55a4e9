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

cProfile's clock is the process's CPU time (``--clock cpu``, the default: robust to other
load; a background thread's CPU, the links' writer, counts where the main thread is), or
wall time (``--clock wall``, which also counts the time spent waiting for a core).  The
dealer's sort service is profiled too (CPU clock), so each kind of work is given as the
mean over the computing parties, for the busiest party and for the dealer.

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
    ("permutations", ["(_keyed_rows)", "(_sorted_rows)", "(keyed_rows)", "(sorted_rows)"]),  # their compiled passes
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


def _tally(prof) -> tuple[dict, dict]:
    import pstats

    by_kind, by_function = dict.fromkeys(KINDS, 0.0), {}
    for (path, line, name), (_, _, tottime, _, _) in pstats.Stats(prof).stats.items():
        label = f"{name}" if path == "~" else f"{Path(path).name}:{line}({name})"
        by_kind[kind_of(label)] += tottime
        by_function[label] = by_function.get(label, 0.0) + tottime
    return by_kind, by_function


def _profiler(clock: str):
    import cProfile

    return cProfile.Profile(time.process_time) if clock == "cpu" else cProfile.Profile()


_DEALER: dict = {}  # the dealer's profile of its sort (a party process imports this script as __mp_main__)


def _profile_dealer() -> None:
    """In a party process: wrap the dealer's service of a sort in cProfile (CPU clock)."""
    from secure_auc.mpc.primitives import dealer

    if getattr(dealer._worker, "_profiled", False):
        return
    worker = dealer._worker

    def profiled(state):
        prof = _profiler("cpu")
        prof.enable()
        try:
            return worker(state)
        finally:
            prof.disable()
            _DEALER["prof"] = prof

    profiled._profiled = True
    dealer._worker = profiled


if __name__ == "__mp_main__":
    _profile_dealer()


def _job(rank, part, sizes, kernels="numba", threads=None, clock="cpu"):

    from secure_auc.mpc import kernels as compiled
    from secure_auc.mpc.comm import backend

    os.environ["SECURE_AUC_KERNELS"] = kernels  # read at each call; the processes come from a fork server
    if threads is not None:  # else the launcher's default (the cores divided among the processes)
        compiled.set_threads(threads)
    from secure_auc.mpc.ranks import rank_step

    backend.comm().barrier()
    prof = _profiler(clock)
    start, cpu = time.perf_counter(), time.process_time()
    prof.enable()
    twice = rank_step(part, sizes, rank, method="radix")
    prof.disable()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    by_kind, by_function = _tally(prof)
    return {"twice": twice, "seconds": seconds, "cpu": cpu, "by_kind": by_kind, "by_function": by_function}


def _dealer():
    out = {"cpu": time.process_time(), "by_kind": dict.fromkeys(KINDS, 0.0), "by_function": {}}
    if "prof" in _DEALER:
        out["by_kind"], out["by_function"] = _tally(_DEALER.pop("prof"))
    return out


def profile(m: int, parties: int, kernels: str = "numba", threads: int | None = None, clock: str = "cpu") -> dict:
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
    busiest = max(range(parties), key=lambda r: done[r]["cpu"])
    dealer = done[parties]
    return {"samples": m, "parties": parties, "kernels": kernels, "threads": threads, "clock": clock,
            "busiest_seconds_by_kind": done[busiest]["by_kind"], "dealer_seconds_by_kind": dealer["by_kind"],
            "dealer_seconds_by_function": dict(sorted(dealer["by_function"].items(), key=lambda kv: -kv[1])),
            "exact": bool(np.array_equal(got, 2 * (rankdata(scores) - 1))),
            "seconds": max(done[r]["seconds"] for r in range(parties)),
            "cpu_per_party": [round(done[r]["cpu"], 2) for r in range(parties)],
            "dealer_cpu": round(done[parties]["cpu"], 2), "mean_seconds_by_kind": mean,
            "mean_seconds_by_function": dict(sorted(functions.items(), key=lambda kv: -kv[1]))}


def markdown(rows: list[dict]) -> str:
    """Per run three columns: the mean over the computing parties, the busiest party, the dealer."""
    head, rule = "| kind of work |", "|---|"
    for r in rows:
        name = f"M = {r['samples']:,}, {r['parties']} parties, {r['kernels']}" + (
            f", {r['threads']} threads" if r.get("threads") else "")
        head += f" {name}: mean | busiest | dealer |"
        rule += "---:|---:|---:|"
    lines = [head, rule]
    for k in KINDS:
        lines.append(f"| {k} | " + " | ".join(
            f"{r['mean_seconds_by_kind'][k]:.2f} | {r['busiest_seconds_by_kind'][k]:.2f} | "
            f"{r['dealer_seconds_by_kind'][k]:.2f}" for r in rows) + " |")
    lines.append("| CPU s | " + " | ".join(f"{sum(r['cpu_per_party']) / len(r['cpu_per_party']):.2f} | "
                                          f"{max(r['cpu_per_party']):.2f} | {r['dealer_cpu']:.2f}" for r in rows) + " |")
    lines.append("| rank step s | " + " | ".join(f"{r['seconds']:.2f} | | " for r in rows) + " |")
    lines.append("| exact | " + " | ".join(("yes" if r["exact"] else "NO") + " | | " for r in rows) + " |")
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
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                    help="cProfile's clock in the computing parties: the process's CPU time (default; robust to "
                         "other load, a background thread's CPU counted where the main thread is) or wall time; "
                         "the dealer's profile always uses CPU time")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--top", type=int, default=0, metavar="N", help="also list each run's N costliest functions")
    args = ap.parse_args()
    if any(p < 2 for p in args.parties) or any(m < 2 for m in args.sizes):
        ap.error("--parties and --sizes: at least 2")
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
        print(f"seconds in each kind of work (cProfile's own time, {args.clock} clock; the mean over the computing "
              "parties, the busiest party, the dealer)\n")
        print(markdown(rows))
        for r in rows if args.top else []:
            print(f"\nM = {r['samples']:,}, {r['parties']} parties, {r['kernels']}: the {args.top} costliest functions")
            for f, t in list(r["mean_seconds_by_function"].items())[: args.top]:
                print(f"  {t:6.2f}  {kind_of(f):22s}  {f}")
            print("  the dealer's:")
            for f, t in list(r["dealer_seconds_by_function"].items())[: args.top]:
                print(f"  {t:6.2f}  {kind_of(f):22s}  {f}")
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
