#!/usr/bin/env python3
"""Compare the plain-sort protocol with the MPC protocol (same as `secure-auc compare`).

    .venv/bin/python scripts/compare_protocols.py              # default sweep, M = 2^10..2^16, 2/3/5 parties
    .venv/bin/python scripts/compare_protocols.py --quick      # under 2 minutes
    .venv/bin/python scripts/compare_protocols.py --sizes 1000 3000 --parties 3 --launcher both

See `secure-auc compare --help` for every option.
"""

import sys

from secure_auc.cli import main

if __name__ == "__main__":
    sys.exit(main(["compare", *sys.argv[1:]]))
