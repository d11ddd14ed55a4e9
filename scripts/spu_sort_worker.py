#!/usr/bin/env python3
"""SecretFlow SPU's secure sort on given keys, timed; run by ``scripts/compare_spu.py``
with the Python of SPU's own virtual environment (never the project's).

    .spu-venv/bin/python scripts/spu_sort_worker.py KEYS.npy --parties 3 --methods SORT_RADIX SORT_QUICK

KEYS.npy: one-dimensional int32 keys.  SPU's simulation (``spu.utils.simulation``):
SEMI2K among 2 parties, ABY3 among 3 (or ``--protocol``), in the ring of
``--field``, every party a thread of this process over SPU's in-memory links.
``--op sort`` sorts the keys (``jnp.sort``), ``--op argsort`` returns the sorting
permutation (``jnp.argsort``, keys and indices both sorted).  Per sort method
(``RuntimeConfig.sort_method``; SPU falls back to another method if the protocol
lacks the method's kernels): "seconds", the slowest party's ``Runtime.run`` of the
compiled program on secret inputs (the sort alone: compilation, making the
input shares and reconstructing the output are outside it and timed apart), and
"correct", the reconstructed output against numpy's.  One JSON object on stdout;
progress on stderr (SPU's own log lines go to stdout: ``--out`` writes the JSON
to a file instead).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import numpy as np

METHODS = ("SORT_DEFAULT", "SORT_RADIX", "SORT_QUICK", "SORT_NETWORK")
PROTOCOL_FOR_PARTIES = {2: "SEMI2K", 3: "ABY3"}


def _compile(op: str, keys: np.ndarray):
    import jax.numpy as jnp
    from spu import libspu
    from spu.utils import frontend as spu_fe

    fun = {"sort": jnp.sort, "argsort": lambda x: jnp.argsort(x, stable=False)}[op]
    executable, _ = spu_fe.compile(spu_fe.Kind.JAX, fun, (keys,), {}, ["in0"], [libspu.Visibility.VIS_SECRET],
                                   lambda outs: [f"out{i}" for i in range(len(outs))])
    return executable


def run_once(executable, keys: np.ndarray, parties: int, protocol: str, field: str, method: str) -> dict:
    """Share ``keys`` among ``parties`` threads, run ``executable`` in each and
    reconstruct its output; the seconds of each phase."""
    from spu import api as spu_api
    from spu import libspu

    config = libspu.RuntimeConfig(protocol=getattr(libspu.ProtocolKind, protocol),
                                  field=getattr(libspu.FieldType, field))
    config.sort_method = getattr(libspu.RuntimeConfig.SortMethod, method)
    io = spu_api.Io(parties, config)
    t = time.perf_counter()
    shares = io.make_shares(keys, libspu.Visibility.VIS_SECRET)
    share_seconds = time.perf_counter() - t

    desc = libspu.link.Desc()
    for rank in range(parties):
        desc.add_party(f"id_{rank}", f"thread_{rank}")
    results: dict[int, object] = {}

    def party(rank: int) -> None:
        try:
            link = libspu.link.create_mem(desc, rank)
            rt = spu_api.Runtime(link, libspu.RuntimeConfig(config))
            rt.set_var(executable.input_names[0], shares[rank])
            start = time.perf_counter()
            rt.run(executable)
            seconds = time.perf_counter() - start
            results[rank] = (seconds, [rt.get_var(name) for name in executable.output_names])
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            results[rank] = e

    threads = [threading.Thread(target=party, args=(r,)) for r in range(parties)]
    wall = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - wall
    errors = [v for v in results.values() if isinstance(v, BaseException)]
    if errors:
        raise errors[0]
    t = time.perf_counter()
    outs = [io.reconstruct(list(o)) for o in zip(*(results[r][1] for r in range(parties)))]
    reveal_seconds = time.perf_counter() - t
    return {"seconds": max(results[r][0] for r in range(parties)), "threads_seconds": wall,
            "share_seconds": share_seconds, "reveal_seconds": reveal_seconds, "outputs": outs}


def check(op: str, keys: np.ndarray, outputs: list) -> bool:
    """The reconstructed output against numpy: the sorted keys, or a permutation that sorts them."""
    out = np.asarray(outputs[0]).reshape(-1)
    if op == "sort":
        return bool(np.array_equal(out.astype(np.int64), np.sort(keys).astype(np.int64)))
    perm = out.astype(np.int64)
    return bool(np.array_equal(np.sort(perm), np.arange(len(keys)))
                and np.array_equal(keys[perm], np.sort(keys)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("keys", help=".npy file of one-dimensional int32 keys")
    p.add_argument("--parties", type=int, choices=(2, 3), required=True)
    p.add_argument("--protocol", help="SPU protocol (default: SEMI2K for 2 parties, ABY3 for 3)")
    p.add_argument("--field", choices=("FM32", "FM64"), default="FM64")
    p.add_argument("--op", choices=("sort", "argsort"), default="sort")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument("--out", help="write the JSON object here (default: stdout, where SPU also logs)")
    args = p.parse_args(argv)
    import spu

    keys = np.load(args.keys)
    if keys.ndim != 1 or keys.dtype != np.int32:
        print(f"{args.keys}: expected one-dimensional int32 keys, got {keys.dtype} {keys.shape}", file=sys.stderr)
        return 2
    protocol = args.protocol or PROTOCOL_FOR_PARTIES[args.parties]
    t = time.perf_counter()
    executable = _compile(args.op, keys)
    compile_seconds = time.perf_counter() - t
    rows = []
    for method in args.methods:
        print(f"  spu {spu.__version__} {protocol} {args.field} {args.op} {method} M={len(keys)} ...",
              file=sys.stderr, flush=True)
        row = {"method": method, "op": args.op, "protocol": protocol, "field": args.field, "parties": args.parties,
               "samples": int(len(keys)), "compile_seconds": compile_seconds}
        try:
            r = run_once(executable, keys, args.parties, protocol, args.field, method)
        except Exception as e:  # noqa: BLE001 - a method SPU refuses is a row, not a crash
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            rows.append(row)
            continue
        row.update({k: v for k, v in r.items() if k != "outputs"})
        row["correct"] = check(args.op, keys, r["outputs"])
        rows.append(row)
    text = json.dumps({"spu_version": spu.__version__, "rows": rows})
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
