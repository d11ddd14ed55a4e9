"""The secure rank step: global mid-ranks of secret-shared scores.

Input: client k (rank k + 1) holds n_k scores; the sizes are public.
Output: client k learns 2 x mid-rank of each of its own scores (an integer),
in its own order; nobody else learns anything (the server gets None).

1. Keys.  Each client encodes its scores exactly (:mod:`.encoding`); all
   clients agree on one or two limbs (one public bit per client).  The keys
   are secret-shared (integer encoding, precision 0) and concatenated in client
   order, then padded to n = 2^p rows with a key larger than any real one.
2. Sort.  An oblivious sorting network (:mod:`.sort`) sorts the rows.
3. Mid-ranks in sorted order.  With e_j = [s_j == s_{j+1}] (one batched
   equality test of neighbours), position j starts a tie group if j = 0 or
   e_{j-1} = 0 and ends one if j = n - 1 or e_j = 0.  The first position of
   j's group is the last start at or before j; the last position is the first
   end at or after j.  Both are segmented scans computed together in
   ceil(log2 n) rounds (Hillis-Steele), combining (f1, v1) then (f2, v2) into
   (f1 + f2 - f1 f2, v1 + f2 (v2 - v1)) with flags f and values v = j f.
   Then 2 r_j = first_j + last_j, an integer.  Padding rows tie only with each
   other (their keys exceed every real key), so they do not move real ranks.
4. Unsort.  The network's swap bits, replayed in reverse, put 2r back in the
   input order; client k's slice is opened to client k only.
"""

from __future__ import annotations

import numpy as np
import torch

from .audit import open_to
from .encoding import PAD_KEY, encode_keys, is_float32_exact
from .sort import BitonicSort
from .sort.bitonic import secure_eq

__all__ = ["rank_step", "twice_midranks_sorted", "RANK_METHODS"]

RANK_METHODS = ("network",)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def twice_midranks_sorted(keys_sorted, limbs: int):
    """2 x mid-rank of each row of sorted secret keys (n, >= limbs), as a secret vector."""
    from ._crypten import crypten

    n = keys_sorted.size(0)
    pos = torch.arange(n, dtype=torch.long)
    if n == 1:
        return crypten.cryptensor(torch.zeros(1, dtype=torch.long), src=0, precision=0)
    left, right = keys_sorted[:-1], keys_sorted[1:]
    e = secure_eq(left[:, :limbs], right[:, :limbs])
    eq = e[:, 0] if limbs == 1 else e[:, 0] * e[:, 1]
    one = torch.ones(1, dtype=torch.long)
    # starts (forward scan) and ends (backward scan, on reversed arrays), stacked as 2 rows
    not_eq = 1 - eq
    start_flag = crypten.cat([crypten.cryptensor(one, src=0, precision=0), not_eq])
    end_flag_rev = crypten.cat([crypten.cryptensor(one, src=0, precision=0), not_eq.flip(0)])
    f = crypten.stack([start_flag, end_flag_rev])
    v = f * torch.stack([pos, pos.flip(0)])
    offset = 1
    while offset < n:
        f1, v1 = f[:, :-offset], v[:, :-offset]
        f2, v2 = f[:, offset:], v[:, offset:]
        prod = crypten.stack([f2, f2]) * crypten.stack([f1, v2 - v1])
        f_new = f2 + f1 - prod[0]
        v_new = v1 + prod[1]
        f = crypten.cat([f[:, :offset], f_new], dim=1)
        v = crypten.cat([v[:, :offset], v_new], dim=1)
        offset *= 2
    first = v[0]
    last = v[1].flip(0)
    return first + last


def rank_step(scores, client_sizes: list[int], rank: int, *, method: str = "network", progress=None):
    """Run the rank step as party ``rank``; return this client's 2 x mid-ranks (or None)."""
    from ._crypten import crypten

    if method not in RANK_METHODS:
        raise ValueError(f"unknown rank method {method!r}; choose from {RANK_METHODS}")
    comm = crypten.comm.get()
    world = comm.get_world_size()
    # one public bit per client: are my scores float32-exact? one limb only if all are
    exact = True if scores is None else is_float32_exact(scores)
    flags = [comm.broadcast_obj(exact if r == rank else None, r) for r in range(world)]
    limbs = 1 if all(flags) else 2

    parts = []
    for k, n_k in enumerate(client_sizes):
        src = k + 1
        if rank == src:
            local = torch.from_numpy(encode_keys(scores, limbs))
        else:
            local = torch.zeros((n_k, limbs), dtype=torch.long)
        parts.append(crypten.cryptensor(local, src=src, precision=0))
    m = int(sum(client_sizes))
    n = _next_pow2(m)
    if n > m:
        pad = torch.full((n - m, limbs), PAD_KEY, dtype=torch.long)
        parts.append(crypten.cryptensor(pad, src=0, precision=0))  # public constant
    keys = crypten.cat(parts, dim=0)

    sorter = BitonicSort(limbs=limbs)

    def forward(s, total):
        if progress is not None:
            progress(s, 2 * total)

    def backward(s, total):
        if progress is not None:
            progress(total + s, 2 * total)

    keys_sorted = sorter.sort(keys, progress=forward)
    twice_sorted = twice_midranks_sorted(keys_sorted, limbs)
    twice = sorter.unsort(twice_sorted, progress=backward)

    mine = None
    offset = 0
    for k, n_k in enumerate(client_sizes):
        opened = open_to(twice[offset : offset + n_k], k + 1, f"ranks of client {k}")
        if rank == k + 1:
            mine = opened.numpy().astype(np.int64)
        offset += n_k
    return mine
