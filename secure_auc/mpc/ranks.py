r"""The secure rank step: global mid-ranks of secret-shared scores.

Input: party ``sources[k]`` holds ``sizes[k]`` scores (client k is rank k + 1
in the protocol); the sizes are public.  Output: each source learns 2 x the
0-based mid-rank of each of its own scores (an integer), in its own order;
nobody else learns anything.

1. *Keys.*  Each source encodes its scores exactly (:mod:`.encoding`); the
   parties agree on one or two key limbs from one public bit per source
   ("my scores are float32-exact").  The keys are secret-shared with integer
   encoding (precision 0), concatenated in party order and padded to
   :math:`n = 2^p` rows with public keys larger than any real one.
2. *Sort.*  The bitonic network (:mod:`.sort.bitonic`) sorts the rows and
   keeps its secret swap bits.
3. *Mid-ranks in sorted order.*  With :math:`e_j = [s_j = s_{j+1}]` (one
   batched equality test of neighbours), position :math:`j` starts a tie group
   if :math:`j = 0` or :math:`e_{j-1} = 0`, and ends one if :math:`j = n - 1` or
   :math:`e_j = 0`.  The group's first position is the last start at or before
   :math:`j`; its last position is the first end at or after :math:`j` (the last
   start at or before :math:`n-1-j` in the reversed sequence).  Both are
   segmented scans, run together in :math:`\lceil \log_2 n \rceil` rounds
   (Hillis-Steele): with flags :math:`f` and values :math:`v = j f`,

   .. math::

       (f_1, v_1) \circ (f_2, v_2) = (f_1 + f_2 - f_1 f_2,\; v_1 + f_2 (v_2 - v_1))

   (two products per element and round, all in one batched multiplication).
   Then :math:`2 r_j = \mathrm{first}_j + \mathrm{last}_j`, an integer.  Padding
   rows tie only with each other, so they do not move any real rank.
4. *Unsort.*  The swap bits, replayed in reverse, put :math:`2r` back in input
   order (multiplications only).  Source k's slice is opened to source k only.

Nothing is opened before step 4: the network, the equality test and the scans
open only Beaver-masked values.
"""

from __future__ import annotations

import numpy as np
import torch

from .encoding import encode_keys, is_float32_exact, limbs_for, share_keys
from .sort import BitonicSort, n_stages, secure_eq

__all__ = ["secure_midranks", "twice_midranks_sorted", "reveal_to_owners", "agree_limbs", "rank_step",
           "next_pow2", "RANK_METHODS"]

RANK_METHODS = ("network",)


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def twice_midranks_sorted(keys_sorted):
    """2 x mid-rank (0-based) of each row of sorted integer-encoded keys (n,) or (n, limbs)."""
    from ._crypten import crypten

    n = keys_sorted.size(0)
    if n == 1:
        return crypten.cryptensor(torch.zeros(1, dtype=torch.long), src=0, precision=0)
    eq = secure_eq(keys_sorted[:-1], keys_sorted[1:])  # (n - 1,)
    not_eq = 1 - eq
    one = crypten.cryptensor(torch.ones(2, 1, dtype=torch.long), src=0, precision=0)  # public 1s
    # row 0: starts, forward; row 1: ends, on the reversed sequence
    f = crypten.cat([one, crypten.stack([not_eq, not_eq.flip(0)])], dim=1)
    pos = torch.arange(n, dtype=torch.long)
    v = f * torch.stack([pos, pos.flip(0)])
    offset = 1
    while offset < n:
        f1, v1 = f[:, :-offset], v[:, :-offset]
        f2, v2 = f[:, offset:], v[:, offset:]
        prod = crypten.stack([f2, f2]) * crypten.stack([f1, v2 - v1])
        f = crypten.cat([f[:, :offset], f2 + f1 - prod[0]], dim=1)
        v = crypten.cat([v[:, :offset], v1 + prod[1]], dim=1)
        offset *= 2
    return v[0] + v[1].flip(0)


def secure_midranks(keys, progress=None):
    """2 x global mid-rank (0-based) of every row of the shared keys, in input order.

    ``keys``: integer-encoded (m, limbs) MPCTensor, every limb in a 32-bit range
    (:func:`.encoding.share_keys`).  Padded internally to a power of two.
    ``progress(stage, n_stages)`` is called after each of the sort's stages, the
    mid-rank step and each unsort stage.  Returns an (m,) MPCTensor; opens nothing.
    """
    from ._crypten import crypten

    m = keys.size(0)
    n = next_pow2(m)
    if n > m:
        from .encoding import pad_keys

        pad = torch.from_numpy(pad_keys(n - m, keys.size(1)))
        keys = crypten.cat([keys, crypten.cryptensor(pad, src=0, precision=0)], dim=0)
    s = n_stages(n)
    total = 2 * s + 1

    def report(offset):
        if progress is None:
            return None
        return lambda stage, _stages: progress(offset + stage, total)

    sorter = BitonicSort()
    keys_sorted = sorter.sort(keys, progress=report(0))
    twice_sorted = twice_midranks_sorted(keys_sorted)
    if progress is not None:
        progress(s + 1, total)
    twice = sorter.unsort(twice_sorted, progress=report(s + 1))
    return twice[:m]


def reveal_to_owners(values, sizes, owners, *, label: str = "ranks of client {k}"):
    """Open slice k of ``values`` (``sizes[k]`` rows, in order) to party ``owners[k]`` only.

    Returns this party's slice as an int64 array (concatenated if it owns
    several), or None.  One reduce per slice, each to its owner; the openings
    are labelled for :mod:`.audit` with ``label.format(k=k)``.
    """
    from ._crypten import crypten
    from .audit import open_to

    rank = crypten.comm.get().get_rank()
    mine = []
    offset = 0
    for k, (n_k, owner) in enumerate(zip(sizes, owners)):
        opened = open_to(values[offset : offset + n_k], owner, label.format(k=k))
        if rank == owner:
            mine.append(opened.numpy().astype(np.int64).reshape(-1))
        offset += n_k
    return np.concatenate(mine) if mine else None


def agree_limbs(scores, sources) -> int:
    """Every party learns the number of key limbs: each source broadcasts one bit,
    "my scores are float32-exact" (:func:`.encoding.limbs_for`)."""
    from ._crypten import crypten

    comm = crypten.comm.get()
    rank = comm.get_rank()
    flags = [comm.broadcast_obj(is_float32_exact(scores) if rank == src else None, src) for src in sources]
    return limbs_for(flags)


def rank_step(scores, client_sizes: list[int], rank: int, *, method: str = "network", progress=None,
              first_client: int = 1):
    """Run the whole rank step as party ``rank``; return this client's 2 x mid-ranks (or None).

    Client k (holding ``client_sizes[k]`` scores) is party ``first_client + k``;
    other parties pass ``scores=None``.
    """
    if method not in RANK_METHODS:
        raise ValueError(f"unknown rank method {method!r}; choose from {RANK_METHODS}")
    sources = [first_client + k for k in range(len(client_sizes))]
    limbs = agree_limbs(scores, sources)
    local = encode_keys(scores, limbs) if rank in sources else None
    keys = share_keys(local, client_sizes, sources, limbs)
    twice = secure_midranks(keys, progress=progress)
    return reveal_to_owners(twice, client_sizes, sources)
