"""Planning: the noise of each of T evaluations so that all T fit a total (eps, delta).

With basic composition T evaluations within eps cost eps / T each.  Composed
with the RDP or PLD accountant (:func:`.events.compose`) the T-fold
composition of an evaluation's privacy event grows like sqrt(T) instead, so
each evaluation can have a larger budget, hence less noise.
:func:`plan_evaluations` finds the largest per-evaluation eps_1 whose T-fold
composition is within (eps, delta), to a relative 1e-4, by interpolation on log eps_1
between eps / T (basic composition, always within) and eps.  Each evaluation's delta
parameter is delta / T, so that basic composition is valid too; for
Gaussian-type noise it only parametrises the calibration, the accountant
composes the noise actually added.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from ..validation import InputError, check_epsilon
from .base import Mechanism
from .events import Composition, compose

__all__ = ["Plan", "plan_evaluations", "check_plan", "search_plan"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """Per-evaluation budget eps_1 (and mechanism) for T evaluations within (eps, delta)."""

    evaluations: int
    epsilon: float
    delta: float
    per_epsilon: float
    per_delta: float
    mechanism: Mechanism
    composition: Composition

    def summary(self) -> str:
        c = self.composition
        return (f"{self.evaluations} evaluations within eps = {self.epsilon:g}, delta = {self.delta:g}: each "
                f"evaluation eps = {self.per_epsilon:.6g}" + (f", delta = {self.per_delta:.3g}" if self.per_delta else "")
                + f" ({self.mechanism.name}); composed eps = {c.epsilon:.6g} ({c.accountant}); "
                f"basic composition would allow eps = {self.epsilon / self.evaluations:.6g} each")


def _fits(make, eps1, delta1, t, epsilon, delta, total):
    mech = make(eps1, delta1)
    ev = mech.privacy_event(total)
    cost = mech.cost
    try:
        c = compose([ev] * t, delta, [(cost.epsilon, cost.delta)] * t)
    except ValueError:
        return False, mech, None
    return c.epsilon <= epsilon * (1 + 1e-12), mech, c


PRECISION = 1e-4  # the plan's per-evaluation eps is within this relative distance below the largest that fits


def _gap(comp, epsilon: float) -> float:
    """log(composed eps / budget): <= 0 where the plan fits; +inf where the composition failed."""
    return math.log(comp.epsilon / epsilon) if comp is not None and comp.epsilon > 0 else math.inf


def _largest_fit(build, best, hi, comp_hi, delta1, t, epsilon, delta, total, iterations, progress):
    """The largest per-evaluation eps that fits, between ``best`` (it fits) and ``hi`` (it does not), to
    :data:`PRECISION`: the composed eps grows smoothly with it, so each step interpolates (regula falsi in
    log-log, the Illinois variant: a side kept twice has its value halved) and a step that would not
    shrink the bracket by a tenth bisects; about 6 steps where bisection took 14."""
    x_lo, x_hi = math.log(best[0]), math.log(hi)
    g_lo, g_hi = _gap(best[2], epsilon), _gap(comp_hi, epsilon)
    tol, kept = math.log1p(PRECISION), 0
    for i in range(iterations):
        width = x_hi - x_lo
        if width <= tol:
            break
        x = x_lo + width / 2
        if math.isfinite(g_hi) and g_hi > g_lo:
            x = x_lo - g_lo * width / (g_hi - g_lo)
            x = min(max(x, x_lo + max(tol / 2, width / 10)), x_hi - max(tol / 2, width / 10)) if width > 2 * tol \
                else x_lo + width / 2
        eps1 = math.exp(x)
        log.debug("planning %d evaluations: step %d (eps per evaluation %.6g)", t, i + 1, eps1)
        ok, mech, comp = _fits(build, eps1, delta1, t, epsilon, delta, total)
        if progress is not None:
            progress(i + 1, iterations)
        if ok:
            x_lo, g_lo, best = x, _gap(comp, epsilon), (eps1, mech, comp)
            kept = kept - 1 if kept < 0 else -1
            if kept <= -2:
                g_hi /= 2
        else:
            x_hi, g_hi = x, _gap(comp, epsilon)
            kept = kept + 1 if kept > 0 else 1
            if kept >= 2:
                g_lo /= 2
    if progress is not None:
        progress(iterations, iterations)
    return best


def plan_evaluations(make, evaluations: int, epsilon: float, delta: float = 0.0, *, total: int | None = None,
                     iterations: int = 30, progress=None) -> Plan:
    """The largest per-evaluation budget such that ``evaluations`` evaluations fit (eps, delta), to a
    relative :data:`PRECISION` (at most ``iterations`` steps of the search).

    Parameters
    ----------
    make : callable
        ``make(eps_1)`` or ``make(eps_1, delta_1)`` -> Mechanism: the mechanism of one evaluation.
    evaluations : int
        T >= 1.
    epsilon, delta : float
        The total budget.
    total : int, optional
        M (events that depend on it: Skellam shares).
    progress : callable, optional
        ``progress(step, steps)`` after each step of the search (the CLI's progress bar on a
        terminal); each step is also a debug record of the ``secure_auc`` log.

    Returns
    -------
    Plan

    Examples
    --------
    100 evaluations of discrete-Laplace distributed noise within eps = 10 and
    delta = 1e-6: each gets about twice the basic-composition budget of 0.1:

    >>> from secure_auc import make_mechanism
    >>> from secure_auc.dp.planning import plan_evaluations
    >>> p = plan_evaluations(lambda e: make_mechanism("distributed", e, clients=3), 100, 10.0, 1e-6)
    >>> bool(0.2 < p.per_epsilon < 0.3), p.composition.accountant
    (True, 'pld')
    """
    return search_plan(make, check_plan(evaluations, epsilon, delta), epsilon, delta, total=total,
                       iterations=iterations, progress=progress)


def check_plan(evaluations: int, epsilon: float, delta: float = 0.0) -> int:
    """T as an int, if T evaluations within the total (eps, delta) can be planned; else an
    :class:`~secure_auc.validation.InputError` naming the option.

    Examples
    --------
    >>> from secure_auc.dp.planning import check_plan
    >>> check_plan(10, 1.0, 1e-6)
    10
    >>> check_plan(0, 1.0)
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: --evaluations must be a positive integer, got 0
    """
    if int(evaluations) != evaluations or evaluations < 1:
        raise InputError(f"--evaluations must be a positive integer, got {evaluations}")
    check_epsilon(epsilon)
    if not (0.0 <= delta < 1.0):
        raise InputError(f"--delta must be in [0, 1), got {delta}")
    return int(evaluations)


def search_plan(make, t: int, epsilon: float, delta: float = 0.0, *, total: int | None = None,
                iterations: int = 30, progress=None) -> Plan:
    """:func:`plan_evaluations` for arguments :func:`check_plan` accepted (T = ``t``)."""

    def build(eps1, delta1):
        try:
            return make(eps1, delta1)
        except TypeError:
            return make(eps1)

    delta1 = delta / t if delta else None
    lo = epsilon / t
    ok, mech, comp = _fits(build, lo, delta1, t, epsilon, delta, total)
    if not ok:
        raise InputError(f"no per-evaluation budget fits {t} evaluations within eps = {epsilon:g}, delta = {delta:g}")
    best = (lo, mech, comp)
    hi = epsilon
    ok, mech, comp = _fits(build, hi, delta1, t, epsilon, delta, total)
    if ok:
        best = (hi, mech, comp)
    else:
        best = _largest_fit(build, best, hi, comp, delta1, t, epsilon, delta, total, iterations, progress)
    eps1, mech, comp = best
    return Plan(t, float(epsilon), float(delta), eps1, delta1 or 0.0, mech, comp)
