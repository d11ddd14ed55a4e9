#!/usr/bin/env python3
"""Time the privacy ledger's reservations per record, and its file size.

For each size n (default 10^6 and 10^7 records, text identifiers ``user-0000001``
..., as a CSV's id column gives them):

* keying: the identifiers to keyed tags (:meth:`secure_auc.Ledger.keyed`);
* first: a reservation of n new records (from the identifiers, keying included);
* same: the same n records again (from the identifiers, keying included);
* changed: the records reordered, 1 % dropped and 1 % new (splits the group);

then ``--releases`` reservations (default 1,000) of the largest set of records,
keyed once as a session does, and the ledger file's size.

    python scripts/bench_ledger.py                       # 10^6 and 10^7, 1,000 releases
    python scripts/bench_ledger.py --sizes 100000 --releases 50
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _ids(numbers: np.ndarray) -> np.ndarray:
    return np.char.add("user-", np.char.zfill(numbers.astype(np.str_), 8))


def run(sizes, releases: int, folder: Path) -> list[str]:
    from secure_auc import ClientData, Ledger, make_mechanism

    mech = make_mechanism("laplace", 0.001)
    out = []
    rng = np.random.default_rng(0)
    for n in sizes:
        path = folder / f"ledger-{n}.db"
        led = Ledger(path)
        led.set_budget(10.0)
        ids = _ids(np.arange(n))
        labels = (rng.random(n) < 0.25).astype(np.int8)
        data = ClientData(np.zeros(n), labels, ids=ids)
        t = time.perf_counter()
        led.keyed(data)
        keying = time.perf_counter() - t
        t = time.perf_counter()
        led.finish(led.reserve([data], mech))
        first = time.perf_counter() - t
        t = time.perf_counter()
        led.finish(led.reserve([data], mech))
        same = time.perf_counter() - t
        keep = rng.permutation(n)[: n - n // 100]
        changed_ids = np.concatenate([ids[keep], _ids(np.arange(n, n + n // 100))])
        changed = ClientData(np.zeros(len(changed_ids)), np.zeros(len(changed_ids), dtype=np.int8), ids=changed_ids)
        t = time.perf_counter()
        led.finish(led.reserve([changed], mech))
        split = time.perf_counter() - t
        out.append(f"n = {n:>11,}: keying {keying:6.2f} s; reserve (keying included): first {first:6.2f} s, "
                   f"same records {same:6.2f} s, reordered with 1 % dropped and 1 % new {split:6.2f} s; "
                   f"file {os.path.getsize(path) / 2**20:8.1f} MiB")
        print(out[-1], flush=True)
    n = max(sizes)
    path = folder / f"ledger-{n}-releases.db"
    led = Ledger(path)
    data = ClientData(np.zeros(n), (rng.random(n) < 0.25).astype(np.int8), ids=_ids(np.arange(n)))
    keyed = led.keyed(data)
    t = time.perf_counter()
    for i in range(releases):
        led.finish(led.reserve([keyed], mech))
        if (i + 1) % max(1, releases // 10) == 0:
            print(f"  {i + 1} releases: {time.perf_counter() - t:.1f} s, file "
                  f"{os.path.getsize(path) / 2**20:.1f} MiB", file=sys.stderr, flush=True)
    total = time.perf_counter() - t
    s = led.spent(keyed)
    out.append(f"{releases:,} releases of the same {n:,} records (keyed once): {total:.1f} s "
               f"({total / releases:.3f} s each, finish included); file {os.path.getsize(path) / 2**20:.1f} MiB; "
               f"each record: eps = {s.epsilon:.6g} ({s.accountant}) in {s.releases} releases")
    print(out[-1], flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10**6, 10**7], help="numbers of records")
    ap.add_argument("--releases", type=int, default=1000, help="releases of the largest set (default 1,000)")
    ap.add_argument("--dir", default=None, help="folder for the ledgers (default: a temporary one, removed)")
    args = ap.parse_args(argv)
    if args.dir:
        run(args.sizes, args.releases, Path(args.dir))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            run(args.sizes, args.releases, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
