r"""Correlated randomness from the dealer, for the radix sort's shuffles and products.

Who the dealer is: with ``--provider ttp`` the separate dealer process that
takes part in CrypTen's TTP mode (rank :math:`w`); with ``--provider tfp``
rank 0 (the server), which then must be trusted, as for CrypTen's own TFP
triples.  The dealer never holds a share of any data and opens nothing.

Set-up: the dealer draws a 128-bit seed per computing party (:mod:`secrets`)
and sends each party its own.  Afterwards both ends derive every pad,
permutation and triple share from that seed (:mod:`.prg`), and the dealer
sends only corrections, each to one party:

* a shuffle pass of permuter :math:`i`: :math:`\Delta_i` (:mod:`.shuffle`),
  in the shuffled matrix's ring (int64 or int32); for a shuffle opened by its
  last permuter, that pass's correction also takes off the other parties'
  shares of the mask (:func:`others_mask`);
* correlated randomness (:func:`triple_shares`): every party derives its
  shares from its stream, except that one party's (the batch's
  :func:`corrected_party`, rotating over the parties so that no party
  receives all the corrections) comes from the dealer:
  multiplication triples :math:`(a, b, c)`, :math:`c = ab`, in
  :math:`\mathbb{Z}_{2^{64}}` (``"mul"``) or :math:`\mathbb{Z}_{2^{32}}`
  (``"mul32"``), one corrected word per product; pairs of products with a
  shared first factor (``"pair"``, ``"pair32"``: :math:`(a, b_1, b_2, a b_1, a b_2)`,
  :func:`.beaver.paired_products`); AND triples; B2A bits; masks for equality tests
  (``"eq32"``: a random :math:`r \in \mathbb{Z}_{2^{32}}` shared additively and bit by
  bit, :func:`.circuits.eq_masked`); and
  the radix sort's one-hot randomness (``"onehot<d>"``: a random :math:`r`,
  the one-hot of :math:`r \bmod 2^d` and triples with it as first factor, of which
  only the products' sum is dealt, :math:`2^d` corrected words per row; among three parties its
  replicated form ``"rep<d>"``, below); and CrypTen's wrap randomness
  (``"wraps"``: a random :math:`r` and shares of the number of times the sum of its
  shares wraps around :math:`\mathbb{Z}_{2^{64}}`, for CrypTen's truncation among
  three or more parties, :mod:`secure_auc.mpc.crypten.safe`).

A party that needs a kind in :math:`\mathbb{Z}_{2^{32}}` only modulo :math:`2^b` (the
radix sort's one-hot randomness, modulo its window) narrows it
(:meth:`DealerChannel.narrow`): the dealer then sends the low :math:`\lceil b / 8 \rceil`
bytes of each corrected word.

*Replicated one-hot randomness* (``"rep<d>"``, three computing parties).
:math:`r = r^{(0)} + r^{(1)} + r^{(2)}` and
:math:`E = E^{(0)} + E^{(1)} + E^{(2)}` (the one-hot of :math:`r \bmod 2^d`, rows
:math:`t = 1, \dots, 2^d - 1`) in three components; party :math:`i` holds
components :math:`i` and :math:`i + 1` (mod 3), its additive share of :math:`r`
is :math:`r^{(i)}`.  Component :math:`c` comes from a *replication seed* that the
dealer sends to its two holders, parties :math:`c` and :math:`c - 1`, with their
own seeds; each batch one component's :math:`E` rows (:func:`rep_component`;
which one: :func:`rep_corrected`) are the dealer's correction, sent to both its holders
(:math:`2^d - 1` words per row to two parties; :math:`r` needs none).  A party
misses one component, so :math:`E` and :math:`r` are uniformly random to it.
With both factors replicated, the product of two such vectors is a local sum of
cross terms (:func:`secure_auc.mpc.sort.radix.replicated_sum_of_products`): the
radix sort's digit permutation then opens nothing (Araki et al. 2016).

Transport: at the start of a sort rank 0 asks the dealer, through CrypTen's
TTP channel, to start (:func:`serve`); the dealer sends the seeds, then takes
rank 0's requests (sizes and counters only, sent point-to-point without
waiting for an answer) and sends each correction point-to-point (:mod:`.p2p`)
to the one party it is for, in request order, until rank 0's stop.
"""

from __future__ import annotations

import numpy as np
import torch

from ..comm import backend, p2p
from .prg import new_seed, ring, ring_part, seed_to_tensor, tensor_to_seed
from .shuffle import CARRY, INVERSE, deltas, narrow_width, permutation
from .words import LowBytes, pack, unpack, words_for

__all__ = ["DealerChannel", "serve", "run_dealer", "ping_dealer", "tell_dealer_the_end", "triple_shares",
           "triple_correction"]


ONEHOT = {f"onehot{d}": d for d in (1, 2, 3, 4)}  # one-hot randomness for digits of d bits
REPLICATED = {f"rep{d}": d for d in (1, 2, 3, 4)}  # the same, replicated among three parties
PAIRS = ("pair", "pair32")  # two products with a shared first factor: (a, b1, b2, c1, c2)
KINDS32 = ("mul32", "pair32", "eq32", *ONEHOT, *REPLICATED)  # kinds in Z_2^32 (int32); the others are in Z_2^64
REPLICAS = 3  # computing parties for which the radix sort uses replicated randomness


def digit_kind(digit_bits: int, world: int) -> str:
    """The radix sort's randomness for ``digit_bits``-bit digits among ``world`` computing
    parties: replicated among three, Beaver's one-hot triples otherwise."""
    return f"rep{digit_bits}" if world == REPLICAS else f"onehot{digit_bits}"


def rep_component(rep_seed: bytes, batch: int, n: int, kind: str, skip=()) -> np.ndarray:
    """Component c of batch ``batch`` of ``"rep<d>"`` randomness from replication seed c,
    (V, n) int32: row 0 r^(c), rows 1..V-1 E^(c) (replaced by the correction in the
    batch's :func:`rep_corrected` component); ``skip``: rows not drawn (:func:`.prg.ring`)."""
    return ring(rep_seed, (kind, batch), (1 << REPLICATED[kind], n), np.int32, skip)


def rep_corrected(batch: int, rotate: bool = True) -> int:
    """The component whose E rows the dealer corrects in batch ``batch``: component 0 (sent to
    parties 0 and 2) in two of every three batches and component 1 (parties 1 and 0) in
    the third, or always 0 without ``rotate``.  In the radix sort's shuffles party 1 moves 3
    words per row and round more than party 0, and party 2 moves 2 more (party 1 permutes
    second in the forward shuffles and is the carrier of the inverse ones, :mod:`.shuffle`);
    with this split of the corrections' 3 words per row, parties 1 and 2 move 10 words per
    row and round and party 0 9, where rotating over the three components gave party 1 11."""
    return (1 if batch % REPLICAS == 1 else 0) if rotate else 0


def rep_holders(component: int) -> list[int]:
    """The parties that hold ``component``: party c (its own) and party c - 1 (its next)."""
    return [component, (component - 1) % REPLICAS]


def rep_correction(reps: list[bytes], batch: int, n: int, kind: str, component: int) -> np.ndarray:
    """E^(component) = onehot(r mod V) - the other two components' E, (V - 1, n) int32."""
    v = 1 << REPLICATED[kind]
    # the corrected component's E is never read: only its r is drawn
    comps = [rep_component(s, batch, n, kind, range(1, v) if c == component else ()) for c, s in enumerate(reps)]
    from ..kernels import enabled, rep_correction as compiled_rep_correction

    if enabled():
        return compiled_rep_correction(comps, component)  # one pass, bit-identical to the numpy below
    t = sum(c[0] for c in comps) & (v - 1)
    out = (t[None, :] == np.arange(1, v, dtype=t.dtype)[:, None]).astype(np.int32)
    for c, comp in enumerate(comps):
        if c != component:
            out -= comp[1:]
    return out


def rep_block(reps: tuple[bytes, bytes], batch: int, n: int, kind: str, skip=()) -> np.ndarray:
    """A party's block of ``"rep<d>"`` randomness before any correction, (2V - 1, n) int32:
    r^(i), then E^(i) (V - 1 rows) and E^(i + 1) (V - 1 rows), from its two replication
    seeds ``reps`` (components i and i + 1), each drawn where it goes.  ``skip``: rows of
    the block that the dealer's correction replaces (:func:`rep_rows`), not drawn and left unset."""
    v = 1 << REPLICATED[kind]
    skip = set(int(r) for r in skip)
    out = np.empty((2 * v - 1, n), dtype=np.int32)
    for seed, first, start in ((reps[0], 0, 0), (reps[1], v, 1)):  # block rows from `first`: stream rows from `start`
        rows = [r for r in range(first, first + v - start) if r not in skip]
        for lo, hi in _runs(rows):
            ring_part(seed, (kind, batch), (start + lo - first) * n, out[lo:hi].reshape(-1))
    return out


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """Runs of consecutive ``rows`` (increasing) as (lo, hi) ranges."""
    out: list[tuple[int, int]] = []
    for r in rows:
        if out and out[-1][1] == r:
            out[-1] = (out[-1][0], r + 1)
        else:
            out.append((r, r + 1))
    return out


def zero_share(reps: tuple[bytes, bytes], counter: int, n: int) -> np.ndarray:
    """A party's (n,) int32 share of the ``counter``-th sharing of zero among three, from its
    two replication seeds (components i, i + 1): F_i - F_(i+1), F_c the stream of seed c;
    the three shares add up to zero and each is uniformly random to the other parties."""
    own, nxt = (ring(s, ("zero", counter), (n,), np.int32) for s in reps)
    own -= nxt
    return own


def rep_rows(kind: str, rank: int, component: int) -> list[int] | None:
    """The rows of party ``rank``'s :func:`rep_block` that hold ``component``'s E (None: it
    does not hold that component)."""
    v = 1 << REPLICATED[kind]
    if component == rank:
        return list(range(1, v))
    if component == (rank + 1) % REPLICAS:
        return list(range(v, 2 * v - 1))
    return None


def _rows(kind: str) -> int:
    if kind in ONEHOT:
        return 2 << ONEHOT[kind]  # r, E and b (V - 1 rows each), c
    if kind in PAIRS:
        return 5
    return 2 if kind in ("b2a", "wraps", "eq32") else 3


def triple_shares(seed: bytes, batch: int, n: int, kind: str = "mul", skip=()) -> np.ndarray:
    """A party's shares of batch ``batch`` of ``n`` items of correlated randomness:
    ``"mul"``, ``"mul32"`` and ``"binary"`` (a_p, b_p, c_p), shape (3, n); ``"pair"``,
    ``"pair32"`` (a_p, b1_p, b2_p, c1_p, c2_p), shape (5, n); ``"eq32"`` (r_p, x_p),
    shape (2, n), r = sum_p r_p (mod 2^32) XOR-shared bit by bit as xor_p x_p; ``"b2a"``
    (y_p, x_p), shape (2, n), the bit's XOR share being bit 0 of x_p; ``"wraps"``
    (r_p, theta_p), shape (2, n);
    ``"onehot<d>"`` (V = 2^d), shape (2V, n): r_p, then E_p (V - 1 rows),
    b_p (V - 1 rows), c_p (one row: the sum of the V - 1 products).  int32 (Z_2^32) for ``"mul32"`` and
    ``"onehot<d>"``, int64 (Z_2^64) otherwise.  ``skip``: rows not drawn, left unset
    (:func:`.prg.ring`): the corrected party's :func:`corrected_rows`, which its correction
    replaces and the dealer never reads."""
    dtype = np.int32 if kind in KINDS32 else np.int64
    return ring(seed, (kind, batch), (_rows(kind), n), dtype, skip)


def corrected_rows(kind: str) -> list[int]:
    """The rows of :func:`triple_shares` that the dealer replaces at the corrected party."""
    if kind in ONEHOT:
        v = 1 << ONEHOT[kind]
        return list(range(1, v)) + [2 * v - 1]
    if kind in ("wraps", "eq32"):
        return [1]
    if kind in PAIRS:
        return [3, 4]
    return [0] if kind == "b2a" else [2]


def triple_correction(seeds: list[bytes], batch: int, n: int, kind: str = "mul", party: int = 0) -> np.ndarray:
    """Party ``party``'s corrected rows (:func:`corrected_rows`), replacing its own stream's:

    * ``"mul"``, ``"mul32"``: c_q = (sum a_p)(sum b_p) - sum_{p != q} c_p (mod 2^64, 2^32);
    * ``"pair"``, ``"pair32"``: the same for c1 = a b1 and c2 = a b2 (one a for both);
    * ``"binary"``: c_q = (xor a_p) AND (xor b_p) XOR (xor_{p != q} c_p), bitwise;
    * ``"eq32"``: x_q = (sum_p r_p) XOR (xor_{p != q} x_p), so the x_p share r's bits;
    * ``"b2a"``: for the random bit r = xor_p (x_p AND 1), y_q = r - sum_{p != q} y_p,
      so the y_p are additive shares of the same bit the x_p share by XOR;
    * ``"wraps"``: theta_q = W(r_0, ..., r_{w-1}) - sum_{p != q} theta_p, W counting the
      signed overflows (+1) and underflows (-1) of adding the r_p in rank order
      (CrypTen's ``count_wraps``, exact);
    * ``"onehot<d>"``: for r = sum_p r_p (mod 2^32) and t = r mod 2^d, E = the one-hot
      indicators [t = 1], ..., [t = V - 1] and c = sum_t E_t b_t (the radix sort needs
      only the sum of the V - 1 products), E_q and c_q.

    Returns shape (rows, n).
    """
    # the corrected party's corrected rows are never read below: not drawn
    shares = [triple_shares(s, batch, n, kind, corrected_rows(kind) if p == party else ()) for p, s in enumerate(seeds)]
    others = [s for p, s in enumerate(shares) if p != party]

    def rest(rows):
        return sum((s[rows] for s in others), np.zeros_like(shares[0][rows]))

    if kind in ("mul", "mul32"):
        a = sum(s[0] for s in shares)
        b = sum(s[1] for s in shares)
        return (a * b - rest(2))[None]
    if kind in PAIRS:
        a = sum(s[0] for s in shares)
        return np.stack([a * sum(s[i] for s in shares) - rest(i + 2) for i in (1, 2)])
    if kind == "binary":
        a = np.bitwise_xor.reduce([s[0] for s in shares])
        b = np.bitwise_xor.reduce([s[1] for s in shares])
        return ((a & b) ^ np.bitwise_xor.reduce([s[2] for s in others] + [np.zeros(n, dtype=np.int64)]))[None]
    if kind == "b2a":
        r = np.bitwise_xor.reduce([s[1] & 1 for s in shares])
        return (r - rest(0))[None]
    if kind == "eq32":
        return np.bitwise_xor.reduce([sum(s[0] for s in shares)] + [s[1] for s in others])[None]
    if kind == "wraps":
        return (count_wraps([s[0] for s in shares]) - rest(1))[None]
    from ..kernels import KERNEL_WORLDS, enabled, onehot_correction  # numba: only where the dealer deals

    if kind in ONEHOT and enabled() and len(shares) in KERNEL_WORLDS:
        return onehot_correction(shares, party)  # one pass, bit-identical to the numpy below
    if kind in ONEHOT:
        v = 1 << ONEHOT[kind]
        t = sum(s[0] for s in shares) & (v - 1)
        e = (t[None, :] == np.arange(1, v, dtype=t.dtype)[:, None]).astype(np.int32)
        b = sum(s[v : 2 * v - 1] for s in shares)
        out = np.empty((v, n), dtype=np.int32)
        out[: v - 1] = e - rest(slice(1, v))
        np.sum(e * b, axis=0, dtype=np.int32, out=out[v - 1])  # wraps mod 2^32
        out[v - 1] -= rest(2 * v - 1)
        return out
    raise ValueError(f"unknown kind of randomness {kind!r}")


def count_wraps(shares: list[np.ndarray]) -> np.ndarray:
    """Signed wrap-arounds of adding int64 ``shares`` in order: the integer sum minus the
    sum in Z_2^64 (as int64), divided by 2^64."""
    total = np.zeros_like(shares[0])
    prev = shares[0]
    for cur in shares[1:]:
        nxt = prev + cur  # wraps
        total -= (prev < 0) & (cur < 0) & (nxt >= 0)
        total += (prev >= 0) & (cur >= 0) & (nxt < 0)
        prev = nxt
    return total


def correction_like(kind: str, n: int) -> torch.Tensor:
    """An empty tensor shaped and typed like a correction (to size the receive)."""
    rows = (1 << REPLICATED[kind]) - 1 if kind in REPLICATED else len(corrected_rows(kind))
    return torch.empty((rows, n), dtype=torch.int32 if kind in KINDS32 else torch.int64)


def corrected_party(batch: int, world: int, rotate: bool = True, kind: str = "") -> int:
    """Whose shares of batch ``batch`` the dealer corrects: ``batch % world`` (the
    corrections' bytes spread over the parties), or rank 0.

    Among 2 parties the radix sort's one-hot batches (``"onehot<d>"``, one per round) go
    to rank 0 in 5 of every 8 (batch mod 8 not 1, 3 or 5): otherwise rank 0 would move one
    word per row and round fewer than rank 1 (it receives no correction in the carried
    inverse shuffles, :mod:`.shuffle`, while rank 1 receives the opened forward
    shuffle's), and a batch's correction is 2^d words; with 2-bit digits 3 of 8 batches to
    rank 1 even the two parties' bytes."""
    if not rotate:
        return 0
    if world == 2 and kind in ONEHOT:
        return 1 if batch % 8 in (1, 3, 5) else 0
    return batch % world


CORRECTED = {k: corrected_rows(k) for k in ("mul", "mul32", "binary", "b2a", "wraps", "eq32", *ONEHOT, *PAIRS)}


class _DealerState:
    """Every computing party's seed, and the permutations of the latest shuffles.
    ``rotate``: see :func:`corrected_party`."""

    def __init__(self, world: int, rotate: bool = True):
        self.world = world
        self.rotate = rotate
        self.seeds = [new_seed() for _ in range(world)]
        self.reps = [new_seed() for _ in range(world)] if world == REPLICAS else []
        self._perms: dict[tuple[int, int], np.ndarray] = {}
        self._carried: np.ndarray | None = None  # the carrier's share of a carried inverse shuffle (shuffle docstring)

    def _perm(self, instance: int, rows: int):
        def get(i: int) -> np.ndarray:
            key = (instance, i)
            if key not in self._perms:
                self._perms[key] = permutation(self.seeds[i], instance, rows)
                while len(self._perms) > 2 * self.world:  # keep the latest two shuffles
                    self._perms.pop(next(iter(self._perms)))
            return self._perms[key]
        return get

    def _keep(self, share: np.ndarray) -> None:
        self._carried = share

    def seed_message(self, party: int) -> torch.Tensor:
        """What the dealer sends party ``party`` at set-up: its seed, then (among three) the
        replication seeds of its two components."""
        own = [self.seeds[party]] + ([self.reps[party], self.reps[(party + 1) % REPLICAS]] if self.reps else [])
        return torch.cat([seed_to_tensor(x) for x in own])

    def messages(self, kind: str, args: tuple):
        """(party, tag, correction) for one request, in the order the parties expect them."""
        if kind == "shuffle":
            instance, rows, cols, flags, width, *mask = args
            inverse, carry = bool(flags & INVERSE), bool(flags & CARRY)
            dtype = np.int32 if width <= 4 else np.int64
            others = others_mask(self.seeds, rows, *mask, reps=self.reps) if mask and mask[0] else None
            narrow = narrow_width(width)  # the low bytes only (Shuffle.forward's bits)
            carried, self._carried = self._carried, None
            if (carried is not None) != (carry and not inverse) or \
                    (carried is not None and carried.shape != (rows, cols)):
                raise RuntimeError(f"shuffle {instance}: a carried share {'is' if carried is not None else 'is not'} "
                                   "waiting for it (the parties' requests are out of step)")
            keep = self._keep if carry and inverse else None
            for i, d in deltas(self.seeds, instance, rows, cols, inverse, self._perm(instance, rows), dtype, others,
                               carried, keep):
                yield i, p2p.TAG_DELTA, _on_wire(d, narrow)
        elif kind in CORRECTED:
            batch, n, *rest = args
            nbytes = rest[0] if rest else 0
            q = corrected_party(batch, self.world, self.rotate, kind)
            yield q, p2p.TAG_TRIPLE, _on_wire(triple_correction(self.seeds, batch, n, kind, q), nbytes)
        elif kind in REPLICATED:
            batch, n, *rest = args
            nbytes = rest[0] if rest else 0
            q = rep_corrected(batch, self.rotate)
            corr = _on_wire(rep_correction(self.reps, batch, n, kind, q), nbytes)
            for party in sorted(rep_holders(q)):
                yield party, p2p.TAG_TRIPLE, corr
        else:
            raise ValueError(f"unknown dealer request {kind!r}")


def _on_wire(correction: np.ndarray, nbytes: int) -> np.ndarray:
    """A correction as the dealer sends it: whole words, or (``nbytes``: int32 kinds the
    parties narrowed, :meth:`DealerChannel.narrow`, and narrow shuffles) the low bytes of
    each word."""
    if not nbytes:
        return correction
    return LowBytes(nbytes, correction.dtype.itemsize).wire(
        torch.from_numpy(np.ascontiguousarray(correction)).reshape(-1)).numpy()


def others_mask(seeds: list[bytes], rows: int, digit_bits: int, batch: int, shift: int,
                reps: list[bytes] | None = None) -> np.ndarray:
    """For a forward shuffle opened by its last permuter l (:meth:`.shuffle.Shuffle.forward_to_last`):
    sum_{j != l} 2^shift r_j (mod 2^32), r_j party j's share of r in batch ``batch`` of the
    radix sort's randomness (:func:`digit_kind`; never corrected): row 0 of its
    ``"onehot<digit_bits>"`` stream, or among three (``reps`` given) r^(j), row 0 of
    component j (:func:`rep_component`)."""
    last = len(seeds) - 1
    out = np.zeros(rows, dtype=np.int32)
    kind = digit_kind(digit_bits, len(seeds))
    for j, seed in enumerate(seeds):
        if j != last:
            key = reps[j] if kind in REPLICATED else seed
            out += ring(key, (kind, batch), (1, rows), np.int32)[0] << np.int32(shift)  # wraps
    return out


_KINDS = ("stop", "shuffle", "mul", "binary", "b2a", "mul32", *ONEHOT, "wraps", *REPLICATED, *PAIRS, "eq32")
REQUEST_WORDS = 9  # a request: its kind and up to 8 integer arguments


def _encode(kind: str, args) -> torch.Tensor:
    """A request as 9 int64: the kind and up to 8 integer arguments (all public sizes and counters)."""
    out = torch.zeros(REQUEST_WORDS, dtype=torch.long)
    out[0] = _KINDS.index(kind)
    out[1 : 1 + len(args)] = torch.tensor([int(a) for a in args], dtype=torch.long)
    return out


def _decode(t: torch.Tensor):
    kind = _KINDS[int(t[0])]
    vals = [int(x) for x in t[1:]]
    if kind == "shuffle":
        return kind, (vals[0], vals[1], vals[2], vals[3], vals[4], vals[5], vals[6], vals[7])
    if kind in CORRECTED or kind in REPLICATED:
        return kind, (vals[0], vals[1], vals[2])
    return kind, ()


def _worker(state: _DealerState) -> None:
    """The dealer's side of one sort: send every party its seed, then answer rank 0's
    requests in order, each correction to its party, until rank 0's stop.  Waits for a
    request at most the process group's timeout, like any party waiting for another."""
    pending: list = []
    for p in range(state.world):
        t = state.seed_message(p)
        pending.append((t, p2p.isend(t, p, p2p.TAG_SEED)))
    while True:
        kind, args = _decode(p2p.recv((REQUEST_WORDS,), 0, p2p.TAG_REQUEST))
        if kind == "stop":
            p2p.wait_all(w for _, w in pending)
            return
        for party, tag, d in state.messages(kind, args):
            t = pack([torch.from_numpy(d)])
            pending.append((t, p2p.isend(t, party, tag)))
            while len(pending) > 2 * state.world:  # bounded memory: a few corrections in flight
                pending.pop(0)[1].wait()


SETUP = "sa_setup"  # the request name rank 0 sends through CrypTen's TTP channel to start a sort
PING = "sa_ping"  # rank 0's keep-alive while a session waits between evaluations
ENDING = "sa_ending"  # rank 0 tells the dealer why the deployment ends, just before it stops it


def ping_dealer() -> None:
    """Rank 0: tell the dealer the run goes on (its wait for a request would time out)."""
    if backend.uses_ttp():
        backend.ttp_request(PING)


def tell_dealer_the_end(reason: str, shutdown: bool) -> None:
    """Rank 0: tell the dealer why the deployment ends (a reason every other party is told
    too), so that it stops naming the cause; ``shutdown``: an orderly end, not a fault."""
    if backend.uses_ttp():
        backend.ttp_request(ENDING, str(reason), bool(shutdown))


def serve() -> tuple[str, bool] | None:
    """The dealer process: CrypTen's ``TTPServer`` loop (triples for CrypTen's own
    protocols, asked by rank 0 through its TTP channel), plus the sorts: on the
    request :data:`SETUP` the dealer answers at once and then runs :func:`_worker`
    in the same thread until the sort's stop, so it is never idle on the TTP
    channel (whose wait would time out) while a long sort runs.  Returns on rank
    0's ``terminate``, with what rank 0 said of the end, (reason, shutdown)
    (:func:`tell_dealer_the_end`), or None; raises if a party goes away (CrypTen's loop
    would swallow that and exit as if all were well)."""
    base = backend.ttp_server_base()

    class DealerServer(base):
        def __init__(self):  # CrypTen's TTPServer.__init__, with the sort's hook and errors raised
            comm = backend.comm()
            self.ttp_group = comm.ttp_group
            self.comm_group = comm.ttp_comm_group
            self.device = "cpu"
            self.generators = None  # CrypTen's generators are never drawn from (see backend.ttp_release_parties)
            self.ending = None
            while True:
                message = backend.ttp_next_request(self.ttp_group)  # JSON only: never unpickled
                if message == backend.TERMINATE:
                    return
                if message["function"] == SETUP:
                    result, state = torch.zeros(1, dtype=torch.long), _DealerState(comm.get_world_size())
                elif message["function"] == PING:
                    result, state = torch.zeros(1, dtype=torch.long), None
                elif message["function"] == ENDING:
                    self.ending = (str(message["args"][0]), bool(message["args"][1]))
                    result, state = torch.zeros(1, dtype=torch.long), None
                else:  # CrypTen's own requests (its triples) are never made: the project's dealer deals them
                    raise backend.ObjectRefused(f"the server asked the dealer for {message['function'][:40]!r}, "
                                                "which it does not deal")
                backend.ttp_answer(result, self.ttp_group, self.comm_group)
                if state is not None:
                    _worker(state)

    return DealerServer().ending


def run_dealer() -> tuple[str, bool] | None:
    """The dealer process's whole life: :func:`serve` until the server's shutdown message
    (CrypTen's warnings silenced).  Returns what rank 0 said of the end, (reason, shutdown)
    (:func:`tell_dealer_the_end`), or None."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return serve()


class DealerChannel:
    """A computing party's end: its seed, requests (made by rank 0) and corrections."""

    def __init__(self):
        self.rank, self.world = backend.rank(), backend.world_size()
        self.ttp = backend.uses_ttp()
        self.dealer = backend.ttp_rank() if self.ttp else 0
        self.rotate = self.ttp  # with TFP rank 0 is the dealer and keeps every correction
        self._state: _DealerState | None = None
        self._own: dict[int, list[torch.Tensor]] = {p2p.TAG_DELTA: [], p2p.TAG_TRIPLE: []}
        self._sending: list = []
        self._batches: dict[str, int] = {}
        self._plan: dict[str, list[int]] = {}  # sizes of the next batches of each kind (prefetched with TTP)
        self._ahead: dict[str, int] = {}  # batches of each kind asked for before they are used
        self._prefetched: dict[str, list[tuple]] = {}  # kind -> [(batch, n, tensor, work, like)], in batch order
        self._zeros = 0  # sharings of zero drawn (zero_share)
        self._narrow: dict[str, int] = {}  # kind -> bytes per corrected word on the wire (narrow)
        words = 2 * (3 if self.world == REPLICAS else 1)
        if self.ttp:
            if self.rank == 0:
                self._ttp(SETUP)
            got = p2p.recv((words,), self.dealer, p2p.TAG_SEED)
        elif self.rank == 0:
            self._state = _DealerState(self.world, rotate=False)
            for p in range(1, self.world):
                t = self._state.seed_message(p)
                self._sending.append((t, p2p.isend(t, p, p2p.TAG_SEED)))
            got = self._state.seed_message(0)
        else:
            got = p2p.recv((words,), 0, p2p.TAG_SEED)
        self.seed = tensor_to_seed(got[:2])
        self.reps = tuple(tensor_to_seed(got[k : k + 2]) for k in range(2, words, 2))  # components rank, rank + 1

    @staticmethod
    def _ttp(name: str, *args):
        backend.ttp_request(name, *args)

    def request(self, kind: str, *args) -> None:
        """Ask for the corrections of one shuffle or one batch of triples (every party calls it;
        only rank 0 sends the request)."""
        if self.rank != 0:
            return
        if self.ttp:
            t = _encode(kind, args)
            self._sending.append((t, p2p.isend(t, self.dealer, p2p.TAG_REQUEST)))
            return
        # earlier corrections still in flight stay referenced (a shuffle prepared ahead of its use
        # is received only when it runs: waiting for it here would stop rank 0 before the others)
        self._sending = [(t, w) for t, w in self._sending if not w.is_completed()]
        for party, tag, d in self._state.messages(kind, args):
            if party == 0:
                self._own[tag].append(torch.from_numpy(d))
            else:
                t = pack([torch.from_numpy(d)])
                self._sending.append((t, p2p.isend(t, party, tag)))

    def receive(self, like: torch.Tensor, tag: int = p2p.TAG_DELTA) -> torch.Tensor:
        """The next correction of this kind for this party (in request order), shaped and
        typed like ``like``."""
        if not self.ttp and self.rank == 0:
            return self._own[tag].pop(0).view(like.shape)
        return unpack(p2p.recv((words_for([like]),), self.dealer, tag), [like])[0]

    def plan_triples(self, sizes: list[int], kind: str = "mul", ahead: int = 1, now: bool = False) -> None:
        """Announce the sizes of the next batches of ``kind``, so that each is asked for
        while the ``ahead`` before it are in use (the dealer computes during the parties'
        work; with ``ahead`` > 1 a batch's corrections are on their way for longer than the
        round of messages that uses the batch before it).  ``now``: ask for the first
        ``ahead`` at once (none of ``kind`` may be asked for already)."""
        self._plan[kind] = [int(n) for n in sizes]
        self._ahead[kind] = max(1, int(ahead))
        if now and self.ttp and not self._prefetched.get(kind):
            batch = self._batches.get(kind, 0)
            for nb, n in list(zip(range(batch, batch + len(sizes)), self._plan[kind]))[: self._ahead[kind]]:
                self._ask_ahead(kind, nb, n)

    def narrow(self, kind: str, bits: int) -> None:
        """The corrections of ``kind`` (an int32 kind) are needed modulo 2^bits only: from now
        on the dealer sends the low ceil(bits / 8) bytes of each corrected word
        (:class:`.words.LowBytes`).  Every party calls it, before the kind's first request."""
        nbytes = -(-bits // 8)
        nbytes = nbytes if kind in KINDS32 and nbytes < 4 else 0
        if self._batches.get(kind) or self._prefetched.get(kind):
            if self._narrow.get(kind, 0) != nbytes:
                raise RuntimeError(f"{kind} randomness already asked for with other corrections' widths")
            return
        self._narrow[kind] = nbytes

    def _ask(self, kind: str, batch: int, n: int) -> None:
        self.request(kind, batch, n, self._narrow.get(kind, 0))

    def _wire(self, kind: str, n: int) -> tuple[torch.Tensor, tuple, int]:
        """What a correction of ``kind`` looks like on the wire: (like, its shape as a
        correction, bytes per word if narrow else 0)."""
        like = correction_like(kind, n)
        nbytes = self._narrow.get(kind, 0)
        if nbytes:
            return LowBytes(nbytes).like(like.numel()), tuple(like.shape), nbytes
        return like, tuple(like.shape), 0

    @staticmethod
    def _read(got: torch.Tensor, shape: tuple, nbytes: int) -> torch.Tensor:
        return LowBytes(nbytes).summed(got).view(shape) if nbytes else got

    def _ask_ahead(self, kind: str, batch: int, n: int) -> None:
        """Ask for batch ``batch`` (``n`` items) of ``kind`` before it is used, and post this
        party's receive of its corrections if they are for it."""
        self._ask(kind, batch, n)
        asked = self._prefetched.setdefault(kind, [])
        if self._corrected_rows(kind, batch) is not None:
            wire = self._wire(kind, n)
            t, work = p2p.irecv((words_for([wire[0]]),), self.dealer, p2p.TAG_TRIPLE)
            asked.append((batch, n, t, work, wire))
        else:
            asked.append((batch, n, None, None, None))

    def _wait(self, pre) -> torch.Tensor | None:
        _, _, t, work, wire = pre
        if work is None:
            return None
        work.wait()
        like, shape, nbytes = wire
        return self._read(unpack(t, [like])[0], shape, nbytes)

    def shares(self, kind: str, n: int) -> list[torch.Tensor]:
        """This party's shares of ``n`` fresh items of correlated randomness of ``kind``
        (the rows of :func:`triple_shares`, corrected if this party is the batch's
        :func:`corrected_party`)."""
        return list(self.block(kind, n))

    def block(self, kind: str, n: int) -> torch.Tensor:
        """:meth:`shares` as one (rows, n) tensor."""
        batch = self._batches.get(kind, 0)
        self._batches[kind] = batch + 1
        plan = self._plan.get(kind, [])
        if plan and plan[0] == n:
            plan.pop(0)
        else:
            self._plan[kind] = plan = []
        rows = self._corrected_rows(kind, batch)
        skip = rows if rows is not None else ()  # rows the correction replaces: not drawn
        out = torch.from_numpy(rep_block(self.reps, batch, n, kind, skip) if kind in REPLICATED
                               else triple_shares(self.seed, batch, n, kind, skip))
        asked = self._prefetched.setdefault(kind, [])
        if asked and asked[0][:2] == (batch, n):
            corr = self._wait(asked.pop(0))
        else:
            for pre in asked:  # asked for batches of other sizes: drop them
                self._wait(pre)
            asked.clear()
            self._ask(kind, batch, n)
            corr = None
            if rows is not None:
                like, shape, nbytes = self._wire(kind, n)
                corr = self._read(self.receive(like, p2p.TAG_TRIPLE), shape, nbytes)
        if corr is not None:
            out[rows] = corr
        if self.ttp:  # the next planned batches not asked for yet, up to ``ahead`` in all
            for nb, nxt in list(zip(range(batch + 1, batch + 1 + len(plan)), plan))[len(asked) : self._ahead.get(kind, 1)]:
                self._ask_ahead(kind, nb, nxt)
        return out

    def _corrected_rows(self, kind: str, batch: int) -> list[int] | None:
        """The rows of this party's block of batch ``batch`` that the dealer's correction
        replaces, or None if it gets none."""
        if kind in REPLICATED:
            return rep_rows(kind, self.rank, rep_corrected(batch, self.rotate))
        return CORRECTED[kind] if self.rank == corrected_party(batch, self.world, self.rotate, kind) else None

    def zero_share(self, n: int) -> torch.Tensor:
        """Among three parties, this party's (n,) int32 share of a fresh additive sharing of
        zero with no message: F(rep_i) - F(rep_(i+1)) from its two replication seeds (every
        F(rep_c) is added by one party and taken off by another)."""
        self._zeros += 1
        return torch.from_numpy(zero_share(self.reps, self._zeros, n))

    def triples(self, n: int) -> list[torch.Tensor]:
        """This party's shares [a, b, c] of ``n`` fresh multiplication triples (Z_2^64)."""
        return self.shares("mul", n)

    def correlated(self, kind: str, n: int) -> list[torch.Tensor]:
        """This party's shares of ``n`` fresh items of ``kind`` (:meth:`shares`)."""
        return self.shares(kind, n)

    def close(self) -> None:
        """Wait for everything in flight (a prefetched batch nobody used, sends)."""
        for asked in self._prefetched.values():
            for pre in asked:
                self._wait(pre)
        self._prefetched = {}
        if self.ttp and self.rank == 0:
            t = _encode("stop", ())
            self._sending.append((t, p2p.isend(t, self.dealer, p2p.TAG_REQUEST)))
        p2p.wait_all(w for _, w in self._sending)
        self._sending = []
