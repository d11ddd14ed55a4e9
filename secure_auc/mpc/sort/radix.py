r"""Oblivious radix sort by composing secret permutations.

The LSD radix sort of Hamada et al. (2014) in the form of Asharov et al.
(2022, "sort via composition"): the keys' digits are sorted one at a time,
least significant first, each time with a *stable* sort, and the sort so far
is kept as a secret permutation.  Nothing is compared; the only openings are
secret permutations composed with fresh secret shuffles, which are uniformly
random permutations whatever the keys (:mod:`secure_auc.mpc.primitives.shuffle`),
and values masked by fresh dealer randomness.

Ring and window.  Everything in the rounds is additively shared in
:math:`\mathbb{Z}_{2^{32}}` (int32 words): permutations, counts and
destinations are below :math:`M \le 2^k`, :math:`k = \lceil \log_2 M \rceil`.
A round only ever needs values modulo :math:`2^q`, :math:`q = k + d` (the
*window*): every opening sends the low :math:`\lceil q / 8 \rceil` bytes of
each share (:func:`.primitives.opening.open_all` with ``bits``; 3 bytes up to
:math:`M = 2^{22}` with 2-bit digits), and so does every message and dealer
correction of the rounds' shuffles (:meth:`.primitives.shuffle.Shuffle.forward`'s
``bits``), so the shares' higher bits, and the values' (which may then be
wrong), never leave a party.  The keys carried to
sorted order stay in :math:`\mathbb{Z}_{2^{64}}` (the mid-rank step compares
them).

Permutations are destination vectors: :math:`\rho` sends row :math:`j` to
position :math:`\rho_j`, :math:`\mathrm{apply}(\rho, x)_{\rho_j} = x_j`.

*Digits.*  The source of row :math:`j` shares its digit value
:math:`v_j \in \{0, \dots, V - 1\}`, :math:`V = 2^d` (one word; sharing is
free, :class:`.primitives.inputs.SourceSharing`).  The dealer deals, per row,
a random :math:`r` (shares in :math:`\mathbb{Z}_{2^{32}}`), the shares of the
one-hot :math:`E_t = [r \bmod V = t]` (:math:`t \ge 1`;
:math:`E_0 = 1 - \sum_{t \ge 1} E_t`), random :math:`b_t` and the sum of the
products :math:`c = \sum_{t \ge 1} E_t b_t` (kind ``"onehot<d>"``,
:mod:`.primitives.dealer`).  The parties open
:math:`u = (v - r) \bmod V` (uniformly random: :math:`r \bmod V` is), and then
:math:`I_v = [v_j = v] = E_{(v - u) \bmod V}`, a local rotation.

*Digit permutation* (one opening).  With the inclusive prefix counts
:math:`C_{j,v} = \sum_{i \le j} I_{i,v}` (local), the totals
:math:`T_v = C_{M-1,v}` and :math:`O_v = \sum_{u < v} T_u`, the stable sort
by the digit sends row :math:`j` to

.. math::

    \sigma_j = \sum_v I_{j,v}\,(O_v + C_{j,v} - 1)
             = \sum_t E_t\,D'_t = D'_0 + \sum_{t \ge 1} E_t\,(D'_t - D'_0),
    \qquad D'_t = O_{(t+u) \bmod V} + C_{j,(t+u) \bmod V} - 1

(:math:`\sum_t E_t = 1`).  Each product has the dealer's :math:`E_t` as its
first factor, so Beaver's protocol opens only
:math:`f_t = (D'_t - D'_0) - b_t`, and :math:`[\sum_t E_t x_t] = \sum_t f_t [E_t] + [c]`:
:math:`V - 1` opened words per row (a product of two shared values opens two),
and the sum alone needs only the products' sum :math:`c`, one word.

*Among three parties* the digit permutation opens nothing: the dealer's
:math:`r` and :math:`E` are replicated (kind ``"rep<d>"``, party :math:`i`
holds components :math:`i` and :math:`i + 1` of three,
:mod:`.primitives.dealer`), every step from :math:`E` to the bases is linear,
so each component gives its own :math:`I^{(c)}` and :math:`B^{(c)}`, and
:math:`\sigma = B_0 + \sum_{v \ge 1} I_v (B_v - B_0)` is a sum of products of
replicated values: each party adds its three cross terms locally
(:func:`replicated_digit_permutation`, :func:`replicated_sum_of_products`;
Araki et al. 2016) and a fresh sharing of zero.  The result is an additive
sharing like the one-opening form's, with :math:`V - 1` fewer opened words per
row and no triples; the dealer sends :math:`V - 1` corrected words per row to
two parties instead of :math:`V` to one.

*Round* :math:`l \ge 1`, with the sort so far :math:`\rho` (shared):

1. Shuffle the one word :math:`\rho + 2^k v` with a fresh secret :math:`S`
   (rows :math:`X \mapsto X[s]`) and open the window of
   :math:`\rho[s] + 2^k (v[s] - r)`: its low :math:`k` bits are
   :math:`\tau = \rho[s]` and the next :math:`d` are :math:`u` (one opening;
   :math:`\rho < 2^k` and :math:`v < 2^d` exactly in the window, so nothing
   carries between the two).  The shuffle's last permuter opens it: the
   dealer's correction for the last pass takes off the other parties' shares
   of :math:`2^k r`, so that it alone holds the masked word and sends its
   window to the others (:meth:`.primitives.shuffle.Shuffle.forward_to_last`):
   one message round, as an ``all_gather``, with half its bytes among 2
   parties and fewer than a reduce-scatter's among more.
2. In shuffled order, :math:`I_v, v \ge 1` from :math:`E` and :math:`u`;
   scatter them to the order sorted so far (:math:`b[\tau_i] = I_i`), count
   there, and gather the bases back; the bases of :math:`v = 0` follow from
   :math:`\sum_v I_v = 1` (:func:`shuffled_bases`): :math:`D'` in shuffled order.
3. :math:`w = \sigma[\tau] = (\sigma \circ \rho)[s]` directly in shuffled
   order (one opening), so :math:`\rho \leftarrow S^{-1}(w)` (an inverse
   shuffle of one column; but for the last round's, party 1's share of
   :math:`\rho` stays with the dealer, who adds it into the next round's
   shuffle: ``carry`` of :meth:`.primitives.shuffle.Shuffle.inverse`).

Round 0 needs no shuffle (:math:`\rho` is the identity).  After the last
round the keys are moved to sorted order the same way (shuffle
:math:`[\rho \mid \text{keys}]`, open :math:`\tau_F`, scatter), and
:meth:`RadixSort.unsort` puts any secret vector :math:`z` in sorted order
back in input order: :math:`w = z[\tau_F] = y[s_F]`, :math:`y = S_F^{-1}(w)`.

Each opened :math:`\tau = \rho \circ s` uses its own shuffle, so the opened
permutations are independent and uniformly random: together they reveal
nothing about the keys, not even ties (ties are kept in input order by the
stable digit sorts; equal keys are never compared).

Cost per round for :math:`M` rows: one shuffle of one int32 column, one
inverse shuffle of one, one opening of :math:`M` window values and, except
among three, one of :math:`(V - 1) M`; the dealer's :math:`V` corrected
words per row to one party (among three, :math:`V - 1` to two; spread over
the parties, :func:`.primitives.dealer.corrected_party`, :func:`.primitives.dealer.rep_corrected`);
:math:`\lceil 32\,\text{limbs} / d \rceil` rounds.  Time grows as :math:`M`
per round.

A round's local work (steps 2 and 3 up to the opening, and sigma after it; the split of the
opened window) runs in the compiled kernels of :mod:`secure_auc.mpc.kernels`, which give
the same words as the functions below (kept as the reference, and run instead with
``SECURE_AUC_KERNELS=numpy``).

Examples
--------
The stable sort destinations of digits, from one party's shares (one party:
its shares are the values); only :math:`I_v, v \ge 1` is given:

>>> import torch
>>> from secure_auc.mpc.sort.radix import shuffled_bases
>>> ind = torch.tensor([[1, 0, 1, 0]], dtype=torch.int32)  # I_1 of the digits 1, 0, 1, 0
>>> shuffled_bases(ind, None, rank=0)  # row v: O_v + C_v - 1, the destination if the digit is v
tensor([[-1,  0,  0,  1],
        [ 2,  2,  3,  3]], dtype=torch.int32)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..kernels import beaver_round_bases, beaver_sum, replicated_round, split_window
from ..kernels import enabled as kernels_enabled, inverse_permutation as compiled_inverse_permutation
from ..comm import backend
from ..primitives.dealer import ONEHOT, REPLICAS, DealerChannel, digit_kind
from ..primitives.randomness import Randomness
from ..primitives.opening import open_all, open_from
from ..primitives.shuffle import Shuffle
from .digits import DIGIT_BITS

__all__ = ["RadixSort", "digit_permutation", "replicated_digit_permutation", "replicated_sum_of_products",
           "onehot_rows", "onehot_index", "shuffled_bases", "sorted_bases", "scatter_rows", "inverse_permutation",
           "rotate_rows"]

I32 = torch.int32


def onehot_index(u: torch.Tensor, v: int) -> torch.Tensor:
    """(V - 1, M) int64: row v - 1 holds (v - u) mod V, where :func:`onehot_rows` finds I_v."""
    out = torch.empty((v - 1, u.numel()), dtype=torch.int64)
    neg = torch.neg(u.long(), out=out[0])  # u of any integer dtype
    for t in range(v - 1, 0, -1):  # row by row, in place: the broadcast expression takes about 3 times as long
        torch.add(neg, t, out=out[t - 1])
        out[t - 1] &= v - 1  # mod V (V = 2^d)
    return out


def onehot_rows(e: torch.Tensor, u: torch.Tensor, rank: int, index: torch.Tensor | None = None) -> torch.Tensor:
    """Shares (V - 1, M) of the indicators I_v = [digit = v], v = 1..V-1, from the shares
    (V - 1, M) of E_t = [r mod V = t], t = 1..V-1, and the opened u = (digit - r) mod V:
    I_v = E_{(v - u) mod V}, with E_0 = 1 - sum_t E_t.  (I_0 = 1 - sum_v I_v is never
    formed: :func:`shuffled_bases` gets its row by linearity.)  ``index``:
    :func:`onehot_index` of ``u``, if already computed (one gather for every row)."""
    v = e.shape[0] + 1
    full = torch.empty((v, e.shape[1]), dtype=e.dtype)
    full[1:] = e
    torch.sum(e, dim=0, dtype=e.dtype, out=full[0])
    full[0].neg_()
    if rank == 0:
        full[0] += 1
    index = onehot_index(u, v) if index is None else index
    out = torch.empty_like(e)
    for t in range(v - 1):  # row by row: a (V - 1, M) gather is slower
        torch.gather(full, 0, index[t : t + 1], out=out[t : t + 1])
    return out


def inverse_permutation(tau: torch.Tensor) -> torch.Tensor:
    """tau^-1 as an int64 tensor (one numpy scatter: faster than torch's here), checking that
    the opened tau is a permutation (a repeated destination leaves a slot unwritten)."""
    m = tau.numel()
    t = tau.numpy()
    out = np.full(m, -1, dtype=np.int64)
    if m and (int(t.min()) < 0 or int(t.max()) >= m):
        _not_a_permutation()
    out[t] = np.arange(m, dtype=np.int64)
    if m and int(out.min()) < 0:
        _not_a_permutation()
    return torch.from_numpy(out)


def _bases_rows(ind: torch.Tensor, rank: int, out: torch.Tensor) -> torch.Tensor:
    """Rows v >= 1 of the bases in the order sorted so far, B_v = O_v + C_v - 1, into
    ``out`` (V - 1, M), from the indicators I_1..I_{V-1} in that order; returns the offsets
    O_v (shares)."""
    m = ind.shape[1]
    r0 = 1 if rank == 0 else 0
    torch.cumsum(ind, dim=1, dtype=ind.dtype, out=out)  # C_v (wraps mod 2^32: shares stay exact)
    totals = out[:, -1].clone()
    t0 = r0 * m - totals.sum(dtype=ind.dtype)
    offsets = torch.cumsum(totals, dim=0, dtype=ind.dtype) - totals + t0  # O_v = T_0 + ... + T_{v-1}
    out += (offsets - r0).unsqueeze(1)
    return offsets


def _base_zero(out: torch.Tensor, offsets: torch.Tensor, rank: int, positions: torch.Tensor | None) -> None:
    """Row 0 of the bases from rows 1..V-1 (module docstring of :func:`shuffled_bases`):
    B_0 = position + sum_{v >= 1} (O_v - B_v) - (V - 1), the public terms at rank 0 only;
    ``positions``: each row's position in the order sorted so far (None: 0..M-1)."""
    r0 = 1 if rank == 0 else 0
    torch.sum(out[1:], dim=0, dtype=out.dtype, out=out[0])
    out[0].neg_()
    out[0] += offsets.sum(dtype=out.dtype) - r0 * (out.shape[0] - 1)
    if r0:
        out[0] += positions.to(out.dtype) if positions is not None else torch.arange(out.shape[1], dtype=out.dtype)


def scatter_rows(ind: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """out[:, tau] = ind, as a gather by tau^-1 (:func:`inverse_permutation`), row by row
    (several times faster than at once)."""
    out = torch.empty_like(ind)
    for i in range(ind.shape[0]):
        torch.index_select(ind[i], 0, inverse, out=out[i])
    return out


def sorted_bases(ind: torch.Tensor, rank: int) -> torch.Tensor:
    """Shares (V, M) of the bases B_v = O_v + C_v - 1 (v = 0..V-1) in the order sorted so
    far, from the shares (V - 1, M) of I_1..I_{V-1} in that order (not overwritten)."""
    out = torch.empty((ind.shape[0] + 1, ind.shape[1]), dtype=ind.dtype)
    offsets = _bases_rows(ind, rank, out[1:])
    _base_zero(out, offsets, rank, None)
    return out


def shuffled_bases(ind: torch.Tensor, tau: torch.Tensor | None, rank: int,
                   inverse: torch.Tensor | None = None) -> torch.Tensor:
    """Shares (V, M), in shuffled order, of the destinations B_v = O_v + C_{j,v} - 1 that
    row j of the order sorted so far gets if its digit is v, from the shares (V - 1, M)
    of I_1..I_{V-1} in shuffled order (``ind``) and the opened ``tau`` (None: the
    identity, round 0).

    Rows v >= 1 are scattered to the order sorted so far, counted there and gathered
    back.  Row 0 needs no scatter, count or gather: sum_v I_v = 1 gives
    C_{j,0} = j + 1 - sum_{v >= 1} C_{j,v} and T_0 = M - sum_{v >= 1} T_v, so in
    shuffled order B_0 = tau + sum_{v >= 1} (O_v - B_v) - (V - 1), the public terms
    added by rank 0 only.  The scatter is a gather by tau^-1 (``inverse``, if already
    computed: :func:`inverse_permutation`)."""
    if tau is None:
        return sorted_bases(ind, rank)
    x = scatter_rows(ind, inverse_permutation(tau) if inverse is None else inverse)
    offsets = _bases_rows(x, rank, x)
    out = torch.empty((x.shape[0] + 1, x.shape[1]), dtype=x.dtype)
    for i in range(x.shape[0]):
        torch.index_select(x[i], 0, tau, out=out[i + 1])
    _base_zero(out, offsets, rank, tau)
    return out


def rotate_rows(base: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """D'_t = base_{(t + u) mod V} per column (the bases seen from r's one-hot)."""
    v = base.shape[0]
    out = torch.empty_like(base)
    u = u.long()  # any integer dtype (no copy if int64)
    index = torch.empty((1, u.numel()), dtype=torch.int64)
    for t in range(v):  # row by row, the index in place: about 4 times faster than one (V, M) gather
        torch.add(u, t, out=index[0])
        index &= v - 1
        torch.gather(base, 0, index, out=out[t : t + 1])
    return out


def digit_permutation(d_rot: torch.Tensor, e: torch.Tensor, c: torch.Tensor, f: torch.Tensor, rank: int) -> torch.Tensor:
    """Shares of sigma = sum_t E_t D'_t - 1 = D'_0 + sum_{t >= 1} E_t (D'_t - D'_0) (the
    bases already hold the -1 at rank 0), the products by Beaver with the dealer's
    E_t, b_t and c = sum_t E_t b_t (one row): f_t = (D'_t - D'_0) - b_t is opened, and
    [sum_t E_t x_t] = sum_t f_t [E_t] + [c]."""
    out = d_rot[0].clone()
    out += (e * f).sum(dim=0, dtype=out.dtype)
    out += c.reshape(-1)
    return out


def replicated_sum_of_products(x: tuple[torch.Tensor, torch.Tensor], y: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    r"""Party i's additive share of :math:`\sum_{\text{rows}} x y` (elementwise per column)
    from replicated shares: ``x = (x^(i), x^(i+1))``, the two components of 3 that it
    holds, likewise ``y``.  :math:`z_i = x^{(i)} y^{(i)} + x^{(i)} y^{(i+1)} + x^{(i+1)} y^{(i)}`:
    the three parties' terms cover the 9 cross products once each, so
    :math:`z_0 + z_1 + z_2 = x y`, with no message."""
    own, nxt = x
    out = torch.zeros(own.shape[1:], dtype=own.dtype)
    tmp = torch.empty_like(out)
    for row in range(own.shape[0]):  # row by row: one row of temporaries, not three
        torch.add(y[0][row], y[1][row], out=tmp)
        tmp *= own[row]
        out += tmp
        torch.mul(nxt[row], y[0][row], out=tmp)
        out += tmp
    return out


def replicated_digit_permutation(e: tuple[torch.Tensor, torch.Tensor], u: torch.Tensor, tau: torch.Tensor | None,
                                 rank: int, zero: torch.Tensor, inverse: torch.Tensor | None = None) -> torch.Tensor:
    r"""Among three parties, party ``rank``'s additive share of sigma in shuffled order
    (:math:`\sigma[\tau]`, module docstring) from its two components
    ``e = (E^(rank), E^(rank+1))`` of the replicated one-hot
    (:func:`.primitives.dealer.rep_component`), with no message: every step to the
    bases is linear, so each component gives the indicators :math:`I^{(c)}` and the
    bases :math:`B^{(c)}` (:func:`onehot_rows`, :func:`shuffled_bases`, public terms in
    component 0), and

    .. math::

        \sigma = \sum_v I_v B_v = B_0 + \sum_{v \ge 1} I_v (B_v - B_0),

    the products by :func:`replicated_sum_of_products`, all in the order sorted so far
    (the indicators scattered there, :func:`sorted_bases`), then one gather gives
    :math:`\sigma[\tau]`.  ``zero``: this party's share of
    a fresh sharing of zero (:meth:`.primitives.dealer.DealerChannel.zero_share`), so the
    result is a fresh additive sharing.  ``inverse``: tau^-1, if already computed."""
    comps = (rank, (rank + 1) % REPLICAS)
    ind, diff, first = [], [], None
    index = onehot_index(u, e[0].shape[0] + 1)
    if tau is not None and inverse is None:
        inverse = inverse_permutation(tau)
    shuffled = [onehot_rows(part, u, c, index) for part, c in zip(e, comps)]
    del index  # (V - 1, M) int64: freed before the bases and products
    for c in comps:
        rows = shuffled.pop(0)
        if tau is not None:
            rows = scatter_rows(rows, inverse)  # to the order sorted so far
        base = sorted_bases(rows, c)
        ind.append(rows)
        base[1:] -= base[0]
        diff.append(base[1:])
        if first is None:
            first = base[0]
    out = replicated_sum_of_products(ind, diff)  # sigma, in the order sorted so far
    out += first
    if tau is not None:
        out = out.index_select(0, tau)  # sigma[tau]: one gather back
    out += zero
    return out


def _not_a_permutation() -> None:
    raise RuntimeError("the shuffle opened something that is not a permutation: the parties' randomness is "
                       "out of step (different numpy versions on different machines?)")


@dataclass
class RadixSort:
    """Oblivious LSD radix sort of secret keys, given as digits shared round by round.

    ``digit_bits``: 1 to 4 bits per round (more: fewer rounds and shuffles,
    :math:`2^d - 1` products per row).
    """

    digit_bits: int = DIGIT_BITS
    channel: DealerChannel | None = field(default=None, repr=False)  # the dealer's, if already set up
    randomness: Randomness | None = field(default=None, repr=False)
    _shuffle: Shuffle | None = field(default=None, repr=False)
    _final: tuple | None = field(default=None, repr=False)

    def rounds(self, key_bits: int) -> int:
        return -(-key_bits // self.digit_bits)

    def window(self, m: int) -> int:
        """The bits every opening of a round needs for ``m`` rows (module docstring)."""
        return max(1, (m - 1).bit_length()) + self.digit_bits

    def sort(self, digits, key_bits: int, keys: torch.Tensor, progress=None, then=None,
             carry_bits: int | None = None) -> torch.Tensor:
        """Sort the rows of ``keys`` (an (M, limbs) int64 share matrix, carried along).

        ``digits(l)`` returns the (M,) shares (int64 or int32; only the value mod
        2^digit_bits counts) of digit ``l`` (bits ``l*digit_bits ..``, least
        significant digit first) of every row's key; the key has ``key_bits`` bits.
        Returns the shares of the keys in ascending order (ties in input order);
        keeps what :meth:`unsort` needs.  ``progress(round, rounds)`` after each round.
        ``then(randomness)``: called once the sort has asked the dealer for all it needs
        (before its last round), to ask for what follows the sort.  ``carry_bits``: the
        sorted keys are needed modulo 2^carry_bits only, so the last shuffle carries the
        low bytes of each word, enough for them and for the positions (5 bytes for
        33 bits, :func:`.primitives.shuffle.Shuffle.forward`'s ``bits``); the keys'
        higher bits are then wrong.
        """
        rank = backend.rank()
        fast = kernels_enabled()
        m = keys.shape[0]
        if m >= 1 << 30:
            raise ValueError(f"the radix sort ranks fewer than 2^30 rows, got {m}")
        if f"onehot{self.digit_bits}" not in ONEHOT:
            raise ValueError(f"digit_bits must be 1 to 4, got {self.digit_bits}")
        kind = digit_kind(self.digit_bits, backend.world_size())
        replicated = kind != f"onehot{self.digit_bits}"
        mask = (1 << self.digit_bits) - 1
        k = max(1, (m - 1).bit_length())  # positions are below 2^k
        window = self.window(m)
        if window > 32:
            raise ValueError(f"{m} rows with {self.digit_bits}-bit digits: at most 2^{32 - self.digit_bits} rows")
        channel = self.channel if self.channel is not None else DealerChannel()
        sh = self._shuffle = Shuffle(channel)
        self.randomness = Randomness(channel)
        total = self.rounds(key_bits)
        channel.narrow(kind, window)  # the one-hot's corrections are needed mod 2^window only
        channel.plan_triples([m] * total, kind)
        v = mask + 1
        rho = tau = inst = inverse = None
        limbs = keys.reshape(m, -1).shape[1]
        high = 1 << k
        last_bits = None if carry_bits is None else max(k, carry_bits)  # the last shuffle's [rho | keys]

        # each round's shuffle is opened by its last permuter (Shuffle.forward_to_last): one round after the
        # last pass, as an all_gather, for fewer bytes (among 2: one party sends the window, instead of both)
        fold = backend.world_size() >= 2 and hasattr(sh, "forward_to_last")

        def carries(r):  # round r's inverse shuffle leaves rho's carrier share with the dealer (Shuffle.inverse)
            return fold and 1 <= r < total - 1

        def prepare_next():  # the next forward shuffle: a round's rho + 2^k digit, or the last [rho | keys]
            if l + 1 < total:
                sh.prepare(m, 1, I32, mask=(self.digit_bits, l + 1, k) if fold else None, bits=window,
                           carry=carries(l))
            else:
                sh.prepare(m, 1 + limbs, torch.int64, bits=last_bits)
                if then is not None:
                    then(self.randomness)

        for l in range(total):
            dig = digits(l).reshape(-1).to(I32)
            if l:  # shuffle rho + 2^k digit (one word); its last permuter opens it
                x = dig * high if rho is None else rho + dig * high  # None: the carrier (the dealer keeps its rho)
                if fold:
                    held, inst = sh.forward_to_last(x.unsqueeze(1), (self.digit_bits, l, k), window, carries(l - 1))
                else:
                    y, inst = sh.forward(x.unsqueeze(1), window)
                    held = y[:, 0]
                    del y
                rho = dig = x = None
                sh.prepare(m, 1, I32, inverse_of=inst, bits=window, carry=carries(l))  # the dealer computes meanwhile
                prepare_next()
            rows = channel.block(kind, m)  # r, E (V - 1 rows), b, c: views, no copies
            if l == 0:
                prepare_next()
            r = rows[0]
            if l == 0:
                (u,) = open_all([dig - r], bits=self.digit_bits)  # (digit - r) mod 2^d
                del dig
            else:  # tau + 2^k ((digit - r) mod 2^d), from the low window bits
                if fold:
                    if held is not None:
                        held -= r * high
                    opened = open_from(held, sh.last, m, window)
                else:
                    (opened,) = open_all([held - r * high], bits=window)
                del held
                if fast:  # one pass: tau and u (int32), checking that tau is a permutation
                    got = split_window(opened.numpy(), k)
                    if got is None:
                        _not_a_permutation()
                    tau, u = (torch.from_numpy(a) for a in got)
                else:
                    tau = (opened & (high - 1)).long()
                    u = opened >> k
                    inverse = inverse_permutation(tau)  # checks that tau is a permutation
            if fast:  # the round's local work in compiled kernels (secure_auc.mpc.kernels), bit-identical
                t_np = tau.numpy() if l else None
                if replicated:
                    w = torch.from_numpy(replicated_round(rows[1:v].numpy(), rows[v:].numpy(), u.numpy(), t_np,
                                                          rank, channel.zero_share(m).numpy()))
                    del rows, u
                else:
                    e, b, c = rows[1:v], rows[v : 2 * v - 1], rows[2 * v - 1 :]
                    diff, d0 = beaver_round_bases(e.numpy(), u.numpy(), t_np, b.numpy(), rank)
                    del u
                    (f,) = open_all([torch.from_numpy(diff)], bits=window)
                    del diff
                    w = torch.from_numpy(beaver_sum(d0, e.numpy(), f.numpy(), c.numpy()))
                    del d0, f, e, b, c, rows
            elif replicated:  # among three: the products are local (replicated_digit_permutation)
                u = u.long()
                w = replicated_digit_permutation((rows[1:v], rows[v:]), u, tau if l else None, rank,
                                                 channel.zero_share(m), inverse if l else None)
                del rows, u
            else:
                u = u.long()
                r, e, b, c = rows[0], rows[1:v], rows[v : 2 * v - 1], rows[2 * v - 1 :]
                base = shuffled_bases(onehot_rows(e, u, rank), tau if l else None, rank, inverse if l else None)
                d_rot = rotate_rows(base, u)
                del base, u
                diff = d_rot[1:] - d_rot[0]
                diff -= b
                (f,) = open_all([diff], bits=window)  # sigma is then right mod 2^window, all a round needs
                del diff
                w = digit_permutation(d_rot, e, c, f, rank)  # sigma in shuffled order: sigma[tau]
                del d_rot, f, r, e, b, c, rows
            if l == 0:
                rho = w
            else:
                rho = sh.inverse(w.unsqueeze(1), inst, window, carry=carries(l))
                rho = None if rho is None else rho[:, 0].contiguous()
            del w
            if progress is not None:
                progress(l + 1, total)
        keys = keys.reshape(m, -1)
        y, inst = sh.forward(torch.cat([rho.to(torch.int64).unsqueeze(1), keys], dim=1), last_bits)
        (tau,) = open_all([y[:, 0].to(I32)], bits=k)
        tau = tau.long()
        inverse = inverse_permutation(tau) if not fast else compiled_inverse_permutation(tau.numpy())
        if inverse is None:
            _not_a_permutation()
        inverse = torch.as_tensor(inverse)
        self._final = (tau, inst)
        return y[:, 1:].index_select(0, inverse)  # out[tau] = y: a gather by tau^-1

    def unsort(self, values: torch.Tensor, bits: int | None = None) -> torch.Tensor:
        """Shares of a secret (M,) or (M, c) vector in sorted order -> in input order;
        ``bits`` (int32 values): needed modulo 2^bits only (narrow words on the wire)."""
        tau, inst = self._final
        shape = values.shape
        w = values.reshape(shape[0], -1)[tau]
        out = self._shuffle.inverse(w, inst, bits).reshape(shape)
        self._shuffle.ch.close()
        return out



