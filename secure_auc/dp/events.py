"""The privacy event of one evaluation, and its composition over many (Google's dp-accounting).

Every mechanism describes what one evaluation spends as a *privacy event*, a
small JSON-able dict that the ledger stores; :func:`to_dp_event` turns it into
a ``dp_accounting.DpEvent`` and :func:`compose` composes a list of them with
the library's accountants, reporting the tightest valid (eps, delta):

================  =====================================================  ===========================
kind              mechanism                                              accountants
================  =====================================================  ===========================
``pure``          any eps-DP release: randomized response, discrete      PLD, RDP, basic
                  Laplace (per noise), Laplace
``gaussian``      continuous Gaussian, noise multiplier sigma / Delta     PLD, RDP
``zcdp``          discrete Gaussian (rho = 1 / (2 sigma_c^2), CKS 2020)   RDP
``skellam``       Skellam noise Sk(mu) on an integer statistic of         PLD (:mod:`.skellam_pld`),
                  sensitivity Delta                                      RDP (as ``zcdp``, below)
``ddg``           sum of h discrete Gaussian shares N_Z(0, s^2) on an     PLD (:mod:`.ddg`), RDP
                  integer statistic of sensitivity Delta (distributed
                  discrete Gaussian)
``repeat_select`` repeat-and-select of one of the above (a random number     RDP
                  of runs, the best released; Papernot & Steinke 2022)
``composed``      several of the above in one evaluation                 as its parts
``none``          the exact, non-private computation                     eps = inf
``noop``          post-processing of an earlier release (RR flips        free
                  reused)
================  =====================================================  ===========================

``pure``.  Among all eps-DP mechanisms, binary randomized response has the
worst privacy-loss distribution (Kairouz, Oh, Viswanath 2015): it takes the
values +eps and -eps with probabilities e^eps / (1 + e^eps) and 1 / (1 + e^eps).
The discrete Laplace with sensitivity 1 and parameter eps has exactly that
distribution, so a pure event becomes ``DiscreteLaplaceDpEvent(eps, 1)`` for
the PLD accountant and ``RandomizedResponseDpEvent(2 / (1 + e^eps), 2)`` for
the RDP accountant: a bound valid for every eps-DP release whatever its
sensitivity, known before the data is (the ledger reserves before a run).

``zcdp``.  (xi, rho)-zCDP: RDP eps(alpha) <= xi + rho alpha.

``skellam``.  For the PLD accountant, the exact privacy-loss distribution of
the Skellam mechanism, discretised pessimistically
(:func:`.skellam_pld.skellam_pld`); for the RDP accountant, the zCDP event of
:func:`skellam_zcdp`: the RDP bound of Agarwal, Kairouz & Liu (2021),
eps(alpha) = alpha D^2 / (4 mu) + min(((2 alpha - 1) D^2 + 6 D) / (16 mu^2), 3 D / (4 mu)),
is at most xi + rho alpha with rho = D^2 / (4 mu) + D^2 / (8 mu^2) and
xi = max(0, (6 D - D^2) / (16 mu^2)).

``ddg``.  The sum S of h shares N_Z(0, s^2) is not a discrete Gaussian.  For
the PLD accountant: the PLD of Y ~ N_Z(0, h s^2) (:func:`.ddg.dgauss_pld`) and
the pointwise bound |log P_S / P_Y| <= L (:func:`.ddg.ddg_max_divergence`):
with L_T the sum of L over the composed ``ddg`` releases, eps(delta) <=
eps_Y(delta e^-L_T) + L_T (L ~ 4 exp(-pi^2 s^2): 3e-17 at s = 2).  For the RDP
accountant: Proposition 14 of Kairouz, Liu & Steinke (2021),
min(alpha Delta^2 / (2 h s^2) + tau, alpha / 2 (Delta / (sqrt(h) s) + tau)^2)
(:func:`.ddg.ddg_rdp`).

:func:`compose` reports, for a target delta, the smallest eps among the
accountants that support every event: basic composition (sum of eps, valid when
the sum of the releases' deltas is at most the target), the RDP accountant
(``dp_accounting.rdp.RdpAccountant``) and the PLD accountant
(``dp_accounting.pld.PLDAccountant``, extended to ``skellam`` events).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["pure_event", "gaussian_event", "zcdp_event", "skellam_event", "ddg_event", "composed_event", "NONE_EVENT", "NOOP_EVENT", "check_event",
           "to_dp_event", "Composition", "compose", "skellam_zcdp"]

NONE_EVENT = {"kind": "none"}
NOOP_EVENT = {"kind": "noop"}  # post-processing of an earlier release: free


def pure_event(epsilon: float) -> dict:
    """An eps-DP release (randomized response, discrete Laplace, Laplace).

    Examples
    --------
    >>> from secure_auc.dp.events import pure_event, compose
    >>> compose([pure_event(0.5)] * 4, 0.0).epsilon  # pure DP, delta = 0: basic composition
    2.0
    """
    return {"kind": "pure", "epsilon": float(epsilon)}


def gaussian_event(noise_multiplier: float) -> dict:
    """A continuous Gaussian release with std ``noise_multiplier`` times its sensitivity."""
    return {"kind": "gaussian", "noise_multiplier": float(noise_multiplier)}


def zcdp_event(rho: float, xi: float = 0.0) -> dict:
    """An (xi, rho)-zCDP release (discrete Gaussian, Skellam)."""
    return {"kind": "zcdp", "rho": float(rho), "xi": float(xi)}


def skellam_event(mu: float, sensitivity: int) -> dict:
    """Sk(mu) = Pois(mu) - Pois(mu) noise on an integer statistic of sensitivity Delta (``sensitivity``).

    Examples
    --------
    >>> from secure_auc.dp.events import compose, skellam_event
    >>> c = compose([skellam_event(2e6, 1000)] * 10, 1e-6)
    >>> c.accountant, bool(c.pld < c.rdp)
    ('pld', True)
    """
    return {"kind": "skellam", "mu": float(mu), "sensitivity": int(sensitivity)}


def ddg_event(variance: float, shares: int, sensitivity: int) -> dict:
    """h = ``shares`` iid N_Z(0, s^2) shares (s^2 = ``variance``, grid units, s >= 1/2) on an integer
    statistic of sensitivity Delta (``sensitivity``, grid units): the distributed discrete Gaussian.

    Examples
    --------
    Many grid steps of noise: the Gaussian with noise multiplier sqrt(h) s / Delta:

    >>> from secure_auc.dp.events import compose, ddg_event, gaussian_event
    >>> c = compose([ddg_event(1e12, 100, 10**7)], 1e-6)
    >>> g = compose([gaussian_event(1.0)], 1e-6)
    >>> c.accountant, bool(abs(c.epsilon - g.epsilon) < 1e-3)
    ('pld', True)
    """
    return {"kind": "ddg", "variance": float(variance), "shares": int(shares), "sensitivity": int(sensitivity)}


def composed_event(events) -> dict:
    """Several releases of one evaluation (e.g. the two noises of a statistics mechanism)."""
    events = list(events)
    return events[0] if len(events) == 1 else {"kind": "composed", "events": events}


def skellam_zcdp(mu: float, sensitivity: float) -> dict:
    """The zCDP event bounding Sk(mu) on a statistic of (l1 = l2) sensitivity D (module docstring)."""
    d = float(sensitivity)
    rho = d * d / (4 * mu) + d * d / (8 * mu * mu)
    xi = max(0.0, (6 * d - d * d) / (16 * mu * mu))
    return zcdp_event(rho, xi)


def _finite_nonneg(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")
    return float(value)


def check_event(event) -> dict:
    """The event itself if well-formed; ValueError naming the problem otherwise."""
    if not isinstance(event, dict) or "kind" not in event:
        raise ValueError(f"not a privacy event: {event!r}")
    kind = event["kind"]
    if kind in ("none", "noop"):
        return event
    if kind == "pure":
        if _finite_nonneg(event.get("epsilon"), "epsilon") == 0:
            raise ValueError("epsilon of a pure event must be > 0")
    elif kind == "gaussian":
        if _finite_nonneg(event.get("noise_multiplier"), "noise multiplier") == 0:
            raise ValueError("noise multiplier must be > 0")
    elif kind == "zcdp":
        _finite_nonneg(event.get("rho"), "rho")
        _finite_nonneg(event.get("xi", 0.0), "xi")
    elif kind == "skellam":
        if _finite_nonneg(event.get("mu"), "mu") == 0:
            raise ValueError("mu of a Skellam event must be > 0")
        d = event.get("sensitivity")
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"sensitivity of a Skellam event must be an integer >= 1, got {d!r}")
    elif kind == "ddg":
        if _finite_nonneg(event.get("variance"), "variance") < 0.25:
            raise ValueError("the share variance of a ddg event must be at least 1/4 (s >= 1/2)")
        for name in ("shares", "sensitivity"):
            v = event.get(name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} of a ddg event must be an integer >= 1, got {v!r}")
    elif kind == "repeat_select":  # repeat-and-select (Papernot & Steinke 2022) of one release
        check_event(event.get("event"))
        if _finite_nonneg(event.get("mean"), "mean") == 0:
            raise ValueError("the mean number of runs of a repeat_select event must be > 0")
        _finite_nonneg(event.get("shape"), "shape")
    elif kind == "composed":
        parts = event.get("events")
        if not isinstance(parts, list) or not parts:
            raise ValueError("a composed event needs a non-empty list of events")
        for e in parts:
            check_event(e)
    else:
        raise ValueError(f"unknown privacy event kind {kind!r}")
    return event


def _leaves(event):
    if event["kind"] == "composed":
        for e in event["events"]:
            yield from _leaves(e)
    else:
        yield event


def to_dp_event(event: dict, accountant: str = "pld"):
    """The ``dp_accounting.DpEvent`` of ``event`` for the ``pld`` or ``rdp`` accountant (None if unsupported).

    Examples
    --------
    >>> from secure_auc.dp.events import composed_event, pure_event, to_dp_event, gaussian_event
    >>> type(to_dp_event(composed_event([pure_event(1.0), gaussian_event(3.0)]))).__name__
    'ComposedDpEvent'
    >>> to_dp_event({"kind": "zcdp", "rho": 0.1, "xi": 0.0}, "pld") is None
    True
    """
    import dp_accounting as dpa

    kind = event["kind"]
    if kind == "none":
        return dpa.NonPrivateDpEvent()
    if kind == "noop":
        return dpa.NoOpDpEvent()
    if kind == "composed":
        parts = [to_dp_event(e, accountant) for e in event["events"]]
        return None if any(p is None for p in parts) else dpa.ComposedDpEvent(parts)
    if kind == "pure":
        eps = event["epsilon"]
        if accountant == "pld":
            return dpa.dp_event.DiscreteLaplaceDpEvent(noise_parameter=eps, sensitivity=1)
        return dpa.RandomizedResponseDpEvent(noise_parameter=2.0 / (1.0 + math.exp(eps)), num_buckets=2)
    if kind == "gaussian":
        return dpa.GaussianDpEvent(event["noise_multiplier"])
    if kind == "zcdp":
        return None if accountant == "pld" else dpa.ZCDpEvent(rho=event["rho"], xi=event.get("xi", 0.0))
    if kind == "skellam":
        if accountant == "pld":
            return _skellam_classes()[0](event["mu"], event["sensitivity"])
        z = skellam_zcdp(event["mu"], event["sensitivity"])
        return dpa.ZCDpEvent(rho=z["rho"], xi=z["xi"])
    if kind == "ddg":
        return _ddg_classes()[0](event["variance"], event["shares"], event["sensitivity"])
    if kind == "repeat_select":  # dp-accounting's RDP accountant only
        inner = to_dp_event(event["event"], "rdp")
        return None if accountant == "pld" or inner is None else \
            dpa.dp_event.RepeatAndSelectDpEvent(inner, event["mean"], event["shape"])
    raise ValueError(f"unknown privacy event kind {kind!r}")


@lru_cache(maxsize=1)
def _skellam_classes():
    """SkellamDpEvent and a PLDAccountant that composes it (dp-accounting's extension point),
    made once."""
    import dp_accounting as dpa
    from dp_accounting.pld import PLDAccountant

    @dataclass(frozen=True)
    class SkellamDpEvent(dpa.DpEvent):
        """Sk(mu) noise on an integer statistic of sensitivity Delta."""

        mu: float
        sensitivity: int

    class SkellamPLDAccountant(PLDAccountant):
        """``PLDAccountant`` that also composes :class:`SkellamDpEvent` (PLD of :mod:`.skellam_pld`)."""

        def _maybe_compose(self, event, count, do_compose):
            if (do_compose and isinstance(event, dpa.dp_event.DiscreteLaplaceDpEvent) and event.noise_parameter != 0
                    and self.neighboring_relation.name in _DLAP_RELATIONS):
                # as PLDAccountant's own branch (the pure events), self-composed by pld_compose
                from dp_accounting.pld.privacy_loss_distribution import from_discrete_laplace_mechanism

                from .pld_compose import self_compose

                pld = from_discrete_laplace_mechanism(event.noise_parameter, sensitivity=event.sensitivity,
                                                      value_discretization_interval=self._value_discretization_interval)
                self._pld = self._pld.compose(self_compose(pld, count))
                return None
            if not isinstance(event, SkellamDpEvent):
                return super()._maybe_compose(event, count, do_compose)
            if do_compose:
                from .pld_compose import self_compose
                from .skellam_pld import skellam_pld

                pld = skellam_pld(event.mu, event.sensitivity, self._value_discretization_interval)
                self._pld = self._pld.compose(self_compose(pld, count))
            return None

    return SkellamDpEvent, SkellamPLDAccountant


@lru_cache(maxsize=1)
def _ddg_classes():
    """DdgDpEvent, and the PLD and RDP accountants that compose it (and Skellam events), made once."""
    import dp_accounting as dpa
    from dp_accounting.rdp import RdpAccountant

    @dataclass(frozen=True)
    class DdgDpEvent(dpa.DpEvent):
        """h iid N_Z(0, s^2) shares on an integer statistic of sensitivity Delta."""

        variance: float
        shares: int
        sensitivity: int

    class DdgPLDAccountant(_skellam_classes()[1]):
        """Composes :class:`DdgDpEvent` as N_Z(0, h s^2) plus the pointwise correction L (module docstring)."""

        shift = 0.0

        def _maybe_compose(self, event, count, do_compose):
            if not isinstance(event, DdgDpEvent):
                return super()._maybe_compose(event, count, do_compose)
            if do_compose:
                from .ddg import ddg_max_divergence, dgauss_pld
                from .pld_compose import self_compose

                pld = dgauss_pld(math.sqrt(event.shares * event.variance), event.sensitivity,
                                 self._value_discretization_interval)
                self._pld = self._pld.compose(self_compose(pld, count))
                self.shift += count * ddg_max_divergence(event.variance, event.shares)
            return None

        def get_epsilon(self, target_delta):
            if self.shift == 0.0:
                return super().get_epsilon(target_delta)
            return super().get_epsilon(target_delta * math.exp(-self.shift)) + self.shift

    class DdgRdpAccountant(RdpAccountant):
        """``RdpAccountant`` that also composes :class:`DdgDpEvent` (Proposition 14, :func:`.ddg.ddg_rdp`)."""

        def _maybe_compose(self, event, count, do_compose):
            if (do_compose and isinstance(event, dpa.RandomizedResponseDpEvent)
                    and self._neighboring_relation.name in _RR_RELATIONS):
                # as RdpAccountant's own branch (count times the event's RDP curve), with the curve
                # of each (p, k, orders) computed once: a ledger composes the same pure event again
                # at every reservation, and the curve takes 600 logsumexp calls
                self._rdp += count * _rr_rdp(event.noise_parameter, event.num_buckets, tuple(self._orders),
                                             self._neighboring_relation)
                return None
            if not isinstance(event, DdgDpEvent):
                return super()._maybe_compose(event, count, do_compose)
            if do_compose:
                from .ddg import ddg_rdp

                self._rdp += count * ddg_rdp(np.asarray(self._orders), event.variance, event.shares,
                                             event.sensitivity)
            return None

    return DdgDpEvent, DdgPLDAccountant, DdgRdpAccountant


_RR_RELATIONS = ("REPLACE_ONE", "REPLACE_SPECIAL")  # NeighboringRelation names RdpAccountant composes RR under
_DLAP_RELATIONS = ("ADD_OR_REMOVE_ONE", "REPLACE_SPECIAL")  # and PLDAccountant the discrete Laplace


@lru_cache(maxsize=1024)
def _rr_rdp(noise_parameter: float, num_buckets: int, orders: tuple, relation) -> np.ndarray:
    """dp-accounting's RDP curve of randomized response at ``orders`` (read-only: it is shared)."""
    from dp_accounting.rdp.rdp_privacy_accountant import _compute_randomized_response_rdp

    curve = np.asarray(_compute_randomized_response_rdp(noise_parameter, num_buckets, np.array(orders), relation),
                       dtype=np.float64)
    curve.flags.writeable = False
    return curve


@dataclass(frozen=True)
class Composition:
    """(eps, delta) of a sequence of releases: the tightest accountant's, and each accountant's eps.

    ``basic`` is (sum eps, sum delta) over the releases' nominal budgets; ``rdp``
    and ``pld`` are eps at ``delta`` (None where an event is not supported).
    """

    epsilon: float
    delta: float
    accountant: str
    basic: tuple[float, float]
    rdp: float | None
    pld: float | None


_RDP_ORDERS = np.concatenate([np.linspace(1.01, 8, 200), np.geomspace(8.1, 1e5, 400)])


def _grouped(events, accountant: str):
    """(DpEvent, count) per distinct event: identical releases are self-composed (fast for PLD)."""
    import json

    counts: dict[str, int] = {}
    for e in events:
        key = json.dumps(e, sort_keys=True)
        counts[key] = counts.get(key, 0) + 1
    return [(to_dp_event(json.loads(k), accountant), n) for k, n in counts.items()]


def _pld_epsilon(events, delta: float) -> float | None:
    parts = _grouped(events, "pld")
    if any(p is None for p, _ in parts):
        return None
    acc = _ddg_classes()[1](value_discretization_interval=1e-4)
    for p, n in parts:
        acc.compose(p, n)
    return float(acc.get_epsilon(delta))


def _rdp_epsilon(events, delta: float) -> float | None:
    import dp_accounting as dpa

    parts = _grouped(events, "rdp")
    if any(p is None for p, _ in parts) or delta <= 0:
        return None
    acc = _ddg_classes()[2](orders=list(_RDP_ORDERS), neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    for p, n in parts:
        acc.compose(p, n)
    return float(acc.get_epsilon(delta))


def compose(events, delta: float, nominal=None) -> Composition:
    """Compose the releases ``events`` and report eps at ``delta`` with the tightest accountant.

    Parameters
    ----------
    events : list of dict
        Privacy events (:func:`pure_event`, ...), one per release.
    delta : float
        Target delta, in [0, 1).
    nominal : list of (eps, delta), optional
        Each release's nominal budget, for basic composition; default: the
        pure events' eps (basic composition is then valid only when every event is pure).

    Returns
    -------
    Composition

    Examples
    --------
    100 releases of 0.1-DP each: basic composition says eps = 10; at delta = 1e-6
    the PLD accountant finds far less:

    >>> from secure_auc.dp.events import compose, pure_event
    >>> c = compose([pure_event(0.1)] * 100, 1e-6)
    >>> c.basic, c.accountant, bool(4.0 < c.epsilon < 5.0)
    ((10.0, 0.0), 'pld', True)
    """
    events = [check_event(e) for e in events]
    if any(leaf["kind"] == "none" for e in events for leaf in _leaves(e)):
        inf = float("inf")
        return Composition(inf, 0.0, "none", (inf, 0.0), inf, inf)
    if nominal is None:
        pure = all(leaf["kind"] in ("pure", "noop") for e in events for leaf in _leaves(e))
        nominal = [(sum(leaf.get("epsilon", 0.0) for leaf in _leaves(e)), 0.0) for e in events] if pure else None
    basic = None if nominal is None else (math.fsum(n[0] for n in nominal), math.fsum(n[1] for n in nominal))
    if not events:
        return Composition(0.0, 0.0, "none", (0.0, 0.0), 0.0, 0.0)
    rdp = _rdp_epsilon(events, delta) if delta > 0 else None
    pld = _pld_epsilon(events, delta)
    options = []
    if basic is not None and basic[1] <= delta * (1 + 1e-12):
        options.append((basic[0], "basic"))
    if rdp is not None:
        options.append((rdp, "rdp"))
    if pld is not None:
        options.append((pld, "pld"))
    if not options:
        raise ValueError("no accountant supports these events at this delta")
    eps, name = min(options)
    return Composition(eps, float(delta) if name != "basic" else basic[1], name,
                       basic if basic is not None else (float("nan"), float("nan")), rdp, pld)
