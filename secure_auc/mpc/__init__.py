"""The MPC protocol over CrypTen (imported lazily: ``import secure_auc`` never loads torch).

* ``_crypten``  — the only module that imports CrypTen (with the torch 2.x shim).
* ``encoding``  — exact, order-preserving integer keys for float scores.
* ``sort/``     — oblivious sorts of secret shares: radix (secret permutations
  composed digit by digit) and the bitonic network (the reference).
* ``shuffle``, ``dealer``, ``prg``, ``p2p``, ``inputs``, ``scan``, ``opening`` —
  the pieces: secret shuffles, the dealer's correlated randomness (every triple,
  pad and permutation), AES-CTR streams, point-to-point messages, sharing from
  the sources, segmented scans, opening to one party / owners / everyone.
* ``ranks``     — the rank step: shared keys -> sorted -> mid-ranks -> unsorted -> owners.
* ``party``     — the protocol as one party runs it (server, client), reusing the
  plain protocol's roles and mechanisms.
* ``runtime``   — bringing a party's communicator up and down with bounded waits.
* ``launch``    — local multi-process launcher; ``entry`` — torchrun entry point.
* ``audit``     — records every buffer a process receives; refuses CrypTen's randomness.

What each party learns and the trust model: docs/mpc.md.
"""

class MPCError(RuntimeError):
    """The MPC run failed; the message names the party and the cause (one line);
    ``details`` holds that party's traceback when it reported one."""

    details: str = ""


RANK_METHODS = ("radix", "network")  # the first is the default
RANK_METHOD_HELP = {
    "radix": "oblivious radix sort composing secret permutations digit by digit; opens only freshly "
             "shuffled, uniformly random permutations; the shuffles' correlated randomness comes from "
             "the triples' provider (the dealer with ttp, the server with tfp), which must not collude "
             "with a computing party, as for the triples; O(M) per digit, fastest (default)",
    "network": "Batcher's bitonic sorting network on 33-bit comparisons: multiplications and masked "
               "openings only, nothing beyond the triples' provider; O(M log^2 M), the reference",
}


def rank_method_help() -> str:
    """One help line naming every rank method and what it assumes."""
    return "secure rank method: " + "; ".join(f"{k} = {v}" for k, v in RANK_METHOD_HELP.items())
