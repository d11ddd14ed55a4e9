"""``python -m secure_auc.cli.ledger LEDGER.json``: the privacy ledger's totals and the budget left."""

from __future__ import annotations

import sys

from ..dp.accountant import Ledger
from ..validation import InputError

__all__ = ["main"]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m secure_auc.cli.ledger LEDGER.json", file=sys.stderr)
        return 2
    try:
        print(Ledger(argv[0]).report())
    except InputError as exc:
        print(f"secure-auc: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
