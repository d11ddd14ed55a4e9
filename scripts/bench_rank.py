#!/usr/bin/env python3
"""Benchmark the secure rank step alone: seconds, bytes, rounds and peak memory per score.

    .venv/bin/python scripts/bench_rank.py                 # both methods, 2^12..2^22, 458,407 and 4,584,062 scores, 2 and 3 parties
    .venv/bin/python scripts/bench_rank.py --methods radix --sizes 4096 65536 --parties 3 --provider tfp --json
    .venv/bin/python scripts/bench_rank.py --methods radix --markdown --plot docs/figures/bench_rank.png
    .venv/bin/python scripts/bench_rank.py --from-json rows.json --plot docs/figures/bench_rank.png   # no run
    .venv/bin/python scripts/bench_rank.py --methods radix --sizes 1048576 --steps --rtt-ms 20 --gbit 1
    .venv/bin/python scripts/bench_rank.py --methods radix --sizes 1048576 --threads 1 2 4 --pin

"Parties" counts the computing parties in the protocol's layout: the server
(rank 0, no scores) and parties - 1 clients holding equal slices of the
scores; with ``--provider ttp`` (default) a dealer process is extra.  Each
party runs :func:`secure_auc.mpc.ranks.rank_step` (limb agreement, sharing,
sort, mid-ranks, unsort, each client's ranks opened to it), and every run is
checked against ``scipy.stats.rankdata`` (column "exact").  Scores: float32
with ties (uniform, rounded to 4 decimals; ``--dtype float64`` for distinct
scores and two key limbs); at M = 458,407 and 4,584,062 the built-in Criteo-like
sets (:func:`secure_auc.data.make_ctr_dataset`), whose AUC computed from the
secure ranks is compared with scikit-learn's ``roc_auc_score`` (column "AUC
diff").

Columns: seconds, the rank step in the slowest party, from its start to its
ranks (process start-up, 3-5 s, excluded); CPU s, the largest CPU time of a
party in that span (all its threads); bytes per score, what the busiest party
sends plus receives (CrypTen's communicator counters, which count the
project's point-to-point messages too) divided by M; rounds, the message
rounds of the party with the most: the longest chain of messages, each sent
after its sender had waited for the one before, that ends with a message the
party waits for (from every process's trace of its links,
:func:`secure_auc.mpc.comm.transport.message_depths`; "messages" in the JSON
keeps the communicator's count of messages and collectives); modelled s, the
same run over a network of round-trip time ``--rtt-ms`` and bandwidth
``--gbit`` per party (:func:`modelled_seconds`: rounds x RTT / 2, as each
round is one message's one-way latency, + the busiest party's bytes /
bandwidth + the slowest party's CPU seconds); peak bytes per score, the
largest peak resident memory of any process (the dealer included; about 330
MB of it is the interpreter, torch and CrypTen) divided by M.  ``--steps``
prints each run's steps (sharing, digit rounds, mid-rank scan, unsort,
opening to owners) with their rounds, bytes, CPU seconds and seconds per
party.  The sorting network is run up to ``--max-network`` scores (default
2^20: above, it takes minutes).  ``--threads N ...`` runs each size with N threads in
every process (the compiled kernels'; torch keeps one; default the launcher's, the cores
divided among the processes); with ``--pin`` each process runs on its own N cores (rank r on the
r-th N cores of this process's affinity, the dealer on the last N), as parties on machines
of their own would.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


PIN_ENV = "SECURE_AUC_BENCH_PIN"  # "1": each process on its own cores (set before the fork server starts)
TORCH_THREADS_ENV = "SECURE_AUC_BENCH_TORCH_THREADS"  # torch's threads apart from the kernels' (likewise)


def pin(index: int, count: int) -> list[int]:
    """Run every thread of this process on the ``index``-th ``count`` cores of its affinity
    (``index`` = -1: the last ``count``); returns those cores."""
    cores = sorted(os.sched_getaffinity(0))
    chosen = cores[-count:] if index < 0 else cores[index * count:(index + 1) * count]
    if len(chosen) < count or (index >= 0 and (index + 1) * count > len(cores)):
        raise SystemExit(f"--pin: {len(cores)} cores, too few for process {index} with {count} each")
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), chosen)
        except ProcessLookupError:  # a thread that has just ended
            pass
    return chosen


def _pin_the_dealer() -> None:
    """In a party process started with ``--pin``: the dealer runs on the last cores, as many as
    its threads, from its first batch on."""
    if os.environ.get(PIN_ENV) != "1":
        return
    from secure_auc.mpc.primitives import dealer

    if getattr(dealer._worker, "_pinned", False):
        return
    worker, done = dealer._worker, []

    def pinned(state):
        if not done:
            import numba

            done.append(pin(-1, numba.get_num_threads()))
            _torch_threads()
        return worker(state)

    pinned._pinned = True
    dealer._worker = pinned


if __name__ == "__mp_main__":
    _pin_the_dealer()


def _torch_threads() -> None:
    """``--torch-threads``: torch's threads in this process, apart from the kernels'."""
    if os.environ.get(TORCH_THREADS_ENV):
        import torch

        torch.set_num_threads(int(os.environ[TORCH_THREADS_ENV]))


def _job(rank, part, sizes, method, pinned=False):
    """One computing party: the rank step alone, with its seconds, bytes, messages, peak memory,
    its mesh's trace (the message rounds, :func:`rounds_by_step`) and where each step ended."""
    if pinned:
        import numba

        pin(rank, numba.get_num_threads())
    _torch_threads()
    from secure_auc.mpc import ranks
    from secure_auc.mpc.comm import backend, secure
    from secure_auc.mpc.ranks import rank_step

    comm, mesh = backend.comm(), secure.mesh()
    comm.barrier()
    comm.reset_communication_stats()
    ends = []

    def step(name):
        if mesh is not None:
            mesh.mark(name)
        ends.append((name, time.perf_counter() - start, time.process_time() - cpu,
                     int(comm.get_communication_stats()["bytes"]), _peak_rss()))

    start, cpu = time.perf_counter(), time.process_time()
    step("start")
    ranks.steps.append(step)
    try:
        twice = rank_step(part, sizes, rank, method=method)
    finally:
        ranks.steps.remove(step)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    stats = comm.get_communication_stats()
    return {"seconds": seconds, "cpu": cpu, "bytes": int(stats["bytes"]), "messages": int(stats["rounds"]),
            "twice": twice, "peak_rss": _peak_rss(), "ends": ends, "cores": _cores(),
            "trace": None if mesh is None else mesh.trace}


def _dealer_peak() -> dict:
    from secure_auc.mpc.comm import secure

    mesh = secure.mesh()
    return {"peak_rss": _peak_rss(), "cpu": time.process_time(), "cores": _cores(),
            "trace": None if mesh is None else mesh.trace}


def _cores() -> str:
    """The cores this process's threads may run on, as a range ("0-3") or a list."""
    cores = sorted({c for tid in os.listdir("/proc/self/task") for c in _affinity(int(tid))})
    if cores and cores == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}" if len(cores) > 1 else str(cores[0])
    return ",".join(map(str, cores))


def _affinity(tid: int) -> set:
    try:
        return os.sched_getaffinity(tid)
    except ProcessLookupError:
        return set()


def rounds_by_step(done: dict, parties: int) -> tuple[list[int] | None, list[dict]]:
    """(message rounds per computing party, the steps): each step's rounds, bytes, CPU
    seconds and seconds per party, from the parties' step ends and the traces of every
    process (:func:`secure_auc.mpc.comm.transport.message_depths`).  Rounds are None
    where a process kept no trace."""
    from secure_auc.mpc.comm.transport import message_depths

    traces = {r: v["trace"] for r, v in done.items() if isinstance(v, dict) and v.get("trace") is not None}
    depths = message_depths(traces) if len(traces) == len(done) else None
    names = [e[0] for e in done[0]["ends"]]
    steps = []
    for i, name in enumerate(names[1:], start=1):
        row = {"step": name, "rounds": None}
        for key, col, kind in (("seconds", 1, float), ("cpu", 2, float), ("bytes", 3, int)):
            row[key] = [kind(done[r]["ends"][i][col] - done[r]["ends"][i - 1][col]) for r in range(parties)]
        # the peak resident memory so far: where it grows is the step that sets it
        row["peak"] = [done[r]["ends"][i][4] if len(done[r]["ends"][i]) > 4 else None for r in range(parties)]
        if depths is not None:
            marks = {r: [d for n, d in depths[r] if n != "end"] for r in range(parties)}
            row["rounds"] = [marks[r][i] - marks[r][i - 1] for r in range(parties)]
        steps.append(row)
    total = None if depths is None else [sum(s["rounds"][r] for s in steps) for r in range(parties)]
    return total, steps


def modelled_seconds(row: dict, rtt_ms: float, gbit: float) -> float:
    """The rank step's seconds over a network of round-trip time ``rtt_ms`` and bandwidth
    ``gbit`` (Gbit/s) per party: rounds x RTT / 2 (each round is one message's one-way
    latency) + the busiest party's bytes sent and received / bandwidth + the CPU seconds
    of the slowest computing party."""
    return (row["rounds"] * rtt_ms / 2e3 + max(row["bytes_per_party"]) * 8 / (gbit * 1e9)
            + max(row["cpu_per_party"]))


def _peak_rss() -> int:
    """This process's peak resident memory (Linux: VmHWM).  Not ``ru_maxrss``, which a
    spawned process inherits from its launcher (fork, then exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


BUILT_IN = {458_407: "CRITEO_SMALL", 4_584_062: "CRITEO_LARGE"}


def scores_for(m: int, dtype: str, seed: int = 0):
    """(scores, labels or None): a built-in set at its size, else uniform scores."""
    if m in BUILT_IN and dtype == "float32":
        import secure_auc.data as data

        spec = getattr(data, BUILT_IN[m])
        s, y = data.make_ctr_dataset(spec.samples, spec.positives, auc=spec.auc, seed=seed)
        return np.asarray(s, dtype=np.float64), np.asarray(y)
    rng = np.random.default_rng(seed)
    scores = rng.random(m)
    if dtype == "float32":  # ties
        scores = np.round(scores, 4).astype(np.float32).astype(np.float64)
    return scores, None


def auc_from_twice_ranks(twice: np.ndarray, labels: np.ndarray) -> float:
    """AUC from 2 x the 0-based mid-ranks (Mann-Whitney): (sum of positives' ranks - P(P+1)/2) / (P N)."""
    pos = labels.astype(bool)
    p, n = int(pos.sum()), int((~pos).sum())
    twice_sum = int(twice[pos].sum()) + 2 * p  # 2 x sum of 1-based ranks, an integer
    return (twice_sum - p * (p + 1)) / (2 * p * n)


def run(m: int, parties: int, provider: str, dtype: str, method: str = "radix", seed: int = 0,
        timeout: float = 3600, threads: int | None = None, pinned: bool = False) -> dict:
    from scipy.stats import rankdata

    from secure_auc.mpc.launch import run_parties

    if parties < 2:
        raise SystemExit("--parties: at least 2 (the server and one client)")
    from secure_auc.mpc.comm.transport import TRACE_ENV

    os.environ.setdefault(TRACE_ENV, "1")  # the parties' traces give the rounds (started with the fork server)
    scores, labels = scores_for(m, dtype, seed)
    parts = np.array_split(scores, parties - 1)
    sizes = [len(p) for p in parts]
    per_rank = {r: (parts[r - 1] if r >= 1 else None, sizes, method, pinned) for r in range(parties)}
    wall = time.perf_counter()
    done = run_parties(_job, per_rank, parties, provider=provider, timeout=120, deadline=timeout,
                       after_dealer=_dealer_peak, threads=threads)
    wall = time.perf_counter() - wall
    got = np.concatenate([done[r]["twice"] for r in range(1, parties)])
    exact = bool(np.array_equal(got, 2 * (rankdata(scores) - 1)))
    auc = None
    if labels is not None:
        from sklearn.metrics import roc_auc_score

        mine, ref = auc_from_twice_ranks(got, labels), float(roc_auc_score(labels, scores))
        auc = {"secure": mine, "sklearn": ref, "diff": mine - ref}
    peaks = [done[r]["peak_rss"] for r in range(parties)] + ([done[parties]["peak_rss"]] if provider == "ttp" else [])
    rounds, steps = rounds_by_step(done, parties)
    return {
        "method": method, "samples": m, "parties": parties, "provider": provider, "dtype": dtype,
        "threads": threads, "pinned": pinned,
        "torch_threads": int(os.environ[TORCH_THREADS_ENV]) if os.environ.get(TORCH_THREADS_ENV) else threads,
        "seconds_per_party": [round(done[r]["seconds"], 2) for r in range(parties)],
        "cpu_per_party": [round(done[r]["cpu"], 2) for r in range(parties)],
        "bytes_per_party": [done[r]["bytes"] for r in range(parties)],
        "rounds_per_party": rounds,
        "messages_per_party": [done[r]["messages"] for r in range(parties)],
        "peak_rss_per_party": [done[r]["peak_rss"] for r in range(parties)],
        "dealer_peak_rss": done[parties]["peak_rss"] if provider == "ttp" else None,
        "dealer_cpu": round(done[parties]["cpu"], 2) if provider == "ttp" else None,
        "cores_per_process": [done[r]["cores"] for r in range(parties)] + (
            [done[parties]["cores"]] if provider == "ttp" else []),
        "seconds": max(done[r]["seconds"] for r in range(parties)),
        "bytes_per_score": max(done[r]["bytes"] for r in range(parties)) / m,
        "rounds": None if rounds is None else max(rounds),
        "messages": max(done[r]["messages"] for r in range(parties)),
        "steps": steps,
        "peak_bytes_per_score": max(peaks) / m,
        "wall_seconds": round(wall, 2), "exact": exact, "auc": auc,
    }


DEFAULT_SIZES = sorted([2**e for e in range(12, 23)] + [458_407, 4_584_062])


def growth(rows: list[dict], min_size: int = 2**14) -> list[dict]:
    """Least-squares exponent b in seconds ~ M^b (sizes >= ``min_size``), and seconds / (M log2 M)
    at each end, per method, parties and threads."""
    out = []
    for key in sorted({(r["method"], r["parties"], r.get("threads") or 0) for r in rows}):
        pts = sorted((r["samples"], r["seconds"]) for r in rows
                     if (r["method"], r["parties"], r.get("threads") or 0) == key and r["samples"] >= min_size)
        if len(pts) < 2:
            continue
        m, t = np.array(pts, dtype=float).T
        b = float(np.polyfit(np.log(m), np.log(t), 1)[0])
        per = t / (m * np.log2(m)) * 1e9
        out.append({"method": key[0], "parties": key[1], "threads": key[2] or None, "sizes": [int(x) for x in m],
                    "exponent": round(b, 3), "ns_per_M_log2M": [round(float(x), 2) for x in per]})
    return out


def _with(g: dict) -> str:
    return f", {g['threads']} threads" if g.get("threads") else ""


def print_failed(errors: list[dict]) -> None:
    for e in errors:
        print(f"failed: {e['method']}, M = {e['samples']:,}, {e['parties']} parties: {e['error']}")


def _has_rounds(r: dict) -> bool:
    """Whether the row counts message rounds (rows saved before counted messages there)."""
    return "messages" in r and r.get("rounds") is not None


def _rounds(r: dict) -> str:
    return str(r["rounds"]) if _has_rounds(r) else ""


def _modelled(r: dict, rtt_ms: float, gbit: float) -> str:
    return f"{modelled_seconds(r, rtt_ms, gbit):.2f}" if _has_rounds(r) else ""


def markdown(rows: list[dict], rtt_ms: float = 20.0, gbit: float = 1.0) -> str:
    threads = any(r.get("threads") for r in rows)
    head = ("| method | M | parties | " + ("threads | " if threads else "") +
            "seconds | CPU s (max party) | CPU s (dealer) | bytes per score (busiest) | rounds | "
            f"modelled s ({rtt_ms:g} ms, {gbit:g} Gbit/s) | peak bytes per score | exact | AUC diff |\n"
            "|---|---:|---:|" + ("---:|" if threads else "") + "---:|---:|---:|---:|---:|---:|---:|---|---:|")
    lines = [head]
    for r in rows:
        auc = f"{r['auc']['diff']:.1e}" if r["auc"] else ""
        torch = r.get("torch_threads", r.get("threads"))
        n = (f"{r.get('threads') or ''}{'' if torch == r.get('threads') else f' (torch {torch})'}"
             f"{' pinned' if r.get('pinned') else ''} | ") if threads else ""
        dealer = "" if r.get("dealer_cpu") is None else f"{r['dealer_cpu']:.1f}"
        lines.append(f"| {r['method']} | {r['samples']:,} | {r['parties']} | {n}{r['seconds']:.2f} | "
                     f"{max(r['cpu_per_party']):.1f} | {dealer} | {r['bytes_per_score']:,.0f} | {_rounds(r)} | "
                     f"{_modelled(r, rtt_ms, gbit)} | "
                     f"{r['peak_bytes_per_score']:,.0f} | {'yes' if r['exact'] else 'NO'} | {auc} |")
    return "\n".join(lines)


def steps_markdown(r: dict) -> str:
    """One run's steps: rounds, MB sent plus received, CPU seconds, seconds and the peak
    resident MB so far (at the step's end), per party (rank 0, the server, first)."""
    def per(values, fmt):
        return " / ".join(fmt(v) for v in values)

    def mb(v):
        return "" if v is None else f"{v / 1e6:,.0f}"

    lines = [f"{r['method']}, M = {r['samples']:,}, {r['parties']} parties (per party: server / clients)", "",
             "| step | rounds | MB | CPU s | seconds | peak MB so far |", "|---|---:|---:|---:|---:|---:|"]
    rows = r.get("steps", [])
    total = {"step": "total", "rounds": r.get("rounds_per_party"), "bytes": r["bytes_per_party"],
             "cpu": r["cpu_per_party"], "seconds": r["seconds_per_party"], "peak": r.get("peak_rss_per_party")}
    for s in rows + [total]:
        rounds = "" if s["rounds"] is None else per(s["rounds"], str)
        peak = "" if not s.get("peak") or None in s["peak"] else per(s["peak"], mb)
        lines.append(f"| {s['step']} | {rounds} | {per(s['bytes'], lambda b: f'{b / 1e6:,.1f}')} | "
                     f"{per(s['cpu'], lambda c: f'{c:.2f}')} | {per(s['seconds'], lambda t: f'{t:.2f}')} | {peak} |")
    if r.get("dealer_peak_rss"):
        lines.append(f"\nThe dealer's peak: {r['dealer_peak_rss'] / 1e6:,.0f} MB.")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for key in sorted({(r["method"], r["parties"]) for r in rows}):
        pts = sorted((r["samples"], r["seconds"], r["bytes_per_score"], r["peak_bytes_per_score"]) for r in rows
                     if (r["method"], r["parties"]) == key)
        m, t, b, p = np.array(pts, dtype=float).T
        label = f"{key[0]}, {key[1]} parties"
        axes[0].loglog(m, t, "o-", label=label)
        axes[1].semilogx(m, b, "o-", label=label)
        axes[2].loglog(m, p, "o-", label=label)
    for ax, title in zip(axes, ["rank step seconds", "bytes per score (busiest party)", "peak bytes per score (any process)"]):
        ax.set_xlabel("M (scores)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    from secure_auc.mpc.ranks import RANK_METHODS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=DEFAULT_SIZES,
                   help="numbers of scores (default 2^12..2^22, 458,407 and 4,584,062)")
    p.add_argument("--parties", type=int, nargs="+", default=[2, 3], help="computing parties (server + clients)")
    p.add_argument("--methods", nargs="+", choices=RANK_METHODS, default=list(RANK_METHODS),
                   help="rank methods to run (default: all)")
    p.add_argument("--max-network", type=int, default=2**20, metavar="M",
                   help="skip the sorting network above M scores (default 2^20)")
    p.add_argument("--provider", choices=("ttp", "tfp"), default="ttp")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="float32: one key limb; float64 (not float32-exact): two limbs")
    p.add_argument("--rtt-ms", type=float, default=20.0, metavar="MS",
                   help="the network model's round-trip time (default 20 ms; column 'modelled s')")
    p.add_argument("--gbit", type=float, default=1.0, metavar="GBIT",
                   help="the network model's bandwidth per party, Gbit/s (default 1)")
    p.add_argument("--steps", action="store_true",
                   help="also print each run's steps: rounds, bytes, CPU seconds and seconds per party")
    p.add_argument("--threads", type=int, nargs="+", default=[None], metavar="N",
                   help="threads per process, one run each (default: the launcher's, the cores divided "
                        "among the processes)")
    p.add_argument("--torch-threads", type=int, metavar="K",
                   help="torch's threads in every process, apart from the compiled kernels' (default: a party's own, "
                        "1 with the kernels, --threads with the reference code)")
    p.add_argument("--pin", action="store_true",
                   help="each process on its own cores, as many as its threads (needs --threads)")
    p.add_argument("--json", action="store_true", help="print one JSON object {rows, growth}")
    p.add_argument("--markdown", action="store_true", help="print the table in Markdown")
    p.add_argument("--plot", metavar="PNG", help="also plot seconds, bytes and peak memory per score against M")
    p.add_argument("--from-json", metavar="FILE", help="no run: print the table (--markdown) and the growth, and "
                   "draw --plot, from the rows of an earlier --json output")
    args = p.parse_args()
    if not (args.rtt_ms >= 0 and args.gbit > 0):
        p.error("--rtt-ms must be >= 0 and --gbit > 0")
    if any(t is not None and t < 1 for t in args.threads):
        p.error("--threads: at least 1")
    if args.torch_threads is not None:
        if args.torch_threads < 1:
            p.error("--torch-threads: at least 1")
        os.environ[TORCH_THREADS_ENV] = str(args.torch_threads)
    if args.pin:
        if None in args.threads:
            p.error("--pin needs --threads")
        cores = len(os.sched_getaffinity(0))
        widest = max(args.threads) * (max(args.parties) + (args.provider == "ttp"))
        if widest > cores:
            p.error(f"--pin: {max(args.threads)} threads for each of {widest // max(args.threads)} processes "
                    f"need {widest} cores; this process may use {cores}")
        os.environ[PIN_ENV] = "1"  # read by the dealer (the fork server hands it to every party)
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        rows = saved["rows"]
        if args.plot:
            plot(rows, args.plot)
        print(markdown(rows, args.rtt_ms, args.gbit))
        if args.steps:
            for r in rows:
                print("\n" + steps_markdown(r))
        print_failed(saved.get("failed", []))
        for g in growth(rows):
            print(f"growth, {g['method']}, {g['parties']} parties{_with(g)} (sizes >= 2^14): seconds ~ M^{g['exponent']:.2f}")
        return 0
    from secure_auc.mpc.launch import MPCError

    rows, errors = [], []
    if not (args.json or args.markdown):
        print(f"{'method':>7} {'M':>9} {'parties':>7} {'seconds':>8} {'CPU s':>7} {'bytes/score':>11} "
              f"{'rounds':>6} {'modelled':>8} {'peak B/score':>12}  exact  AUC diff   "
              f"(modelled: {args.rtt_ms:g} ms RTT, {args.gbit:g} Gbit/s)")
    runs = [(method, parties, m, threads) for method in args.methods for parties in args.parties
            for m in sorted(args.sizes) for threads in args.threads
            if not (method == "network" and m > args.max_network)]
    for method, parties, m, threads in runs:
        if any((e["method"], e["parties"], e["threads"]) == (method, parties, threads) for e in errors):
            print(f"skipping {method} M={m} parties={parties}: a smaller size failed", file=sys.stderr)
            continue
        with_threads = "" if threads is None else f" threads={threads}" + (" pinned" if args.pin else "")
        print(f"running {method} M={m} parties={parties} provider={args.provider} {args.dtype}{with_threads} ...",
              file=sys.stderr, flush=True)
        try:
            r = run(m, parties, args.provider, args.dtype, method=method, threads=threads, pinned=args.pin)
        except MPCError as e:  # a party killed (out of memory), a timeout: keep the other rows
            print(f"failed {method} M={m} parties={parties}: {e}", file=sys.stderr, flush=True)
            errors.append({"method": method, "samples": m, "parties": parties, "provider": args.provider,
                           "dtype": args.dtype, "threads": threads, "error": str(e)})
            continue
        rows.append(r)
        if not (args.json or args.markdown):
            auc = f"{r['auc']['diff']:.1e}" if r["auc"] else ""
            print(f"{method:>7} {m:>9} {parties:>7} {r['seconds']:>8.2f} {max(r['cpu_per_party']):>7.1f} "
                  f"{r['bytes_per_score']:>11.0f} {_rounds(r):>6} {_modelled(r, args.rtt_ms, args.gbit):>8} "
                  f"{r['peak_bytes_per_score']:>12.0f}  {str(r['exact']):>5}  {auc}{with_threads}", flush=True)
            if args.steps:
                print(steps_markdown(r) + "\n", flush=True)
    fits = growth(rows)
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        print(json.dumps({"rows": rows, "growth": fits, "failed": errors}))
    else:
        if args.markdown:
            print(markdown(rows, args.rtt_ms, args.gbit))
            if args.steps:
                for r in rows:
                    print("\n" + steps_markdown(r))
        print_failed(errors)
        print("\ngrowth (sizes >= 2^14): seconds ~ M^b; ns per M*log2(M) at the smallest and largest size")
        for g in fits:
            per = g["ns_per_M_log2M"]
            print(f"  {g['method']:>7}, {g['parties']} parties{_with(g)}: b = {g['exponent']:.2f}; "
                  f"{per[0]:.1f} -> {per[-1]:.1f} ns per M log2 M")
    return 0 if all(r["exact"] for r in rows) and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
