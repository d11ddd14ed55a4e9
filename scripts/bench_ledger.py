#!/usr/bin/env python3
"""Time the privacy ledger's reservations per record, and its file size.

For each size n (default 10^6 and 10^7 records, text identifiers ``user-0000001``
..., as a CSV's id column gives them):

* keying: the identifiers to keyed tags (:meth:`secure_auc.Ledger.keyed`);
* first: a reservation of n new records (from the identifiers, keying included);
* same: the same n records again (from the identifiers, keying included);
* changed: the records reordered, 1 % dropped and 1 % new (splits the group);

then ``--releases`` reservations (default 1,000) of the largest set of records,
keyed once as a session does, and the ledger file's size.  Each time is given as
wall seconds and, in brackets, this process's CPU seconds (on a shared machine the
wall time also counts the other processes' turns).

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


class _Clock:
    """Wall and CPU seconds of a block."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu

    def __str__(self):
        return f"{self.wall:6.2f} s ({self.cpu:.2f} CPU)"


def _ids(numbers: np.ndarray) -> np.ndarray:
    return np.char.add("user-", np.char.zfill(numbers.astype(np.str_), 8))


def run(sizes, releases: int, folder: Path) -> list[str]:
    from secure_auc import ClientData, Ledger, make_mechanism

    mech = make_mechanism("laplace", 0.001)
    out = []
    rng = np.random.default_rng(0)
    warm = Ledger(folder / "warm-up.db")  # imports and first-use costs, outside the timings
    warm.reserve([ClientData(np.zeros(2), np.array([0, 1]), ids=_ids(np.arange(2)))], mech)
    for n in sizes:
        path = folder / f"ledger-{n}.db"
        led = Ledger(path)
        led.set_budget(10.0)
        ids = _ids(np.arange(n))
        labels = (rng.random(n) < 0.25).astype(np.int8)
        data = ClientData(np.zeros(n), labels, ids=ids)
        with _Clock() as keying:
            led.keyed(data)
        with _Clock() as first:
            led.reserve([data], mech)
        with _Clock() as same:
            led.reserve([data], mech)
        keep = rng.permutation(n)[: n - n // 100]
        changed_ids = np.concatenate([ids[keep], _ids(np.arange(n, n + n // 100))])
        changed = ClientData(np.zeros(len(changed_ids)), np.zeros(len(changed_ids), dtype=np.int8), ids=changed_ids)
        with _Clock() as split:
            led.reserve([changed], mech)
        out.append(f"n = {n:>11,}: keying {keying}; reserve (keying included): first {first}, "
                   f"same records {same}, reordered with 1 % dropped and 1 % new {split}; "
                   f"file {os.path.getsize(path) / 2**20:.1f} MiB")
        print(out[-1], flush=True)
    n = max(sizes)
    path = folder / f"ledger-{n}-releases.db"
    led = Ledger(path)
    data = ClientData(np.zeros(n), (rng.random(n) < 0.25).astype(np.int8), ids=_ids(np.arange(n)))
    keyed = led.keyed(data)
    with _Clock() as total:
        for i in range(releases):
            led.finish(led.reserve([keyed], mech))
            if (i + 1) % max(1, releases // 10) == 0:
                print(f"  {i + 1} releases, file {os.path.getsize(path) / 2**20:.1f} MiB", file=sys.stderr,
                      flush=True)
    s = led.spent(keyed)
    out.append(f"{releases:,} releases of the same {n:,} records (keyed once, each reserved and finished): "
               f"{total}; file {os.path.getsize(path) / 2**20:.1f} MiB; each record: eps = {s.epsilon:.6g} "
               f"({s.accountant}) in {s.releases} releases")
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
