#!/usr/bin/env python3
"""One party of the secure-auc MPC protocol; launch with torchrun.

One machine, 3 clients (server + 3 clients + dealer = 5 processes):

    torchrun --nproc-per-node 5 parties/mpc_party.py c0.csv c1.csv c2.csv --mechanism laplace --epsilon 1

See ``python parties/mpc_party.py --help`` and the README for several machines.
"""

import sys

from secure_auc.cli.party import main

if __name__ == "__main__":
    sys.exit(main())
