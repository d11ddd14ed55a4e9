r"""Secret-shared shuffle: permute additively shared rows by a permutation that
no computing party knows, with correlated randomness from the dealer.

Shares.  The :math:`w` computing parties hold
:math:`X = X_0 + \dots + X_{w-1} \pmod{2^{64}}` (int64), or
:math:`\pmod{2^{32}}` (int32: pads, messages and corrections are then half
as many bytes), an :math:`(M, c)` matrix.

One pass (permuter :math:`i`, its own uniformly random permutation
:math:`p_i` of the rows, applied as :math:`X \mapsto X[p_i]`):

.. math::

    \text{party } j \ne i:&\quad m_j = X_j - A_j \;\to\; \text{party } i,
        \qquad X_j \leftarrow B_j \\
    \text{party } i:&\quad X_i \leftarrow \Big(X_i + \sum_{j \ne i} m_j\Big)[p_i] + \Delta_i,
        \qquad \Delta_i = \Big(\sum_{j \ne i} A_j\Big)[p_i] - \sum_{j \ne i} B_j

so the shares now add up to :math:`(X - A)[p_i] + A[p_i] - B + B = X[p_i]`.
:math:`A_j, B_j` are one-time pads from a PRG stream that party :math:`j`
shares with the dealer, :math:`p_i` comes from party :math:`i`'s stream, and
the dealer, who can recompute every stream but never holds a share, sends
:math:`\Delta_i` to party :math:`i` only (the correlated-randomness form of the
shuffle of Chase, Ghosh and Poburinnaya 2020, with a dealer in place of
oblivious transfer).

A shuffle is :math:`w` passes, :math:`i = 0, \dots, w-1`: the rows are permuted
by :math:`X \mapsto X[p]`, :math:`p = p_0[p_1[\dots p_{w-1}]]`.  The inverse
shuffle runs the passes in reverse order with the inverse permutations.

What each party sees: the :math:`m_j` it receives are uniformly random (masked
by the pads :math:`A_j`), :math:`\Delta_i` is uniformly random (masked by
:math:`B_j`).  Any coalition of computing parties that misses one party
:math:`i` does not know :math:`p_i`, so :math:`p` is uniformly random to it;
this is why every computing party is a permuter (the same threshold as the
additive sharing).  The dealer knows every :math:`p_i`: like the triples'
dealer it must not collude with a computing party.  With the TFP provider
rank 0 plays the dealer and is trusted anyway.

Streams: :mod:`.prg`; seeds and corrections: :mod:`.dealer`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..comm import p2p
from .prg import ring, stream
from .words import pack, unpack, words_for

__all__ = ["Shuffle", "pads", "permutation", "bucket_permutation", "permute_rows", "pass_order", "deltas", "open_shuffled"]


# ----------------------------------------------------------------- pads and permutations (pure)


def pads(seed: bytes, instance: int, step: int, shape, dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    """The one-time pads (A, B) of a party for pass ``step`` of shuffle ``instance``,
    in Z_2^64 (int64) or Z_2^32 (``dtype=np.int32``)."""
    ab = ring(seed, ("pad", instance, step), (2, *shape), dtype)
    return ab[0], ab[1]


BUCKETS = 256  # buckets of the permutations of many rows (each bucket's shuffle stays in cache)


def permutation(seed: bytes, instance: int, rows: int) -> np.ndarray:
    """The permuter's uniformly random permutation of ``rows`` rows for shuffle ``instance``.

    Above 2^16 rows, in the manner of Rao and Sandelius (1961): every row goes to one of
    256 buckets uniformly at random, the rows are put in bucket order (a stable counting
    sort), and each bucket is shuffled by Fisher-Yates.  Every permutation comes out with
    the same probability (a uniform bucket assignment followed by uniform orders within
    the buckets), as from one Fisher-Yates over all rows, but each bucket's random swaps
    stay in the cache: 25-29 ms instead of 29-48 ms of CPU for 2^20 rows when four
    processes share the two cores.  Both ends of the stream (the permuter and the dealer)
    compute the same permutation."""
    g = stream(seed, "perm", instance)
    return g.permutation(rows) if rows <= 1 << 16 else bucket_permutation(g, rows)


def bucket_permutation(g: np.random.Generator, rows: int, buckets: int = BUCKETS) -> np.ndarray:
    """A uniformly random permutation of ``rows`` rows from ``g``: uniform buckets (at most
    256), a stable counting sort by bucket, then Fisher-Yates within each bucket."""
    bucket = g.integers(0, buckets, size=rows, dtype=np.uint8)
    p = np.argsort(bucket, kind="stable")
    start = 0
    for end in np.cumsum(np.bincount(bucket, minlength=buckets)).tolist():
        g.shuffle(p[start:end])
        start = end
    return p


def permute_rows(x, p, inverse: bool = False):
    """``x[p]`` (rows), or ``x[p^-1]`` with ``inverse`` (a scatter: ``out[p] = x``, no inverse
    permutation computed), for an (M, c) torch tensor or numpy array (same memory, no copy)
    and an (M,) permutation.  A row of one 4- or 8-byte word (two int32 shares) moves as one
    word: gathers of 1-D arrays are several times faster."""
    if isinstance(x, np.ndarray):
        return permute_rows(torch.from_numpy(x), torch.from_numpy(np.asarray(p)), inverse).numpy()
    width = x.shape[1] * x.element_size()
    rows = x.view(torch.int32 if width == 4 else torch.int64).reshape(-1) \
        if width in (4, 8) and x.is_contiguous() else x
    out = torch.empty_like(rows).index_copy_(0, p, rows) if inverse else rows.index_select(0, p)
    return out.view(x.dtype).reshape(x.shape)


def pass_order(world: int, inverse: bool) -> list[int]:
    """Permuters in pass order: 0..w-1 forward, w-1..0 for the inverse."""
    order = list(range(world))
    return order[::-1] if inverse else order


def _step_id(world: int, step: int, inverse: bool) -> int:
    return world + step if inverse else step


def deltas(seeds: list[bytes], instance: int, rows: int, cols: int, inverse: bool, perm=None, dtype=np.int64):
    """The dealer's corrections: yield (permuter i, Delta_i) for each pass, in pass order,
    in the ring of ``dtype``.  ``perm(i)`` returns p_i (default: recomputed from the stream)."""
    world = len(seeds)
    for step, i in enumerate(pass_order(world, inverse)):
        sid = _step_id(world, step, inverse)
        a_sum = b_sum = None
        for j in range(world):
            if j == i:
                continue
            a, b = pads(seeds[j], instance, sid, (rows, cols), dtype)
            if a_sum is None:
                a_sum, b_sum = a.copy(), b.copy()
            else:
                a_sum += a  # wraps mod 2^64 (2^32)
                b_sum += b
        p = perm(i) if perm is not None else permutation(seeds[i], instance, rows)
        out = permute_rows(a_sum, p, inverse)
        out -= b_sum
        yield i, out


# ----------------------------------------------------------------- a computing party


class Shuffle:
    """Secret shuffles of (rows, cols) int64 or int32 share matrices over one :class:`.dealer.DealerChannel`.

    ``forward(x)`` returns the shares of ``X[p]`` and the shuffle's handle;
    ``inverse(y, handle)`` returns the shares of ``Y[p^-1]`` for the same ``p``.
    All parties make the same calls in the same order (sizes are public)."""

    def __init__(self, channel):
        self.ch = channel
        self.count = 0
        self._perms: dict[int, np.ndarray] = {}
        self._asked: dict[tuple[int, bool], tuple[int, int, int]] = {}  # (instance, inverse) -> (rows, cols, width)

    def prepare(self, rows: int, cols: int, dtype: torch.dtype, *, inverse_of: int | None = None) -> None:
        """Ask the dealer now for the corrections of a coming shuffle: the next forward one
        (default) or the inverse of shuffle ``inverse_of``, of a (rows, cols) matrix of
        ``dtype``, so that the dealer computes them while the parties work.  The
        shuffle must then be run with those sizes (checked); every party calls it."""
        instance = self.count if inverse_of is None else inverse_of
        self._ask(instance, inverse_of is not None, rows, cols, torch.empty((), dtype=dtype).element_size())

    def _ask(self, instance: int, inverse: bool, rows: int, cols: int, width: int) -> None:
        key, spec = (instance, inverse), (rows, cols, width)
        if key in self._asked:
            if self._asked[key] != spec:
                raise RuntimeError(f"shuffle {instance} was prepared for {self._asked[key]} (rows, cols, bytes) "
                                   f"and run with {spec}")
            return
        self._asked[key] = spec
        self.ch.request("shuffle", instance, rows, cols, inverse, width)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        instance = self.count
        self.count += 1
        return self._run(x, instance, inverse=False), instance

    def inverse(self, y: torch.Tensor, instance: int) -> torch.Tensor:
        out = self._run(y, instance, inverse=True)
        self._perms.pop(instance, None)
        return out

    def _perm(self, instance: int, rows: int) -> torch.Tensor:
        if instance not in self._perms:
            self._perms[instance] = permutation(self.ch.seed, instance, rows)
        return torch.from_numpy(self._perms[instance])

    def _run(self, x: torch.Tensor, instance: int, inverse: bool) -> torch.Tensor:
        ch = self.ch
        x = x.reshape(x.shape[0], -1)
        rows, cols = x.shape
        dtype = np.int32 if x.dtype == torch.int32 else np.int64
        self._ask(instance, inverse, rows, cols, np.dtype(dtype).itemsize)
        self._asked.pop((instance, inverse))
        words = words_for([x])
        sending = []
        for step, i in enumerate(pass_order(ch.world, inverse)):
            sid = _step_id(ch.world, step, inverse)
            if ch.rank != i:
                a, b = pads(ch.seed, instance, sid, (rows, cols), dtype)
                m = pack([x - torch.from_numpy(a)])
                sending.append((m, p2p.isend(m, i, p2p.TAG_PAD)))
                x = torch.from_numpy(b)
            else:
                incoming = [p2p.irecv((words,), j, p2p.TAG_PAD) for j in range(ch.world) if j != i]
                p = self._perm(instance, rows)
                delta = ch.receive(x)
                x = x.clone()
                for t, work in incoming:
                    work.wait()
                    x += unpack(t, [x])[0]
                x = permute_rows(x, p, inverse)
                x += delta
        p2p.wait_all(w for _, w in sending)
        return x


def open_shuffled(share: torch.Tensor) -> torch.Tensor:
    """Open a shuffled vector to every party (:func:`.opening.open_to_all`).  Only for
    values that are uniformly random given everything else a party sees (a secret
    permutation composed with a fresh secret shuffle)."""
    from .opening import open_to_all

    return open_to_all(share)
