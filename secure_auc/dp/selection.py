r"""Choosing the best of T candidates privately: report-noisy-max on the rank statistic.

The candidates (checkpoints, models) score the same M samples, whose labels are the
same for every candidate.  With 0-based mid-ranks :math:`r^{(t)}` of candidate t's
scores and the labels y, the AUC is

.. math::

    \mathrm{AUC}_t = \frac{S_t - P (P - 1) / 2}{P N}, \qquad S_t = \langle r^{(t)}, y \rangle,

and P, N do not depend on t: **the AUCs are ordered as the rank sums** :math:`S_t`,
so the argmax of the AUCs is the argmax of :math:`D_t = 2 S_t` (an integer, since
mid-ranks are half-integers).

Sensitivity.  Neighbouring datasets differ in one label (label DP; M is public).
Changing sample i's label from 0 to 1 adds :math:`2 r^{(t)}_i` to every
:math:`D_t`, with :math:`0 \le r^{(t)}_i \le M - 1`; from 1 to 0 subtracts it.  So
:math:`|D_t(y) - D_t(y')| \le \Delta = 2 (M - 1)` for every t, and the change has
the **same sign for every candidate** (the scores are monotone in the data).

Report-noisy-max.  Release only :math:`\arg\max_t (D_t + Z_t)` with independent
:math:`Z_t \sim \mathrm{DLap}(\Delta / \varepsilon)`,
:math:`P(Z = z) \propto e^{-\varepsilon |z| / \Delta}`, ties among the noisy values broken by a
uniformly random priority order :math:`\pi` (drawn independently of the data).  This is
:math:`\varepsilon`-DP whatever T.  Proof (Dwork & Roth, Claim 3.9, for monotone
scores, here with integer noise): fix :math:`\pi` and every :math:`Z_j, j \ne i`; let
:math:`z^*` be the smallest integer such that candidate i wins on y with
:math:`Z_i = z^*` (it then wins for every :math:`Z_i \ge z^*`: order lexicographically by
(value, priority)).  If y' has :math:`D'_j \ge D_j` for every j (a label set to 1), then
with :math:`Z_i \ge z^* + \Delta`, :math:`D'_i + Z_i \ge D_i + z^* + \Delta` while
:math:`D'_j + Z_j \le D_j + Z_j + \Delta`, so i still wins:
:math:`P(i \mid y') \ge P(Z_i \ge z^* + \Delta) \ge e^{-\varepsilon} P(Z_i \ge z^*) = e^{-\varepsilon} P(i \mid y)`
(the discrete Laplace's tail ratio over :math:`\Delta` integer steps is at least
:math:`e^{-\varepsilon}`).  If :math:`D'_j \le D_j` for every j, the same argument with
y' as the base gives :math:`P(i \mid y) \ge e^{-\varepsilon} P(i \mid y')`; exchanging y
and y' covers the other two inequalities.  Monotonicity is what allows
:math:`\Delta / \varepsilon` instead of the general :math:`2 \Delta / \varepsilon`; the
centred statistic :math:`C_t = S_t - P (M - 1) / 2` has half the sensitivity,
:math:`(M - 1) / 2`, but is not monotone, so it needs :math:`2 \cdot (M - 1) / 2 / \varepsilon`,
the same scale.  :func:`selection_pmf` computes the exact output distribution of the
mechanism on a small example, and the tests check :math:`e^{\varepsilon}` between
neighbours with it.

Noise in shares.  Each of the K clients draws, per candidate,
:math:`\mathrm{NB}(1/h, q) - \mathrm{NB}(1/h, q)` with :math:`q = e^{-\varepsilon / \Delta}`
(:func:`.discrete.negative_binomial`, exact, from its own key; h = K by default):
any h shares sum to exactly :math:`\mathrm{DLap}(\Delta / \varepsilon)` (as in
:mod:`.distributed`).  The sums :math:`D_t + Z_t` exist only in shares among the
computing parties; the secure argmax (:mod:`secure_auc.mpc.primitives.argmax`)
opens only the index, to the server.

In AUC units the noise's standard deviation is
:math:`\sqrt{2}\,\Delta / (2 \varepsilon P N) = \sqrt{2} (M - 1) / (\varepsilon P N)`:
about 1.6e-5 at M = 458,407, P = 117,317, eps = 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .base import PrivacyCost
from .discrete import discrete_laplace, negative_binomial
from .events import pure_event

__all__ = ["METHODS", "selection_sensitivity", "selection_scale", "doubled_rank_sums", "noise_share",
           "report_noisy_max", "selection_pmf", "SelectionCharge", "repeat_select_event",
           "repeat_select_epsilon", "base_epsilon_for", "release_mechanism", "SelectAndRelease"]

METHODS = ("noisy-max", "repeat-and-select")


def selection_sensitivity(total: int) -> int:
    """Delta = 2 (M - 1): the largest change of every D_t = 2 S_t when one label changes.

    >>> selection_sensitivity(458_407)
    916812
    """
    return 2 * (int(total) - 1)


def selection_scale(total: int, epsilon: float) -> float:
    """The discrete Laplace scale Delta / eps of the noise on each D_t (module docstring).

    >>> selection_scale(1001, 2.0)
    1000.0
    """
    return selection_sensitivity(total) / float(epsilon)


def doubled_rank_sums(labels, scores) -> np.ndarray:
    """D_t = 2 <r_t, y> for every column t of ``scores`` (M, T): twice the sum of the positives'
    0-based mid-ranks among all M scores of candidate t (int64, exact).

    >>> import numpy as np
    >>> doubled_rank_sums(np.array([0, 1, 1]), np.array([[0.1, 0.9], [0.5, 0.5], [0.9, 0.5]]))
    array([6, 2])
    """
    y = np.asarray(labels).astype(bool)
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim == 1:
        s = s[:, None]
    from scipy.stats import rankdata  # imported where used: every party imports this module

    twice = (2 * rankdata(s, axis=0) - 2).astype(np.int64)  # 2 x 0-based mid-ranks: integers
    return twice[y].sum(axis=0)


def noise_share(streams, candidates: int, total: int, epsilon: float, honest: int) -> np.ndarray:
    """One client's shares of the selection noise, one per candidate (int64): NB(1/h, q) -
    NB(1/h, q) with q = exp(-eps / Delta), exact, from ``streams`` (a client's
    :class:`secure_auc.dp.streams.KeyStreams` or a numpy Generator); h such shares sum to
    DLap(Delta / eps)."""
    scale = selection_scale(total, epsilon)
    r = Fraction(1, int(honest))
    shape = (int(candidates),)
    return (negative_binomial(streams, r, scale, shape) - negative_binomial(streams, r, scale, shape)).astype(np.int64)


def report_noisy_max(statistics, epsilon: float | None, total: int, rng) -> int:
    """The plain reference of the selection: argmax of ``statistics`` (D_t) plus DLap(Delta / eps)
    noise (None: no noise), ties broken by a uniformly random priority order from ``rng``.

    >>> import numpy as np
    >>> report_noisy_max(np.array([3, 9, 9, 1]), None, 10, np.random.default_rng(0)) in (1, 2)
    True
    """
    d = np.asarray(statistics, dtype=np.int64)
    if epsilon is not None:
        d = d + discrete_laplace(rng, selection_scale(total, epsilon), d.shape, exact=False)
    order = rng.permutation(len(d))
    return int(order[int(np.argmax(d[order]))])


def selection_pmf(statistics, epsilon: float, total: int, span: int | None = None) -> np.ndarray:
    """The exact probability that report-noisy-max (:func:`report_noisy_max`) outputs each
    candidate, ties broken at random, by summing over every candidate's noise on
    a grid (small examples only: T <= 3, the noise truncated at ``span`` steps, whose tail mass
    is below 1e-12 by default).  For the DP test between neighbouring datasets."""
    d = np.asarray(statistics, dtype=np.int64)
    t = len(d)
    q = math.exp(-epsilon / selection_sensitivity(total))
    if span is None:
        span = int(math.ceil(math.log(1e-13) / math.log(q)))
    z = np.arange(-span, span + 1)
    p = (1 - q) / (1 + q) * q ** np.abs(z)
    grids = np.meshgrid(*([z] * t), indexing="ij")
    weight = np.ones_like(grids[0], dtype=np.float64)
    for g in grids:
        weight = weight * p[g + span]
    values = np.stack([d[j] + grids[j] for j in range(t)])
    best = values.max(axis=0)
    winners = (values == best)
    share = winners / winners.sum(axis=0)  # uniformly random among the tied maxima
    return np.array([(share[j] * weight).sum() for j in range(t)])


@dataclass(frozen=True)
class SelectionCharge:
    """What a ledger charges for one selection (:meth:`secure_auc.Ledger.reserve` takes it as its
    ``mechanism``): report-noisy-max is one pure eps-DP release whatever T; repeat-and-select
    is dp-accounting's ``RepeatAndSelectDpEvent`` of its eps0-DP evaluations."""

    epsilon: float
    method: str = "noisy-max"
    base_epsilon: float | None = None  # repeat-and-select: each evaluation's eps0
    mean: float | None = None  # repeat-and-select: the mean number of evaluations
    delta: float = 0.0

    @property
    def name(self) -> str:
        return "select-" + self.method

    @property
    def cost(self) -> PrivacyCost:
        return PrivacyCost(self.epsilon, self.delta)

    def privacy_event(self, total: int | None = None) -> dict:
        if self.method == "noisy-max":
            return pure_event(self.epsilon)
        return repeat_select_event(self.base_epsilon, self.mean)


def repeat_select_event(base_epsilon: float, mean: float, shape: float = 1.0) -> dict:
    """Repeat-and-select (Papernot & Steinke 2022) of an eps0-DP evaluation, the number of
    evaluations truncated negative binomial with ``mean`` and ``shape`` (1: geometric)."""
    return {"kind": "repeat_select", "event": pure_event(base_epsilon), "mean": float(mean), "shape": float(shape)}


def repeat_select_epsilon(base_epsilon: float, mean: float, delta: float, shape: float = 1.0) -> float:
    """eps at ``delta`` of repeat-and-select by dp-accounting's RDP accountant.

    >>> e = repeat_select_epsilon(0.25, 100, 1e-6)
    >>> bool(0.5 < e < 2.0)
    True
    """
    from .events import compose

    return float(compose([repeat_select_event(base_epsilon, mean, shape)], delta).epsilon)


def base_epsilon_for(epsilon: float, mean: float, delta: float, shape: float = 1.0) -> float:
    """The largest eps0 whose repeat-and-select (``mean`` evaluations on average) spends at most
    ``epsilon`` at ``delta`` (fixed-point steps on :func:`repeat_select_epsilon`, then at most ``epsilon``).

    >>> e0 = base_epsilon_for(1.0, 10, 1e-6)
    >>> bool(0.25 < e0 < 0.5), repeat_select_epsilon(e0, 10, 1e-6) <= 1.0
    (True, True)
    """
    eps0 = float(epsilon) / (2.0 + shape)  # Papernot & Steinke: about (2 + eta) eps0 in all
    for _ in range(3):  # eps grows about linearly in eps0: a few fixed-point steps
        eps0 *= float(epsilon) / repeat_select_epsilon(eps0, mean, delta, shape)
    while repeat_select_epsilon(eps0, mean, delta, shape) > epsilon:
        eps0 *= 0.999
    return eps0


def release_mechanism(mechanism, epsilon: float):
    """The session's ``mechanism`` at ``epsilon``: what releases the selected evaluation's DP AUC
    (``release_epsilon`` of a session's selection), everything else as configured.

    >>> from secure_auc import make_mechanism
    >>> release_mechanism(make_mechanism("distributed", 1.0, clients=3), 0.25).describe()["epsilon"]
    0.25
    """
    import dataclasses

    from ..validation import InputError

    if not mechanism.cost.epsilon < math.inf:
        raise InputError(f"release_epsilon needs a private session mechanism, not {mechanism.name!r}")
    return dataclasses.replace(mechanism, epsilon=float(epsilon))


@dataclass(frozen=True)
class SelectAndRelease:
    """One charge for a selection and the release of the selected's DP AUC: the two events
    composed (report-noisy-max's pure eps, then the release mechanism's event), reserved once
    before either runs (:meth:`secure_auc.Ledger.reserve` takes it as its ``mechanism``).

    >>> from secure_auc import make_mechanism
    >>> c = SelectAndRelease(SelectionCharge(1.0), make_mechanism("distributed", 0.5, clients=2))
    >>> c.cost.epsilon, [e["kind"] for e in c.privacy_event(100)["events"]]
    (1.5, ['pure', 'composed'])
    """

    selection: SelectionCharge
    release: object  # a Mechanism

    @property
    def name(self) -> str:
        return f"{self.selection.name}+{self.release.name}"

    @property
    def cost(self) -> PrivacyCost:
        r = self.release.cost
        return PrivacyCost(self.selection.epsilon + r.epsilon, self.selection.delta + r.delta)

    def privacy_event(self, total: int | None = None) -> dict:
        from .events import composed_event

        return composed_event([self.selection.privacy_event(total), self.release.privacy_event(total)])
