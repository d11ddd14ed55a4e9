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
* :func:`open_to_all` / :func:`open_all` — to every party.  Only for values
  meant for everyone: one-time-masked values and the radix sort's shuffled
  permutations.  Small openings, and any among 2 parties, are one
  ``all_gather`` of the shares (:math:`(w - 1) n` words sent per party).
  From :data:`SCATTER_MIN_BYTES` on among :math:`w \ge 3` parties, a
  reduce-scatter then an all-gather, both point-to-point: party :math:`k`
  receives every other party's shares of slice :math:`k` only (about
  :math:`n / w` words each), adds them, and sends the opened slice to every
  other party: :math:`2 (w - 1) n / w` words sent per party instead of
  :math:`(w - 1) n` (a third fewer among 3), in two message rounds instead of
  one.  What a party receives is a subset of what the ``all_gather`` gives it
  (some of the other parties' shares) plus the opened values.
* :func:`open_from` — values one party already holds in full, masked like the
  above (the last permuter of a shuffle opened at its last pass,
  :meth:`.shuffle.Shuffle.forward_to_last`), sent by it to every other party: one
  message round, the low bytes of each value only.
* :func:`reconstruct` — an input party that does not compute adds the shares
  every computing party sent it (its rows' ranks, in the helpers layout);
  :mod:`.observed`'s, which needs no torch (a client host's).

Every value a party obtains by one of these is told to the callables in
:data:`observers` (:mod:`.observed`; :func:`secure_auc.mpc.audit.record_received`
records it), so the secrecy tests see what each party *learns*, not only the
shares it receives.
"""

from __future__ import annotations

import numpy as np
import torch

from ..comm import backend, p2p
from .observed import observers, reconstruct, tell as _tell
from .words import LowBytes, add_into, pack, unpack, words_for

__all__ = ["open_to", "open_to_owners", "open_to_all", "open_all", "open_from", "reconstruct", "observers",
           "SCATTER_MIN_BYTES"]

SCATTER_MIN_BYTES = 1 << 20  # openings from this size on (among 3 or more parties) go by reduce-scatter


def open_to(share: torch.Tensor, dst: int, *, xor: bool = False) -> torch.Tensor | None:
    r"""Open ``x`` (this party's int64 share ``share``) to party ``dst`` only; ``xor``: XOR
    shares (:math:`x = x_0 \oplus \dots \oplus x_{w-1}`) instead of additive ones.

    Returns :math:`x` at ``dst`` and None elsewhere."""
    return open_to_owners(share.reshape(-1), [share.numel()], [dst], shape=share.shape, kind="open_to", xor=xor)


def open_to_owners(share: torch.Tensor, sizes, owners, *, shape=None,
                   kind: str = "open_to_owners", bits: int | None = None, xor: bool = False) -> torch.Tensor | None:
    """Open slice :math:`k` (``sizes[k]`` consecutive rows of ``share``) to party
    ``owners[k]`` only, in one round.

    Returns this party's slices concatenated in order (reshaped to ``shape``
    if given), or None if it owns none.  A slice whose owner is this party is
    never sent anywhere.  ``kind``: the opening's name for the :data:`observers`.
    ``bits``: open only the values mod 2^bits of int32 shares, as :func:`open_all` does
    (the low ceil(bits / 8) bytes of each share travel; values in [0, 2^bits)).
    ``xor``: XOR shares (not with ``bits``)."""
    rank, world = backend.rank(), backend.world_size()
    share = share.contiguous()
    if bits is not None and (share.dtype != torch.int32 or not 0 < bits <= 32 or xor):
        raise ValueError("a low-bits opening takes int32 additive shares and 1 to 32 bits")
    codec = _LowBytes(-(-bits // 8)) if bits is not None else _Codec(1 if xor else 0)
    sending, incoming, mine = [], [], []
    offset = 0
    for n_k, owner in zip(sizes, owners):
        part = share[offset : offset + n_k]
        offset += n_k
        if owner != rank:
            words = pack([codec.wire(part)])  # int32 shares (Z_2^32) travel as half as many words
            sending.append((words, p2p.isend(words, owner, p2p.TAG_OPEN)))
            continue
        like = codec.wire(part)
        mine.append(codec.summed(like))
        incoming.append([(like, p2p.irecv((words_for([like]),), j, p2p.TAG_OPEN)) for j in range(world)
                         if j != rank])
    for total, works in zip(mine, incoming):
        for like, (t, work) in works:
            work.wait()
            codec.add([total], unpack(t, [like]))
    p2p.wait_all(w for _, w in sending)
    if not mine:
        return None
    out = torch.cat(mine) if len(mine) > 1 else mine[0]
    if bits is not None and bits < 32:
        out &= (1 << bits) - 1
    _tell(kind, [out])
    return out.reshape(shape) if shape is not None else out


def open_to_all(share: torch.Tensor) -> torch.Tensor:
    """Open ``x`` to every party (:func:`open_all`).  Only for values that are uniformly
    random given everything else a party sees (one-time-masked values, a secret
    permutation composed with a fresh secret shuffle)."""
    return open_all([share])[0]


def open_all(shares: list[torch.Tensor], xor: int = 0, bits: int | None = None) -> list[torch.Tensor]:
    """Open the tensors ``shares`` (this party's shares, any integer dtype, each summed in its
    own ring; the first ``xor`` are XOR shares) to every party (module docstring).  Returns
    the opened tensors, same shapes.

    ``bits``: open only the values mod 2^bits of int32 (Z_2^32) shares: each party sends
    the low ceil(bits / 8) bytes of each share (the higher bits of a share never leave
    it), and gets int32 values in [0, 2^bits); 1, 2 or 4 bits go 8 / bits to a byte."""
    world = backend.world_size()
    if bits is None:
        like = [t.reshape(-1) for t in shares]
        codec = _Codec(xor)
    else:
        if any(t.dtype != torch.int32 for t in shares) or xor or not 0 < bits <= 32:
            raise ValueError("a low-bits opening takes int32 additive shares and 1 to 32 bits")
        codec = _LowBits(bits) if bits in _LowBits.WIDTHS else _LowBytes(-(-bits // 8))
        like = [codec.wire(t.reshape(-1)) for t in shares]
    if world == 1:
        totals = [codec.summed(t) for t in like]
    elif world < 3 or sum(t.numel() * t.element_size() for t in like) < SCATTER_MIN_BYTES:
        gathered = backend.all_gather(pack(like))
        totals = [codec.summed(t) for t in unpack(gathered[0], like)]
        for g in gathered[1:]:
            codec.add(totals, unpack(g, like))
    else:
        totals = _reduce_scatter_gather(like, codec, backend.rank(), world)
    if bits is not None and bits < 32:
        totals = [t[: x.numel()] for t, x in zip(totals, shares)]  # without a sub-byte packing's padding
        for t in totals:
            t &= (1 << bits) - 1
    _tell("open_all", totals)
    return [t.view(x.shape) for t, x in zip(totals, shares)]


def open_from(value: torch.Tensor | None, src: int, n: int, bits: int) -> torch.Tensor:
    """Party ``src`` holds the (n,) int32 values ``value`` (None elsewhere) that every party
    is to learn mod 2^bits: it sends their low ceil(bits / 8) bytes to every other party.
    Every party returns the values mod 2^bits (int32) and tells the :data:`observers`, as
    :func:`open_all` does.  Only for values that :func:`open_all` could open (masked)."""
    rank, world = backend.rank(), backend.world_size()
    if not 0 < bits <= 32:
        raise ValueError("open_from opens 1 to 32 bits")
    codec = _LowBytes(-(-bits // 8))
    if rank == src:
        wire = codec.wire(value.reshape(-1).contiguous())
        words = pack([wire])
        p2p.wait_all([p2p.isend(words, j, p2p.TAG_SUMS) for j in range(world) if j != src])
        out = value.reshape(-1).clone()
    else:
        like = codec.like(n)
        out = codec.summed(unpack(p2p.recv((words_for([like]),), src, p2p.TAG_SUMS), [like])[0])
    if bits < 32:
        out &= (1 << bits) - 1
    _tell("open_all", [out])
    return out


class _Codec:
    """Shares on the wire as they are, summed in their own ring (XOR for the first ``xor``)."""

    def __init__(self, xor: int = 0):
        self.xor = xor

    def wire(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def summed(self, w: torch.Tensor) -> torch.Tensor:
        return w.clone()

    def add(self, totals: list[torch.Tensor], parts: list[torch.Tensor]) -> None:
        add_into(totals, parts, xor=self.xor)

    def result(self, w: torch.Tensor) -> torch.Tensor:
        """An opened value from its wire form."""
        return w


class _LowBytes(LowBytes, _Codec):
    """:class:`.words.LowBytes` as an opening's codec: the sums of every party's low bytes."""

    def __init__(self, nbytes: int):
        LowBytes.__init__(self, nbytes)
        self.xor = 0

    def add(self, totals: list[torch.Tensor], parts: list[torch.Tensor]) -> None:
        for t, p in zip(totals, parts):
            self.add_summed(t, p)

    result = LowBytes.summed


class _LowBits(_Codec):
    """int32 shares on the wire as their low ``bits`` bits (1, 2 or 4), 8 / bits to a byte
    (rows of an (n_bytes, 1) uint8 tensor, the last byte padded with zeros), summed in
    Z_2^32: the sum's low bits are the value's.  Unpacking gives a multiple of 8 / bits
    values (the caller cuts the padding off).

    Packing: the shares' low bytes, masked, OR-ed 8 / bits at a time; unpacking: each
    byte's values from a table of the 256 bytes (numpy, one pass each)."""

    WIDTHS = (1, 2, 4)
    _TABLES: dict = {}

    def __init__(self, bits: int):
        super().__init__()
        self.bits, self.per = bits, 8 // bits
        if bits not in self._TABLES:
            shifts = np.arange(0, 8, bits, dtype=np.int32)
            self._TABLES[bits] = (np.arange(256, dtype=np.int32)[:, None] >> shifts) & ((1 << bits) - 1)
        self.table = self._TABLES[bits]  # (256, per): the values each byte carries

    def wire(self, t: torch.Tensor) -> torch.Tensor:
        n = t.numel()
        x = np.zeros(-(-n // self.per) * self.per, dtype=np.uint8)
        x[:n] = t.numpy().reshape(-1)  # (the low byte: C's conversion to unsigned)
        x &= (1 << self.bits) - 1
        v = x.reshape(-1, self.per)
        out = v[:, 0].copy()
        for j in range(1, self.per):
            out |= v[:, j] << np.uint8(j * self.bits)
        return torch.from_numpy(out).view(-1, 1)

    def summed(self, w: torch.Tensor) -> torch.Tensor:
        raw = np.ascontiguousarray(w.numpy()).reshape(-1)
        return torch.from_numpy(self.table.take(raw, axis=0).reshape(-1))

    def add(self, totals: list[torch.Tensor], parts: list[torch.Tensor]) -> None:
        for t, p in zip(totals, parts):
            t += self.summed(p)

    result = summed


def _reduce_scatter_gather(like: list[torch.Tensor], codec: _Codec, rank: int, world: int) -> list[torch.Tensor]:
    bounds = [[k * t.shape[0] // world for k in range(world + 1)] for t in like]

    def piece(k: int, tensors=like) -> list[torch.Tensor]:
        return [t[b[k] : b[k + 1]] for t, b in zip(tensors, bounds)]

    peers = [j for j in range(world) if j != rank]
    sending = []
    for k in peers:
        words = pack(piece(k))
        sending.append((words, p2p.isend(words, k, p2p.TAG_SCATTER)))
    mine = [codec.summed(t) for t in piece(rank)]
    for t, work in [p2p.irecv((words_for(piece(rank)),), j, p2p.TAG_SCATTER) for j in peers]:
        work.wait()
        codec.add(mine, unpack(t, piece(rank)))
    opened = [codec.wire(t) for t in mine]
    words = pack(opened)
    sending += [(words, p2p.isend(words, k, p2p.TAG_SUMS)) for k in peers]
    out = [torch.empty_like(t) for t in like]
    for dst, src in zip(piece(rank, out), opened):
        dst.copy_(src)
    for j, (t, work) in zip(peers, [p2p.irecv((words_for(piece(j)),), j, p2p.TAG_SUMS) for j in peers]):
        work.wait()
        for dst, src in zip(piece(j, out), unpack(t, piece(j))):
            dst.copy_(src)
    p2p.wait_all(w for _, w in sending)
    return [codec.result(t) for t in out]
