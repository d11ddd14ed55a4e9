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

*Pads as shares* (:func:`senders`).  After a pass every party but its permuter
holds its pad :math:`B_j`, which the dealer can recompute.  So in every pass
after the first, a party :math:`j` that was not the previous pass's permuter
takes :math:`A_j := B_j` (its current share) and sends nothing: its message
would be :math:`m_j = X_j - A_j = 0`, and the dealer puts :math:`B_j` into
:math:`\Delta_i` in place of a fresh :math:`A_j`.  Only the previous permuter,
whose share depends on the data, sends.  Among :math:`w` parties a shuffle is
then :math:`2w - 2` messages instead of :math:`w (w - 1)` (4 instead of 6 among
3; unchanged among 2).  The views are no richer than with fresh pads: with
fresh :math:`A_j` the permuter would receive :math:`m_j = B_j - A_j` and
:math:`\Delta_i^{\text{fresh}}`, and here it receives only
:math:`\Delta_i = \Delta_i^{\text{fresh}} + m_j[p_i]`, a function of those.

What each party sees: the :math:`m_j` it receives are uniformly random (masked
by the pads :math:`A_j`), :math:`\Delta_i` is uniformly random (masked by
:math:`B_j`).  Any coalition of computing parties that misses one party
:math:`i` does not know :math:`p_i`, so :math:`p` is uniformly random to it;
this is why every computing party is a permuter (the same threshold as the
additive sharing).  The dealer knows every :math:`p_i`: like the triples'
dealer it must not collude with a computing party.  With the TFP provider
rank 0 plays the dealer and is trusted anyway.

*The first correction from a stream* (:func:`first_delta`, :func:`holds_nothing`).
In the first pass the dealer sends nothing: the permuter :math:`i` draws
:math:`\Delta_i` from its own stream, and the next permuter :math:`n` keeps no
pad; its share is :math:`H_n = (\sum_{j \ne i} A_j)[p_i] - \sum_{j \ne i, n} B_j
- \Delta_i`, which only the dealer computes.  The shares add up as before, and
:math:`n`, which permutes next, takes :math:`0` as its share: the dealer adds
:math:`H_n` to what it permutes, :math:`\Delta_n = (H_n + \sum_{j \ne n}
A_j)[p_n] - \dots`.  One correction per shuffle less (among 2 parties, one of
the two).  The views keep their distribution: :math:`\Delta_i` was uniform and
independent of the masked messages (fresh :math:`B_j`), and still is; :math:`n`
never sees :math:`H_n`, only :math:`\Delta_n`, in which :math:`H_n` is masked by
the uniform :math:`\Delta_i` it does not know (and by the next pass's fresh pads,
or, in a shuffle opened by :math:`n`, :math:`\Delta_n` follows from the opened
value as below).

*A share carried to the next shuffle* (``keep``/``carried`` of :func:`deltas`,
``carry`` of :meth:`Shuffle.inverse` and :meth:`Shuffle.forward`).  When an
inverse shuffle's result is used only linearly and then shuffled forward again
(the radix sort's :math:`\rho`, shifted digits added), its last pass also takes
its correction from the permuter's stream, and the *carrier*
(:func:`carrier`, party 1, the forward shuffle's second permuter) keeps no
share: its share :math:`H` is the value that makes the shares add up, which the
dealer keeps.  The carrier enters the next forward shuffle as if its share of
the result were :math:`0` (it sends :math:`m = (\text{its other terms}) - A`),
and the dealer adds :math:`H` into the first pass's :math:`\sum_{j \ne i} A_j`:
the first permuter's result is unchanged, and what is left for the carrier
after that pass (:func:`holds_nothing`) carries :math:`H` on.  One correction
less per pair of shuffles (among 2 parties an inverse then needs none).  The
views keep their distribution for the same reason as the first pass's: the
last permuter's :math:`\Delta` comes from its own stream; nobody receives
:math:`H`, only corrections in which it is masked by a stream :math:`\Delta` of
the next forward shuffle's first permuter, which the carrier does not know.

*Opened by the last permuter* (:meth:`Shuffle.forward_to_last`).  When the
shuffled column is to be opened at once, masked as :math:`Y = X[p] - R` by
correlated randomness :math:`R = \sum_j R_j` whose shares the dealer can
recompute, the last pass ends the shuffle and the opening together.  The
last permuter :math:`l` gets

.. math::

    \Delta_l^{\text{open}} = \Big(\sum_{j \ne l} A_j\Big)[p_l] - \sum_{j \ne l} R_j,

(no pads :math:`B_j`: the other parties keep no share), so its share becomes
:math:`(X - \sum_{j \ne l} A_j)[p_l] + \Delta_l^{\text{open}} = X[p] -
\sum_{j \ne l} R_j`, and :math:`Y` once it subtracts its own :math:`R_l`.  It
sends the opened window of :math:`Y` to every other party
(:func:`.opening.open_from`): one message round after the last pass, as an
``all_gather`` would take, with :math:`(w - 1) n` words sent by one party and
:math:`n` received by each other, instead of :math:`2 (w - 1) n / w` sent and
received by every party in the reduce-scatter's two rounds.  What the last
permuter receives is simulated from :math:`Y`, what the opening gives every
party: the message :math:`m_j` is uniformly random (masked by the sender's
fresh pad :math:`A_j`), and the correction then follows from :math:`Y`,
:math:`m_j` and its own share, :math:`\Delta_l^{\text{open}} = Y + R_l - (X_l +
m_j)[p_l]`; the bits of :math:`Y` above the window, which it
also sees, are masked by :math:`R`'s (the radix sort's :math:`2^k r`, with
:math:`r` uniform in :math:`\mathbb{Z}_{2^{32}}`).

Streams: :mod:`.prg`; seeds and corrections: :mod:`.dealer`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..comm import p2p
from .prg import ring, stream
from .words import LowBytes, pack, unpack, words_for

__all__ = ["Shuffle", "narrow_width", "pad", "senders", "permutation", "sort_permutation", "permute_rows", "pass_order", "deltas",
           "first_delta", "from_stream", "holds_nothing", "carrier", "INVERSE", "CARRY"]

INVERSE, CARRY = 1, 2  # a shuffle request's flags: an inverse shuffle; a share carried (module docstring)


# ----------------------------------------------------------------- pads and permutations (pure)


def pad(seed: bytes, instance: int, step: int, which: str, shape, dtype=np.int64) -> np.ndarray:
    """A party's one-time pad ``which`` ("A" or "B") for pass ``step`` of shuffle
    ``instance``, in Z_2^64 (int64) or Z_2^32 (``dtype=np.int32``)."""
    return ring(seed, ("pad", which, instance, step), shape, dtype)


def senders(world: int, step: int, inverse: bool) -> list[int]:
    """The parties that send their masked share to pass ``step``'s permuter: every other
    party in the first pass, then only the previous pass's permuter (the others' shares
    are their pads B, which serve as their pads A: module docstring)."""
    order = pass_order(world, inverse)
    return [j for j in order if j != order[step]] if step == 0 else [order[step - 1]]


def permutation(seed: bytes, instance: int, rows: int) -> np.ndarray:
    """The permuter's uniformly random permutation of ``rows`` rows for shuffle ``instance``:
    Fisher-Yates up to 2^16 rows, above by sorting 32-bit random keys (:func:`sort_permutation`;
    a compiled Fisher-Yates, or one within random buckets, took as long or longer at 2^20
    rows here).  Both ends of
    the stream (the permuter and the dealer) compute the same permutation."""
    if rows <= 1 << 16:
        return stream(seed, "perm", instance).permutation(rows)
    return sort_permutation(seed, instance, rows)


def sort_permutation(seed: bytes, instance: int, rows: int, key_bits: int | None = None) -> np.ndarray:
    """A uniformly random permutation of ``rows`` rows: the order of i.i.d. uniform
    32-bit random keys (AES-CTR, :func:`.prg.ring`), each run of equal keys shuffled by
    Fisher-Yates from the stream.

    Each key is packed above its row's index in one uint64 word (``key << 32 | row``), so
    one numpy sort of distinct words (3.4 times faster than a stable torch sort of int32
    keys at 2^20 rows, one thread) gives the order and the index together; rows whose keys
    tie (about rows^2 / 2^33 pairs: 128 at 2^20 rows) are then in index order, and
    shuffling those runs makes the order uniform: sorting rows by (key, an independent
    uniform order within equal keys) is sorting exchangeable distinct values, so every
    order is equally likely.  Packing the words and reading the order and the runs back
    are one compiled pass each (:func:`.kernels.keyed_rows`, :func:`.kernels.sorted_rows`;
    the same with numpy when the kernels are off).  ``key_bits``: fewer key bits, for tests
    (more ties)."""
    from ..kernels import enabled, keyed_rows, sorted_rows  # numba: only where the parties shuffle

    keys = ring(seed, ("perm", instance), (rows,), np.int32).view(np.uint32)
    if key_bits is not None and key_bits < 32:
        keys &= np.uint32((1 << key_bits) - 1)
    if enabled():
        words = keyed_rows(keys)
        words.sort()
        p, runs = sorted_rows(words)
    else:
        words = keys.astype(np.uint64)
        words <<= np.uint64(32)
        words |= np.arange(rows, dtype=np.uint64)
        words.sort()
        p = (words & np.uint64(0xFFFFFFFF)).view(np.int64)
        words >>= np.uint64(32)
        tied = words[1:] == words[:-1]
        edges = np.diff(np.concatenate(([0], tied.view(np.int8), [0])))
        runs = list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))
    if runs:
        g = stream(seed, "perm-ties", instance)
        for lo, hi in runs:
            g.shuffle(p[lo : hi + 1])
    return p


def permute_rows(x, p, inverse: bool = False):
    """``x[p]`` (rows), or ``x[p^-1]`` with ``inverse`` (a scatter: ``out[p] = x``, no inverse
    permutation computed), for an (M, c) torch tensor or numpy array (same memory, no copy)
    and an (M,) permutation.  A row of one 4- or 8-byte word (two int32 shares) moves as one
    word: gathers of 1-D arrays are several times faster."""
    if isinstance(x, np.ndarray):
        return permute_rows(torch.from_numpy(x), torch.from_numpy(np.asarray(p)), inverse).numpy()
    from ..kernels import enabled, permute_words  # numba: only where the parties shuffle

    width = x.shape[1] * x.element_size()
    rows = x.view(torch.int32 if width == 4 else torch.int64).reshape(-1) \
        if width in (4, 8) and x.is_contiguous() else x
    if rows.dim() == 1 and enabled():  # one word per row: a compiled gather or scatter
        out = torch.from_numpy(permute_words(rows.numpy(), p.numpy(), inverse))
    elif inverse and rows.dim() == 1:  # numpy's scatter of 1-D words: about 1.6x torch's index_copy_ here
        out = np.empty(rows.shape, dtype=rows.numpy().dtype)
        out[p.numpy()] = rows.numpy()
        out = torch.from_numpy(out)
    else:
        out = torch.empty_like(rows).index_copy_(0, p, rows) if inverse else rows.index_select(0, p)
    return out.view(x.dtype).reshape(x.shape)


def _width(dtype, bits: int | None) -> int:
    """Bytes per word on the wire: the low ceil(bits / 8) of a word when only its value
    mod 2^bits is needed (1 to 3 bytes of an int32 word, 5 to 7 of an int64 one), else
    the word's size."""
    size = torch.empty((), dtype=dtype).element_size()
    if bits is None:
        return size
    return min(size, max(-(-bits // 8), 1 if size == 4 else 5))


def narrow_width(width: int) -> int:
    """The low bytes per word a shuffle of ``width`` bytes per word sends (0: whole words)."""
    return 0 if width in (4, 8) else width


def pass_order(world: int, inverse: bool) -> list[int]:
    """Permuters in pass order: 0..w-1 forward, w-1..0 for the inverse."""
    order = list(range(world))
    return order[::-1] if inverse else order


def _step_id(world: int, step: int, inverse: bool) -> int:
    return world + step if inverse else step


def deltas(seeds: list[bytes], instance: int, rows: int, cols: int, inverse: bool, perm=None, dtype=np.int64,
           others_mask: np.ndarray | None = None, carried: np.ndarray | None = None, keep=None):
    """The dealer's corrections: yield (permuter i, Delta_i) for each pass it sends one for,
    in pass order, in the ring of ``dtype``.  ``perm(i)`` returns p_i (default: recomputed
    from the stream).  Delta_i = (sum_{j != i} A_j)[p_i] - sum_{j != i} B_j, with A_j = the
    previous pass's B_j for the parties that do not send (:func:`senders`).

    The first pass's correction is drawn from its permuter's stream (:func:`first_delta`),
    not sent, and the second permuter's pad B of that pass is the value that makes the
    shares add up: the dealer keeps it and adds it into that party's own pass
    (:func:`holds_nothing`; module docstring).

    ``others_mask`` (a forward shuffle opened by its last permuter l, module docstring):
    sum_{j != l} R_j, shaped like the rows; the last pass's correction is then
    (sum_{j != l} A_j)[p_l] - sum_{j != l} R_j.

    ``keep`` (an inverse shuffle whose result is carried, module docstring): the last
    pass's correction comes from the stream too, and ``keep(H)`` gets the
    :func:`carrier`'s share H, which it never holds.  ``carried``: such an H, (rows, cols),
    to add into the first pass (a forward shuffle of what the carrier holds without it)."""
    world = len(seeds)
    order = pass_order(world, inverse)
    carry = keep is not None
    last_b: dict[int, np.ndarray] = {}
    kept = None if carried is None else np.array(carried, dtype=dtype).reshape(rows, cols)  # copied: added into
    for step, i in enumerate(order):
        sid = _step_id(world, step, inverse)
        sending = senders(world, step, inverse)
        opens = others_mask is not None and step == len(order) - 1
        a_sum, b_sum = kept, None  # sums that wrap mod 2^64 (2^32), started from their first term
        b_now = {}
        for j in range(world):
            if j == i:
                continue
            a = pad(seeds[j], instance, sid, "A", (rows, cols), dtype) if j in sending else last_b[j]
            if a_sum is None:
                a_sum = a  # a fresh pad, or a last B that nothing reads after this pass: added into in place
            else:
                a_sum += a
            if opens or holds_nothing(world, step, inverse, j, carry):
                continue
            b_now[j] = pad(seeds[j], instance, sid, "B", (rows, cols), dtype)
            b_sum = b_now[j] if b_sum is None else b_sum + b_now[j]  # b_now's pads stay as they are
        if a_sum is None:
            a_sum = np.zeros((rows, cols), dtype=dtype)
        last_b, kept = b_now, None
        p = perm(i) if perm is not None else permutation(seeds[i], instance, rows)
        out = permute_rows(a_sum, p, inverse)
        if opens:
            out -= np.asarray(others_mask, dtype=dtype).reshape(rows, cols)
        elif b_sum is not None:
            out -= b_sum
        if from_stream(world, step, carry):  # Delta_i from the stream: the one holding nothing has what is left
            out -= first_delta(seeds[i], instance, sid, (rows, cols), dtype)
            kept = out
            continue
        yield i, out
    if carry:
        keep(kept)


def first_delta(seed: bytes, instance: int, step: int, shape, dtype=np.int64) -> np.ndarray:
    """A pass's correction from its permuter's stream, never sent (:func:`from_stream`)."""
    return ring(seed, ("delta", instance, step), shape, dtype)


def from_stream(world: int, step: int, carry: bool = False) -> bool:
    """Whether pass ``step``'s correction comes from its permuter's stream (:func:`first_delta`):
    the first pass, when there is a second; with ``carry`` (an inverse shuffle whose result
    is carried, module docstring) the last pass too."""
    return world > 1 and (step == 0 or (carry and step == world - 1))


def carrier(world: int) -> int:
    """The party whose share of a carried inverse shuffle's result the dealer keeps: the
    inverse's second-to-last permuter, which is the forward shuffle's second (party 1)."""
    return pass_order(world, True)[-2]


def holds_nothing(world: int, step: int, inverse: bool, party: int, carry: bool = False) -> bool:
    """Whether ``party`` keeps no share after pass ``step``: the second permuter after the
    first pass, whose share the dealer keeps and adds into its own pass's correction; with
    ``carry``, the :func:`carrier` after the last pass (the dealer adds its share into the
    next forward shuffle)."""
    if not from_stream(world, step, carry):
        return False
    if step == 0 and party == pass_order(world, inverse)[1]:
        return True
    return carry and step == world - 1 and party == carrier(world)


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
        self._asked: dict[tuple[int, bool], tuple] = {}  # (instance, inverse) -> (rows, cols, width, mask, carry)

    def prepare(self, rows: int, cols: int, dtype: torch.dtype, *, inverse_of: int | None = None,
                mask: tuple[int, int, int] | None = None, bits: int | None = None, carry: bool = False) -> None:
        """Ask the dealer now for the corrections of a coming shuffle: the next forward one
        (default) or the inverse of shuffle ``inverse_of``, of a (rows, cols) matrix of
        ``dtype``, so that the dealer computes them while the parties work.  The
        shuffle must then be run with those sizes (checked); every party calls it.
        ``mask``: the forward shuffle is opened by its last permuter (:meth:`forward_to_last`).
        ``bits``: see :meth:`forward`; ``carry``: see :meth:`inverse` and :meth:`forward`."""
        instance = self.count if inverse_of is None else inverse_of
        self._ask(instance, inverse_of is not None, rows, cols, _width(dtype, bits), mask, carry)

    def _ask(self, instance: int, inverse: bool, rows: int, cols: int, width: int, mask=None,
             carry: bool = False) -> None:
        key, spec = (instance, inverse), (rows, cols, width, tuple(mask or (0, 0, 0)), bool(carry))
        if key in self._asked:
            if self._asked[key] != spec:
                raise RuntimeError(f"shuffle {instance} was prepared for {self._asked[key]} (rows, cols, bytes, mask, "
                                   f"carry) and run with {spec}")
            return
        self._asked[key] = spec
        flags = (INVERSE if inverse else 0) | (CARRY if carry else 0)
        self.ch.request("shuffle", instance, rows, cols, flags, width, *spec[3])

    def forward(self, x: torch.Tensor, bits: int | None = None, carry: bool = False) -> tuple[torch.Tensor, int]:
        """Shares of X[p] and the shuffle's handle.  ``bits`` (int32 shares only): the result
        is needed mod 2^bits only, so every message and correction carries the low
        ceil(bits / 8) bytes of each word (:class:`.words.LowBytes`) and the permuters'
        shares are right mod 2^(8 ceil(bits / 8)) only.  ``carry``: X includes the result of
        the last inverse shuffle run with ``carry``, whose :func:`carrier` share the dealer
        kept; the carrier's ``x`` is its share without it (module docstring)."""
        instance = self.count
        self.count += 1
        return self._run(x, instance, inverse=False, bits=bits, carry=carry), instance

    @property
    def last(self) -> int:
        """The last permuter of a forward shuffle."""
        return pass_order(self.ch.world, False)[-1]

    def forward_to_last(self, x: torch.Tensor, mask: tuple[int, int, int],
                        bits: int | None = None, carry: bool = False) -> tuple[torch.Tensor | None, int]:
        """Shuffle the int32 column ``x`` for an opening by its last permuter :attr:`last`
        (module docstring): it gets X[p] - sum_{j != last} R_j, (rows,) int32, and subtracts
        its own R_last before opening the window to everyone (:func:`.opening.open_from`);
        the other parties get None.  ``mask`` = (d, batch, shift): R_j = 2^shift r_j, r_j row
        0 of party j's batch ``batch`` of ``"onehot<d>"`` randomness (:mod:`.dealer`), which
        the dealer recomputes; prepared with the same ``mask`` (:meth:`prepare`).  Returns
        the value (or None) and the shuffle's handle (for :meth:`inverse`); ``bits``,
        ``carry``: as :meth:`forward`'s."""
        instance = self.count
        self.count += 1
        x = x.reshape(x.shape[0], -1)
        if x.dtype != torch.int32 or x.shape[1] != 1:
            raise ValueError("a shuffle opened by its last permuter takes one int32 column")
        y = self._run(x, instance, inverse=False, mask=mask, bits=bits, carry=carry)
        return (y[:, 0] if y is not None else None), instance

    def inverse(self, y: torch.Tensor, instance: int, bits: int | None = None,
                carry: bool = False) -> torch.Tensor | None:
        """Shares of Y[p^-1] for shuffle ``instance``'s p; ``bits``: as :meth:`forward`'s.
        ``carry``: the result goes, used only linearly, into the next forward shuffle (run
        with ``carry``); the :func:`carrier` gets None, its share kept by the dealer
        (module docstring)."""
        out = self._run(y, instance, inverse=True, bits=bits, carry=carry)
        self._perms.pop(instance, None)
        return out

    def _perm(self, instance: int, rows: int) -> torch.Tensor:
        if instance not in self._perms:
            self._perms[instance] = permutation(self.ch.seed, instance, rows)
        return torch.from_numpy(self._perms[instance])

    def _run(self, x: torch.Tensor, instance: int, inverse: bool, mask=None, bits=None,
             carry: bool = False) -> torch.Tensor | None:
        """The passes; with ``mask`` (:meth:`forward_to_last`) the last pass leaves the other
        parties without a share (None) and the last permuter with X[p] - sum_{j != l} R_j;
        an inverse with ``carry`` leaves the carrier without one."""
        ch = self.ch
        x = x.reshape(x.shape[0], -1)
        rows, cols = x.shape
        dtype = np.int32 if x.dtype == torch.int32 else np.int64
        x_dtype = x.dtype
        width = _width(x.dtype, bits)
        self._ask(instance, inverse, rows, cols, width, mask, carry)
        carry_out = carry and inverse
        self._asked.pop((instance, inverse))
        low = LowBytes(width, x.element_size()) if narrow_width(width) else None  # narrow words on the wire
        like = low.like(rows * cols) if low is not None else x
        words = words_for([like])
        sending = []
        order = pass_order(ch.world, inverse)
        for step, i in enumerate(order):
            sid = _step_id(ch.world, step, inverse)
            sending_now = senders(ch.world, step, inverse)
            if ch.rank != i:
                if ch.rank in sending_now:
                    m = x - torch.from_numpy(pad(ch.seed, instance, sid, "A", (rows, cols), dtype))
                    m = pack([low.wire(m.reshape(-1)) if low is not None else m])
                    sending.append((m, p2p.isend(m, i, p2p.TAG_PAD)))
                if (mask is not None and step == len(order) - 1) or \
                        holds_nothing(ch.world, step, inverse, ch.rank, carry_out):
                    x = None  # opened by the last permuter, or kept by the dealer: no share kept
                    continue
                x = torch.from_numpy(pad(ch.seed, instance, sid, "B", (rows, cols), dtype))
            else:
                incoming = [p2p.irecv((words,), j, p2p.TAG_PAD) for j in sending_now]
                p = self._perm(instance, rows)
                if from_stream(ch.world, step, carry_out):  # the first pass's (or a carry's): from this party's stream
                    delta = torch.from_numpy(first_delta(ch.seed, instance, sid, (rows, cols), dtype))
                else:
                    delta = ch.receive(like)
                    if low is not None:
                        delta = low.summed(delta).view(rows, cols)
                x = torch.zeros((rows, cols), dtype=x_dtype) if x is None else x.clone()
                for t, work in incoming:
                    work.wait()
                    got = unpack(t, [like])[0]
                    if low is not None:
                        low.add_summed(x.view(-1), got)
                    else:
                        x += got
                x = permute_rows(x, p, inverse)
                x += delta
        p2p.wait_all(w for _, w in sending)
        return x
