r"""Opening additively shared values: to one party, to their owners, or to everyone.

The :math:`w` computing parties hold :math:`x = x_0 + \dots + x_{w-1} \pmod{2^{64}}`.

* :func:`open_to` — to party :math:`d` only: every party :math:`j \ne d` sends
  :math:`x_j` point-to-point to :math:`d` (:mod:`.p2p`, its own tag), which
  adds them to its own share.  No other party receives anything, so no other
  party can combine shares.  (CrypTen's ``get_plain_text(dst)`` is a
  ``torch.distributed.reduce``; gloo runs it as a ring reduce-scatter followed
  by a gather, which leaves the fully summed chunk of about :math:`1/w` of
  the vector at *every* party.  It is never used.)
* :func:`open_to_owners` — slice :math:`k` of a vector to its owner
  :math:`o_k` only, all slices in one round: each party sends each owner
  that owner's slice, nothing more.
* :func:`open_to_all` — to every party (one ``all_gather``).  Only for values
  meant for everyone: one-time-masked values and the radix sort's shuffled
  permutations.
"""

from __future__ import annotations

import torch

from ..comm import backend, p2p
from .words import pack, unpack, words_for

__all__ = ["open_to", "open_to_owners", "open_to_all"]


def open_to(share: torch.Tensor, dst: int) -> torch.Tensor | None:
    """Open ``x`` (this party's int64 share ``share``) to party ``dst`` only.

    Returns :math:`x` at ``dst`` and None elsewhere."""
    return open_to_owners(share.reshape(-1), [share.numel()], [dst], shape=share.shape)


def open_to_owners(share: torch.Tensor, sizes, owners, *, shape=None) -> torch.Tensor | None:
    """Open slice :math:`k` (``sizes[k]`` consecutive rows of ``share``) to party
    ``owners[k]`` only, in one round.

    Returns this party's slices concatenated in order (reshaped to ``shape``
    if given), or None if it owns none.  A slice whose owner is this party is
    never sent anywhere."""
    rank, world = backend.rank(), backend.world_size()
    share = share.contiguous()
    sending, incoming, mine = [], [], []
    offset = 0
    for n_k, owner in zip(sizes, owners):
        part = share[offset : offset + n_k]
        offset += n_k
        if owner != rank:
            words = pack([part])  # int32 shares (Z_2^32) travel as half as many words
            sending.append((words, p2p.isend(words, owner, p2p.TAG_OPEN)))
            continue
        mine.append(part.clone())
        incoming.append([p2p.irecv((words_for([part]),), j, p2p.TAG_OPEN) for j in range(world) if j != rank])
    for total, works in zip(mine, incoming):
        for t, work in works:
            work.wait()
            total += unpack(t, [total])[0]
    p2p.wait_all(w for _, w in sending)
    if not mine:
        return None
    out = torch.cat(mine) if len(mine) > 1 else mine[0]
    return out.reshape(shape) if shape is not None else out


def open_to_all(share: torch.Tensor) -> torch.Tensor:
    """Open ``x`` to every party (one ``all_gather``).  Only for values that are
    uniformly random given everything else a party sees (one-time-masked values,
    a secret permutation composed with a fresh secret shuffle)."""
    if backend.world_size() == 1:
        return share.clone()
    parts = backend.all_gather(pack([share]))  # int32 shares (Z_2^32) travel as half as many words
    out = unpack(parts[0], [share])[0].clone()
    for p in parts[1:]:
        out += unpack(p, [share])[0]
    return out
