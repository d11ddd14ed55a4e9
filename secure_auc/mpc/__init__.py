"""The MPC protocol over CrypTen (imported lazily: ``import secure_auc`` never loads torch).

* ``_crypten``  — the only module that imports CrypTen (with the torch 2.x shim).
* ``encoding``  — exact, order-preserving integer keys for float scores.
* ``sort/``     — oblivious sorting networks over secret shares (bitonic).
* ``ranks``     — the rank step: shared keys -> sorted -> mid-ranks -> unsorted -> owners.
* ``party``     — the protocol as one party runs it (server, client), reusing the
  plain protocol's roles and mechanisms.
* ``runtime``   — bringing a party's communicator up and down with bounded waits.
* ``launch``    — local multi-process launcher; ``entry`` — torchrun entry point.
* ``audit``     — records every value opened, to check what each party learns.

What each party learns and the trust model: docs/mpc.md.
"""
