"""Transports: how the protocol roles' messages travel.

* :mod:`.local` — the plain-sort protocol with all roles in one process.
* :mod:`secure_auc.mpc` — the MPC protocol over CrypTen's communicator
  (local processes or torchrun-launched parties).
"""
