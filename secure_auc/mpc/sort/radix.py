r"""Oblivious radix sort by composing secret permutations.

The LSD radix sort of Hamada et al. (2014) in the form of Asharov et al.
(2022, "sort via composition"): the keys' digits are sorted one at a time,
least significant first, each time with a *stable* sort, and the sort so far
is kept as a secret permutation.  Nothing is compared; the only openings are
secret permutations composed with fresh secret shuffles, which are uniformly
random permutations whatever the keys (:mod:`secure_auc.mpc.shuffle`).

Permutations are destination vectors: :math:`\rho` sends row :math:`j` to
position :math:`\rho_j`, :math:`\mathrm{apply}(\rho, x)_{\rho_j} = x_j`.

*Digit permutation* (one batched product round).  A shared digit
:math:`v_j \in \{0, \dots, 2^d - 1\}` arrives as its one-hot indicators
:math:`I_{j,v} = [v_j = v]` for :math:`v \ge 1`, secret-shared by the source
that owns row :math:`j` (it computes them from its own key, so no product is
needed to expand bits); :math:`I_{j,0} = 1 - \sum_{v \ge 1} I_{j,v}`.
With the inclusive prefix counts :math:`C_{j,v} = \sum_{i \le j} I_{i,v}`
(local: prefix sums are linear), the totals :math:`T_v = C_{M-1,v}` and
:math:`O_v = \sum_{u < v} T_u`, the stable sort by the digit sends row
:math:`j` to

.. math::

    \sigma_j = \sum_v I_{j,v}\,(O_v + C_{j,v}) - 1
             = (O_0 + C_{j,0}) - 1 + \sum_{v \ge 1} I_{j,v}\,\big((O_v + C_{j,v}) - (O_0 + C_{j,0})\big)

(:math:`\sum_v I_{j,v} = 1`): :math:`2^d - 1` products per row.

*Round* :math:`l \ge 1`, with the sort so far :math:`\rho` (shared):

1. Shuffle :math:`[\rho \mid \text{digit}_l]` with a fresh secret :math:`S`
   (rows :math:`X \mapsto X[s]`) and open :math:`\tau = \rho[s]`.
2. Scatter locally: :math:`b[\tau_i] = \text{digit}_l[s_i]`, i.e.
   :math:`b = \mathrm{apply}(\rho, \text{digit}_l)`, the digit in the order
   sorted so far.
3. :math:`\sigma` = digit permutation of :math:`b`.
4. Compose: :math:`w_i = \sigma[\tau_i] = (\sigma \circ \rho)[s_i]`, a local
   gather, so :math:`\rho \leftarrow S^{-1}(w)` (an inverse shuffle).

Round 0 needs no shuffle (:math:`\rho` is the identity).  After the last
round the keys are moved to sorted order the same way (shuffle
:math:`[\rho \mid \text{keys}]`, open :math:`\tau_F`, scatter), and
:meth:`RadixSort.unsort` puts any secret vector :math:`z` in sorted order
back in input order: :math:`w = z[\tau_F] = y[s_F]`, :math:`y = S_F^{-1}(w)`.

Each opened :math:`\tau = \rho \circ s` uses its own shuffle, so the opened
permutations are independent and uniformly random: together they reveal
nothing about the keys, not even ties (ties are kept in input order by the
stable digit sorts; equal keys are never compared).

Cost per round for :math:`M` rows: one shuffle of :math:`1 + d` columns, one
inverse shuffle of one column (each :math:`w` passes), one opening of
:math:`M` words and :math:`2^d - 1` products per row; :math:`\lceil
32\,\text{limbs} / d \rceil` rounds.  Time grows as :math:`M` per round, so
:math:`M \log M` overall only through the key width, which is fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..comm import backend
from ..primitives.beaver import beaver_round
from ..primitives.dealer import DealerChannel
from ..primitives.randomness import Randomness
from ..primitives.shuffle import Shuffle, open_shuffled

__all__ = ["RadixSort", "digit_permutation"]


def digit_permutation(ind: torch.Tensor, rnd: Randomness, rank: int) -> torch.Tensor:
    """Shares of the stable sort permutation (destination vector) of shared digits,
    given as the (M, V - 1) shares of their one-hot indicators [digit = v], v = 1..V-1."""
    one = 1 if rank == 0 else 0  # public constants are added by one party
    ind = torch.cat([one - ind.sum(dim=1, keepdim=True), ind], dim=1)  # I_0 = 1 - sum of the others
    counts = torch.cumsum(ind, dim=0)  # C, inclusive (int64 wraps mod 2^64: shares stay exact)
    totals = counts[-1]
    offsets = torch.cumsum(totals, dim=0) - totals  # O_v = sum_{u<v} T_u
    base = counts + offsets  # O_v + C_v
    diff = (base[:, 1:] - base[:, :1]).contiguous()
    _, (prod,), _ = beaver_round(rnd, muls=[(ind[:, 1:].contiguous(), diff)])
    dest = base[:, 0] + prod.sum(dim=1)
    return dest - 1 if rank == 0 else dest


def _scatter(tau: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(rows)
    out[tau] = rows
    return out


def _check_permutation(tau: torch.Tensor) -> None:
    m = tau.numel()
    if m and (int(tau.min()) < 0 or int(tau.max()) >= m or not bool((torch.bincount(tau, minlength=m) == 1).all())):
        raise RuntimeError("the shuffle opened something that is not a permutation: the parties' randomness is "
                           "out of step (different numpy versions on different machines?)")


@dataclass
class RadixSort:
    """Oblivious LSD radix sort of secret keys, given as digits shared round by round.

    ``digit_bits``: 1 or 2 bits per round (2: half the rounds and shuffles, three
    times the products; faster here).
    """

    digit_bits: int = 2
    randomness: Randomness | None = field(default=None, repr=False)
    _shuffle: Shuffle | None = field(default=None, repr=False)
    _final: tuple | None = field(default=None, repr=False)

    def rounds(self, key_bits: int) -> int:
        return -(-key_bits // self.digit_bits)

    def sort(self, digits, key_bits: int, keys: torch.Tensor, progress=None) -> torch.Tensor:
        """Sort the rows of ``keys`` (an (M, limbs) share matrix, carried along).

        ``digits(l)`` returns the (M, 2^digit_bits - 1) shares of the one-hot
        indicators of digit ``l`` (bits ``l*digit_bits ..``, least significant
        digit first) of every row's key; the key has ``key_bits`` bits.  Returns the shares of the keys
        in ascending order (ties in input order); keeps what :meth:`unsort`
        needs.  ``progress(round, rounds)`` after each round.
        """
        rank = backend.rank()
        m = keys.shape[0]
        channel = DealerChannel()
        sh = self._shuffle = Shuffle(channel)
        rnd = self.randomness = Randomness(channel)
        per_round = m * (2 ** self.digit_bits - 1)
        total = self.rounds(key_bits)
        channel.plan_triples([per_round] * total)
        rho = None
        for l in range(total):
            rnd.reserve({"mul": per_round})
            dig = digits(l)
            if rho is None:
                b = dig
            else:
                y, inst = sh.forward(torch.cat([rho.unsqueeze(1), dig], dim=1))
                tau = open_shuffled(y[:, 0])
                _check_permutation(tau)
                b = _scatter(tau, y[:, 1:])
            sigma = digit_permutation(b, rnd, rank)
            rho = sigma if rho is None else sh.inverse(sigma[tau].unsqueeze(1), inst)[:, 0]
            if progress is not None:
                progress(l + 1, total)
        keys = keys.reshape(m, -1)
        y, inst = sh.forward(torch.cat([rho.unsqueeze(1), keys], dim=1))
        tau = open_shuffled(y[:, 0])
        _check_permutation(tau)
        self._final = (tau, inst)
        return _scatter(tau, y[:, 1:])

    def unsort(self, values: torch.Tensor) -> torch.Tensor:
        """Shares of a secret (M,) or (M, c) vector in sorted order -> in input order."""
        tau, inst = self._final
        shape = values.shape
        w = values.reshape(shape[0], -1)[tau]
        out = self._shuffle.inverse(w, inst).reshape(shape)
        self._shuffle.ch.close()
        return out
