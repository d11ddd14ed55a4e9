#!/usr/bin/env python3
"""SecretFlow SPU 0.9.5's secure sort against this project's rank step, on the same keys.

    .venv/bin/python scripts/compare_spu.py                          # 2^16 and 2^20 keys, 2 and 3 parties
    .venv/bin/python scripts/compare_spu.py --sizes 65536 --parties 3 --json
    .venv/bin/python scripts/compare_spu.py --spu-python /path/to/venv/bin/python --fields FM32

Keys: the scores of ``scripts/bench_rank.py`` (float32, uniform, rounded to 4
decimals, so with ties; seed ``--seed``), encoded as the project encodes them
(:func:`secure_auc.mpc.encoding.encode_keys`, one 32-bit limb, order-preserving)
and handed to SPU as int32.  The project ranks the same scores, i.e. the same keys.

SPU side: SPU lives in its own virtual environment, never in the project's: the
first run creates ``.spu-venv/`` in the repository (``python -m venv`` with a
Python that SPU 0.9.5 has wheels for, 3.10 or 3.11, then ``pip install
spu==0.9.5``), or ``--spu-python`` names an interpreter that imports ``spu``.
``scripts/spu_sort_worker.py`` runs there: SPU's simulation (SEMI2K among 2
parties, ABY3 among 3; every party a thread of one process over in-memory links)
sorts the secret keys (``jnp.sort``; ``--ops argsort`` for the sorting
permutation) with each ``RuntimeConfig.sort_method`` in the ring of each
``--fields``.  SPU seconds: the slowest party's ``Runtime.run`` of the compiled
sort on already-made secret shares; compilation, making the shares and
reconstructing the output are excluded (and reported in ``--json``).  The output
is reconstructed and compared with numpy's sort ("ok").  The sorting network is
run up to ``--max-network`` keys (default 2^16; it grows as M log^2 M).  The
benchmark's keys lie within 2^30 of each other; first, every configuration sorts
``--range-check`` keys spread over the whole int32 range ("any int32 keys"), which
tells the sorts that compare by the sign of a difference in the ring (wrong in
FM32 for keys 2^31 or more apart) from those that sort any 32-bit keys.

Project side: :func:`secure_auc.mpc.ranks.rank_step` with the radix method, as
``scripts/bench_rank.py`` measures it: one process per computing party (the
server and parties - 1 clients holding equal slices), CrypTen's dealer extra
with ``--provider ttp``, encrypted TCP links on this machine.  Seconds: the rank
step in the slowest party, which is more than a sort: the clients' sharing of
their keys, the sort, the mid-ranks of ties, the unsort and each client's ranks
opened to it; process start-up excluded.  Checked against
``scipy.stats.rankdata`` ("ok").

"SPU / ours" divides each SPU time by the project's in the same (M, parties);
the summary lines take SPU's fastest correct configuration, and its fastest that
also passed the range check.  Progress goes to stderr,
the table (or ``--json``) to stdout.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rank import run as run_ours  # noqa: E402  (the project's side, as bench_rank.py measures it)
from bench_rank import scores_for  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().parent / "spu_sort_worker.py"
SPU_REQUIREMENT = "spu==0.9.5"
SPU_PYTHONS = ((3, 10), (3, 11))  # the Pythons spu 0.9.5 publishes wheels for (Requires-Python >=3.10,<3.12)
SPU_METHODS = ("SORT_DEFAULT", "SORT_RADIX", "SORT_QUICK", "SORT_NETWORK")
PROTOCOL_FOR_PARTIES = {2: "SEMI2K", 3: "ABY3"}
DEFAULT_SIZES = [2**16, 2**20]

SPU_INCLUDES = ("SPU simulation, parties as threads of one process, in-memory links: the slowest party's "
                "Runtime.run of the compiled sort on secret shares (compile, sharing, reconstruction excluded)")
OURS_INCLUDES = ("rank step, one process per party (+ dealer with ttp), encrypted TCP on this machine: sharing, "
                 "radix sort, mid-ranks, unsort, ranks opened to their owners (start-up excluded)")


class SetupError(Exception):
    """The SPU interpreter cannot be found or made: the message is the one-line error."""


def keys_for(m: int, seed: int = 0) -> np.ndarray:
    """The int32 keys SPU sorts: the scores ``bench_rank.run`` ranks, encoded as the project does.

    Examples
    --------
    >>> k = keys_for(1000)
    >>> k.dtype, k.shape
    (dtype('int32'), (1000,))
    """
    from secure_auc.mpc.encoding import encode_keys

    scores, _ = scores_for(m, "float32", seed)
    keys = encode_keys(scores, 1)  # (m, 1) int64, one limb in [-2^31, 2^31)
    return keys[:, 0].astype(np.int32)


def _python_version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=60)
    except OSError:
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def _spu_version(python: str) -> str | None:
    out = subprocess.run([python, "-c", "import spu; print(spu.__version__)"], capture_output=True, text=True,
                         timeout=300)
    return out.stdout.strip() if out.returncode == 0 else None


def _base_pythons() -> list[str]:
    """Interpreters that could host SPU 0.9.5, best first: this one, pythonX.Y on PATH, pyenv's."""
    found = [sys.executable]
    for v in reversed(SPU_PYTHONS):
        found.append(shutil.which(f"python{v[0]}.{v[1]}") or "")
        root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
        found += sorted(glob.glob(f"{root}/versions/{v[0]}.{v[1]}.*/bin/python"), reverse=True)
    return [p for p in dict.fromkeys(found) if p and _python_version(p) in SPU_PYTHONS]


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["(no output)"])[-1]


def make_spu_venv(venv: Path) -> str:
    """Create ``venv`` with SPU 0.9.5 and return its Python; raise :class:`SetupError` saying why not."""
    bases = _base_pythons()
    if not bases:
        raise SetupError(f"no Python {' or '.join('%d.%d' % v for v in SPU_PYTHONS)} found for {SPU_REQUIREMENT} "
                         "(its wheels exist for these only): install one or pass --spu-python")
    python = venv / "bin" / "python"
    print(f"creating {venv} with {bases[0]} and pip install {SPU_REQUIREMENT} (once) ...", file=sys.stderr, flush=True)
    steps = [[bases[0], "-m", "venv", str(venv)],
             [str(python), "-m", "pip", "install", "--quiet", SPU_REQUIREMENT]]
    for cmd in steps:
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise SetupError(f"{' '.join(cmd[-2:])} failed in {venv}: {_last_error(out.stderr + out.stdout)}")
    return str(python)


def spu_python(given: str | None, venv: Path = REPO / ".spu-venv") -> str:
    """The interpreter that runs the SPU worker: ``given``, else ``venv``'s (made on first use)."""
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise SetupError(f"--spu-python {given}: no such executable")
        version = _spu_version(given)
        if version is None:
            raise SetupError(f"--spu-python {given}: cannot import spu (install {SPU_REQUIREMENT} in its environment)")
        return given
    python = venv / "bin" / "python"
    if python.exists() and _spu_version(str(python)) is not None:
        return str(python)
    if venv.exists() and not python.exists():
        raise SetupError(f"{venv} exists but has no bin/python: remove it or pass --spu-python")
    return make_spu_venv(venv)


def run_spu(python: str, keys: np.ndarray, parties: int, field: str, methods: list[str], op: str,
            timeout: float) -> list[dict]:
    """SPU's sort of ``keys`` in the worker, one row per method (an ``error`` key if SPU refused it)."""
    with tempfile.TemporaryDirectory(prefix="spu_keys_") as tmp:
        path, out = Path(tmp) / "keys.npy", Path(tmp) / "out.json"
        np.save(path, keys)
        cmd = [python, str(WORKER), str(path), "--parties", str(parties), "--field", field, "--op", op,
               "--out", str(out), "--methods", *methods]
        # SPU's C++ logs go to stdout: both streams of the worker are progress, to our stderr
        done = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr, timeout=timeout)
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"SPU worker failed (exit {done.returncode}): {' '.join(cmd)}")
        return json.loads(out.read_text())["rows"]


def full_range_keys(m: int, seed: int = 0) -> np.ndarray:
    """``m`` int32 keys over the whole int32 range, both ends included: the benchmark's keys
    (scores in [0, 1)) lie within 2^30 of each other and cannot tell a sort that compares
    by the sign of a 32-bit difference from one that sorts any int32 keys.

    Examples
    --------
    >>> k = full_range_keys(100)
    >>> int(k.min()), int(k.max())
    (-2147483648, 2147483647)
    """
    keys = np.random.default_rng(seed).integers(-(2**31), 2**31, m).astype(np.int32)
    keys[:2] = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    return keys


def _spu_rows(python, keys, parties, field, methods, op, timeout) -> list[dict]:
    """:func:`run_spu`, a crash or a timeout of the worker turned into one error row per method."""
    print(f"spu: {PROTOCOL_FOR_PARTIES[parties]} {field} {op} M={len(keys)} ...", file=sys.stderr, flush=True)
    try:
        rows = run_spu(python, keys, parties, field, methods, op, timeout)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"spu: {e}", file=sys.stderr, flush=True)
        rows = [{"method": x, "op": op, "protocol": PROTOCOL_FOR_PARTIES[parties], "field": field,
                 "parties": parties, "samples": len(keys), "error": str(e).splitlines()[0]} for x in methods]
    for row in rows:
        row["ok"] = row.pop("correct", False)
    return rows


def _fastest(rows: list[dict]) -> dict | None:
    good = [s for s in rows if s.get("ok")]
    return min(good, key=lambda s: s["seconds"]) if good else None


def compare(sizes, parties_list, *, python: str, fields, methods, ops, max_network: int, provider: str,
            seed: int = 0, timeout: float = 3600, range_check: int = 4096) -> dict:
    """Both sides on the same keys per (M, parties); rows and a summary per (M, parties).

    With ``range_check`` > 0, every SPU configuration first sorts that many
    :func:`full_range_keys`; a row's ``any_keys`` says whether it did so exactly, and
    the summary's ``spu_best_any_keys`` is the fastest row that is right here and there."""
    ours, spu, summary, full_range = [], [], [], []
    if range_check:
        for parties in parties_list:
            for field in fields:
                for op in ops:
                    full_range += _spu_rows(python, full_range_keys(range_check, seed), parties, field, methods, op,
                                            timeout)
    any_keys = {(x["parties"], x["field"], x["op"], x["method"]): x["ok"] for x in full_range}
    for m in sorted(sizes):
        keys = keys_for(m, seed)
        for parties in parties_list:
            print(f"ours: radix rank step M={m} parties={parties} provider={provider} ...", file=sys.stderr, flush=True)
            r = run_ours(m, parties, provider, "float32", method="radix", seed=seed, timeout=timeout)
            ours.append({"samples": m, "parties": parties, "seconds": r["seconds"], "ok": r["exact"],
                         "cpu_max_party": max(r["cpu_per_party"]), "bytes_per_score": r["bytes_per_score"],
                         "provider": provider, "wall_seconds": r["wall_seconds"]})
            mine = [x for x in methods if x != "SORT_NETWORK" or m <= max_network]
            here = []
            for field in fields:
                for op in ops:
                    here += _spu_rows(python, keys, parties, field, mine, op, timeout)
            for row in here:
                row["ratio"] = row["seconds"] / r["seconds"] if "seconds" in row else None
                row["any_keys"] = any_keys.get((parties, row["field"], row["op"], row["method"]))
            spu += here
            entry = {"samples": m, "parties": parties, "ours_seconds": r["seconds"]}
            for name, best in (("spu_best", _fastest(here)),
                               ("spu_best_any_keys", _fastest([x for x in here if x["any_keys"]]))):
                entry[name] = best and {k: best[k] for k in ("protocol", "field", "op", "method", "seconds", "ratio")}
            summary.append(entry)
    return {"ours": ours, "spu": spu, "summary": summary, "full_range": full_range,
            "includes": {"spu": SPU_INCLUDES, "ours": OURS_INCLUDES}}


def _yes(flag) -> str:
    return "" if flag is None else ("yes" if flag else "NO")


def table(result: dict) -> str:
    """The Markdown table: one row per measurement, ours first in each (M, parties)."""
    lines = ["| M | parties | system | protocol, ring | op, method | seconds | ok | any int32 keys | SPU / ours |",
             "|---:|---:|---|---|---|---:|---|---|---:|"]
    for o in result["ours"]:
        key = (o["samples"], o["parties"])
        lines.append(f"| {key[0]:,} | {key[1]} | ours | {o['provider']}, Z_2^32 | rank step, radix | "
                     f"{o['seconds']:.2f} | {_yes(o['ok'])} | | |")
        for s in result["spu"]:
            if (s["samples"], s["parties"]) != key:
                continue
            head = f"| {key[0]:,} | {key[1]} | SPU | {s['protocol']}, {s['field']} | {s['op']}, {s['method']} |"
            if "error" in s:
                lines.append(f"{head} error: {s['error'][:80]} | | {_yes(s.get('any_keys'))} | |")
            else:
                lines.append(f"{head} {s['seconds']:.2f} | {_yes(s['ok'])} | {_yes(s.get('any_keys'))} | "
                             f"{s['ratio']:.2f} |")
    lines.append("")

    def says(b) -> str:
        return (f"{b['protocol']} {b['field']} {b['op']} {b['method']}, {b['seconds']:.2f} s = {b['ratio']:.2f} x ours"
                if b else "none")

    for x in result["summary"]:
        line = f"- M = {x['samples']:,}, {x['parties']} parties: ours {x['ours_seconds']:.2f} s; SPU's fastest: "
        line += says(x["spu_best"])
        if result.get("full_range"):
            line += f"; SPU's fastest that also sorts any int32 keys: {says(x['spu_best_any_keys'])}"
        lines.append(line)
    if result.get("full_range"):
        n = result["full_range"][0]["samples"]
        lines.append(f"\n\"any int32 keys\": the same configuration sorted {n:,} keys drawn over the whole int32 range "
                     "exactly.")
    lines += ["", f"SPU seconds: {SPU_INCLUDES}.", f"Ours: {OURS_INCLUDES}."]
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=DEFAULT_SIZES, help="numbers of keys (default 2^16 2^20)")
    p.add_argument("--parties", type=int, nargs="+", choices=(2, 3), default=[2, 3],
                   help="computing parties: SPU SEMI2K among 2, ABY3 among 3 (default both)")
    p.add_argument("--spu-python", metavar="PATH",
                   help="a Python that imports spu (default: .spu-venv/bin/python, made on first use)")
    p.add_argument("--fields", nargs="+", choices=("FM32", "FM64"), default=["FM32", "FM64"],
                   help="SPU rings (default both; the keys are 32-bit)")
    p.add_argument("--spu-methods", nargs="+", choices=SPU_METHODS, default=list(SPU_METHODS),
                   help="SPU sort methods (RuntimeConfig.sort_method; default all)")
    p.add_argument("--ops", nargs="+", choices=("sort", "argsort"), default=["sort"],
                   help="what SPU computes: the sorted keys (default) and/or the sorting permutation")
    p.add_argument("--max-network", type=int, default=2**16, metavar="M",
                   help="run SPU's sorting network up to M keys (default 2^16)")
    p.add_argument("--range-check", type=int, default=4096, metavar="M",
                   help="first sort M keys over the whole int32 range with every SPU configuration (0: skip)")
    p.add_argument("--provider", choices=("ttp", "tfp"), default="ttp", help="the project's triple provider")
    p.add_argument("--seed", type=int, default=0, help="seed of the benchmark's scores (both sides)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed to each run")
    p.add_argument("--json", action="store_true", help="print one JSON object {ours, spu, summary, includes}")
    args = p.parse_args(argv)
    if min(args.sizes) < 2:
        p.error("--sizes: at least 2 keys")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        python = spu_python(args.spu_python)
    except SetupError as e:
        print(f"compare_spu: {e}", file=sys.stderr)
        return 2
    start, load = time.perf_counter(), os.getloadavg()
    result = compare(args.sizes, args.parties, python=python, fields=args.fields, methods=args.spu_methods,
                     ops=args.ops, max_network=args.max_network, provider=args.provider, seed=args.seed,
                     timeout=args.timeout, range_check=args.range_check)
    result["spu_python"] = python
    result["load_average"] = {"before": [round(x, 2) for x in load], "after": [round(x, 2) for x in os.getloadavg()]}
    print(f"done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    else:
        print(table(result))
        print(f"Load average (1, 5, 15 min) before: {result['load_average']['before']}, "
              f"after: {result['load_average']['after']}.")
    ok = all(o["ok"] for o in result["ours"]) and all(s.get("ok") for s in result["spu"] if "error" not in s)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
