"""The MPC protocol over CrypTen (imported lazily: ``import secure_auc`` never loads torch).

Stacked like CrypTen's own package, each layer importing only those below it:

* ``comm/``       — how parties talk: ``backend`` (CrypTen's import shim and every call
  to its communicator and dealer channel behind a named function; ``crypten/`` imports
  CrypTen's tensors and providers itself, once the shim is in place), ``p2p``
  (point-to-point messages), ``runtime`` (the rendezvous: bringing a party up and down
  with bounded waits), ``transport``, ``secure``, ``tls``, ``inlinks`` (the links).
* ``primitives/`` — one module per primitive: ``prg`` (AES-CTR streams),
  ``randomness`` and ``dealer`` (correlated randomness), ``beaver`` (gates),
  ``bits``, ``circuits`` (comparisons; ``widths``, their bit widths), ``b2a``, ``inputs``
  (sharing), ``outside`` (an input party's sharing), ``shuffle``, ``scan``, ``opening`` (to
  one party, to owners, to everyone; ``observed``, what a party learns).
* ``sort/``       — oblivious sorts, chosen by name in ``sort/registry``: radix (secret permutations composed digit
  by digit; ``digits``, a key's digits) and the bitonic network (the reference).
* ``errors``      — :class:`MPCError`, the one error of a failed run (a leaf: every layer imports it).
* ``encoding``    — exact, order-preserving integer keys for float scores.
* ``ranks``       — the rank step: shared keys -> sorted -> mid-ranks -> unsorted -> owners.
* ``party``       — the protocol as one party runs it (server, client), reusing the
  plain protocol's roles and mechanisms.
* ``selection``   — report-noisy-max over T candidates: the rank statistics in shares, the
  clients' noise shares, a secure argmax that opens only the index to the server.
* ``input_parties`` and ``input_hosts`` — the helpers layout's steps at the computing parties and
  at a client host; the host's side loads neither torch, CrypTen nor numba.
* ``finish``      — the evaluation's last steps, for every layout: each client's statistics
  and noise, the sum in shares opened to the server only, the server's estimates.
* ``roles/``      — each role written once: ``world`` (CrypTen's start-up for one party,
  the dealer's branch), ``computing`` and ``host`` (a computing party and a client host of
  the helpers layout across evaluations, whatever drives them: a local session or a
  deployed service).
* ``launch``      — the one local multi-process launcher (:func:`.launch.run_parties`, the
  public one, for scripts; the helpers layout's plan of processes); the torchrun entry is
  :mod:`secure_auc.cli.party`.
* ``audit``       — records every buffer a process receives; refuses CrypTen's randomness.
* ``crypten/``    — CrypTen's own tensors: ``safe`` (its randomness from the dealer and
  AES-CTR, its openings point-to-point), ``bridge`` (an ``MPCTensor`` of scores to
  mid-ranks and the DP AUC on shares), ``vfl`` (the private-inference example's party).

What each party learns and the trust model: docs/mpc.md.
"""

from .errors import MPCError  # noqa: E402 - a leaf module: every layer below may import it
from .sort.registry import RANK_METHOD_HELP, RANK_METHODS, rank_method_help  # noqa: E402 - the sorts, by name

__all__ = ["MPCError", "MPC_OPTIONS", "RANK_METHODS", "RANK_METHOD_HELP", "rank_method_help"]

MPC_OPTIONS = ("provider", "sort", "timeout", "port", "progress", "computing", "hosts", "threads", "started")  # of session.run_mpc_local
