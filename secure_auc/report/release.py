"""One report: the AUC's mechanism at its share of eps, the other releases at theirs, one
composed cost for the ledger, and the plain protocol's client and server steps.

The total eps (and delta) the user gives is the mechanism's; :func:`plan_report` splits it
(:func:`.spec.split_budget`): the AUC is released by the same mechanism at ``share * eps``
(its std is exactly the std of that mechanism alone at that eps), every other release adds
discrete Laplace noise at its own share (pure eps-DP).  :class:`ReportCost` is what the ledger
charges: one record per client per evaluation, whose privacy event composes the releases
(:func:`secure_auc.dp.events.composed_event`; the PLD accountant composes them, basic
composition bounds the total by the sum of the shares, i.e. the user's eps).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np

from ..dp.base import PrivacyCost
from ..dp.streams import KeyStreams
from .derive import derive
from .spec import ReportSpec
from .stats import Layout, client_vectors, noise_vectors

__all__ = ["ReportCost", "ReportMessage", "ReportPlan", "plan_report", "report_plan", "host_report", "report_stream", "client_report",
           "server_report"]


@dataclass(frozen=True)
class ReportPlan:
    """The public parameters of a report's release that every party of the MPC protocol holds:
    the spec, each release's eps (sorted pairs), the noise kind and, for noise on the
    aggregate, the number of shares that make one noise."""

    spec: ReportSpec
    epsilons: tuple
    kind: str = "client"
    shares: int | None = None

    @property
    def eps(self) -> dict:
        return dict(self.epsilons)

    def layout(self, total: int) -> Layout:
        return Layout(self.spec, total)

    def derive(self, vector, total: int, clients: int) -> dict:
        """The server's metrics from the opened aggregate vector."""
        out = derive(Layout(self.spec, total), np.asarray(vector, dtype=np.int64), self.eps, clients, self.kind,
                     shares=self.shares)
        return out


@dataclass(frozen=True)
class ReportMessage:
    """A client's noisy report vector (int64; :mod:`.stats`), as the plain protocol's server gets it."""

    client: int
    vector: tuple


class ReportCost:
    """The privacy cost of one evaluation with a report (what a ledger records).

    Parameters
    ----------
    total : Mechanism
        The mechanism as the user gave it (its eps and delta are the evaluation's).
    auc : Mechanism
        The AUC's mechanism at its share.
    epsilons : dict
        The other releases' eps.

    Examples
    --------
    >>> from secure_auc import make_mechanism
    >>> from secure_auc.report.release import plan_report
    >>> from secure_auc.report import ReportSpec
    >>> auc, eps, kind, cost = plan_report(make_mechanism("laplace", 1.0), ReportSpec(["auc", "roc"]))
    >>> auc.cost.epsilon, eps, kind, cost.cost.epsilon
    (0.5, {'bands': 0.5}, 'client', 1.0)
    >>> cost.privacy_event(1000)["kind"]
    'composed'
    """

    def __init__(self, total, auc, epsilons: dict):
        self.total, self.auc, self.epsilons = total, auc, dict(epsilons)
        # randomized response's flips may be reused for free under one seed, a report's noise never:
        # with a report, RR is a noise mechanism for the ledger (a seed is never used twice)
        from ..dp.registry import flips_labels

        self.name = f"{total.name}+report" if epsilons and flips_labels(total.name) else total.name

    @property
    def cost(self) -> PrivacyCost:
        return self.total.cost

    def privacy_event(self, total: int | None = None) -> dict:
        from ..dp.events import composed_event, pure_event

        if self.total.cost.epsilon == float("inf"):
            return self.total.privacy_event(total)
        return composed_event([self.auc.privacy_event(total)] + [pure_event(e) for e in self.epsilons.values()])

    def describe(self) -> dict:
        return self.total.describe()


def _scaled(mechanism, share: float):
    eps = getattr(mechanism, "epsilon", None)
    if eps is None or share == 1.0 or not np.isfinite(eps):
        return mechanism
    return dataclasses.replace(mechanism, epsilon=float(eps) * share)


def plan_report(mechanism, spec: ReportSpec):
    """``(auc_mechanism, epsilons, kind, cost)``: the AUC's mechanism at its share of eps, the
    other releases' eps (empty without noise), the noise kind (``aggregate`` with the
    ``distributed`` mechanism, else ``client``) and the :class:`ReportCost`."""
    shares = spec.shares
    auc = _scaled(mechanism, shares.get("auc", 1.0))
    eps = getattr(mechanism, "epsilon", None)
    private = mechanism.cost.epsilon != float("inf") and eps is not None
    epsilons = {g: float(eps) * s for g, s in shares.items() if g != "auc"} if private else {}
    kind = "aggregate" if getattr(mechanism, "needs_secure_sum", False) else "client"
    return auc, epsilons, kind, ReportCost(mechanism, auc, epsilons)


def check_report_range(spec: ReportSpec, epsilons: dict, clients: int, total: int) -> None:
    """Refuse eps so small that the report's noise could leave the 64-bit integers the vectors
    are added in: 40 standard deviations of the summed noise of the largest entry, plus its
    largest exact value (M times its sensitivity), must stay below 2^62.

    Examples
    --------
    >>> from secure_auc.report import ReportSpec
    >>> from secure_auc.report.release import check_report_range
    >>> check_report_range(ReportSpec(["logloss"]), {"log_loss": 0.05}, 10, 458_407)
    >>> check_report_range(ReportSpec(["logloss"]), {"log_loss": 1e-10}, 10, 458_407)
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: eps = 1e-10 for the report's log_loss needs noise beyond the range of its 64-bit sums; use a larger eps
    """
    from ..validation import InputError

    layout = Layout(spec, max(int(total), 2))
    scale = layout.scales(epsilons)
    for g in set(layout.group):
        idx = np.flatnonzero((layout.groups == g) & (layout.sensitivity > 0))
        if not idx.size:
            continue
        sd = float(np.max(scale[idx])) * np.sqrt(2.0 * clients)
        if not 40.0 * sd + float(total) * float(np.max(layout.sensitivity[idx])) < 2.0**62:
            raise InputError(f"eps = {epsilons[g]:g} for the report's {g} needs noise beyond the range of its 64-bit "
                             "sums; use a larger eps")


def report_plan(spec: ReportSpec, epsilons: dict, kind: str, mechanism, clients: int) -> ReportPlan:
    """The :class:`ReportPlan` of a run with ``clients`` clients: with noise on the aggregate,
    the shares of the honest clients alone make one noise (as the ``distributed`` mechanism's)."""
    shares = None
    if kind == "aggregate":
        honest_of = getattr(mechanism, "honest_of", None)
        shares = int(honest_of(clients)) if honest_of is not None else int(clients)
    return ReportPlan(spec, tuple(sorted(epsilons.items())), kind, shares)


def report_stream(spec: ReportSpec, epsilons: dict, kind: str) -> str:
    """The name of the clients' noise stream of a report (a hash of its public parameters)."""
    text = repr((spec, sorted(epsilons.items()), kind))
    return "report|" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def client_report(layout: Layout, twice_ranks, labels, scores, owner, keys, epsilons: dict, kind: str,
                  shares: int | None = None) -> np.ndarray:
    """The noisy report vectors of clients hosted together (shape (K, width)), each with its own
    noise from its own key (what each would compute alone)."""
    k = len(keys)
    exact = client_vectors(layout, twice_ranks, labels, scores, owner, k)
    if not epsilons:
        return exact
    src = KeyStreams(list(keys), report_stream(layout.spec, epsilons, kind))
    return exact + noise_vectors(layout, epsilons, src, k, kind, shares=shares)


def server_report(layout: Layout, vectors, epsilons: dict, clients: int, kind: str) -> dict:
    """The server's metrics from the clients' vectors (their sum is all it uses)."""
    agg = np.sum(np.asarray(vectors, dtype=np.int64).reshape(-1, layout.width), axis=0)
    return derive(layout, agg, epsilons, clients, kind)


def host_report(plan: ReportPlan, clients, twice, total: int, keys) -> np.ndarray:
    """At a client host of the MPC protocol: the sum of its clients' noisy report vectors, each
    from the client's ranks, true labels, scores and own key (int64, the layout's width)."""
    layout = plan.layout(total)
    sizes = [len(c) for c in clients]
    owner = np.repeat(np.arange(len(clients), dtype=np.int64), sizes)
    labels = np.concatenate([c.labels for c in clients])
    scores = np.concatenate([c.scores for c in clients])
    return client_report(layout, np.asarray(twice, dtype=np.int64), labels, scores, owner, keys, plan.eps, plan.kind,
                         plan.shares).sum(axis=0)


def attach_report(plan: ReportPlan, vector, total: int, clients: int, auc_mechanism) -> dict:
    """The ``extra`` entries of a report from the opened aggregate ``vector`` (the server's view):
    the metrics, the eps of each release (``privacy``) and the seconds the derivation took."""
    import time

    start = time.perf_counter()
    out = plan.derive(vector, int(total), int(clients))
    eps = auc_mechanism.cost.epsilon
    out["privacy"] = {"auc": None if eps == float("inf") else float(eps)} | plan.eps
    out["report_seconds"] = round(time.perf_counter() - start, 3)
    return out
