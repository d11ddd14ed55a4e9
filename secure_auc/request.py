"""One evaluation as a command line asks for it: a plain request, checked before it is made,
and the run that turns it into a result.

    ``secure-auc evaluate`` options  ->  EvaluationRequest (secure_auc.cli, every check done)
    -> run_request: the clients' data read or generated, the mechanism built (or the plan of
       T evaluations made), the privacy ledger opened, the evaluation run
    -> an Outcome: the result, where the data came from, the report's entries (printed and
       written by the command line; nothing is printed or written here)

Examples
--------
>>> from secure_auc.dp.family import MechanismChoice
>>> from secure_auc.dp.registry import family
>>> laplace = family("laplace")
>>> choice = MechanismChoice(laplace, laplace.resolve({"epsilon": 2.0}), {"epsilon": 2.0})
>>> request = EvaluationRequest(DataRequest(clients=3, samples=3000), choice, protocol="plain", seed=1)
>>> outcome = run_request(request)
>>> outcome.source, outcome.result.clients, outcome.result.samples, outcome.result.epsilon
('built-in Criteo-like dataset, iid split', 3, 3000, 2.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .dp.family import MechanismChoice
from .evaluate import EvaluationResult, builtin_clients, evaluate, load_clients
from .report.output import REPORT_KEYS

__all__ = ["DataRequest", "EvaluationRequest", "Outcome", "run_request"]


@dataclass(frozen=True)
class DataRequest:
    """The clients' data: client ``files`` (with their columns), or else the built-in
    Criteo-like dataset (:func:`secure_auc.builtin_clients`; ``large``: the paper's large set)."""

    files: tuple = ()
    score_column: str | None = None
    label_column: str | None = None
    id_column: str | None = None
    clients: int = 10
    partition: str = "iid"
    samples: int | None = None
    auc: float | None = None
    base_rate: float | None = None
    data_seed: int = 0
    large: bool = False

    def source(self) -> str:
        """Where the data come from, in words."""
        if self.files:
            return f"{len(self.files)} client file(s)"
        return f"built-in Criteo-like dataset{' (large)' if self.large else ''}, {self.partition} split"

    def load(self) -> list:
        """One :class:`secure_auc.data.io.ClientData` per client."""
        if self.files:
            return load_clients(list(self.files), score_column=self.score_column, label_column=self.label_column,
                                id_column=self.id_column)
        samples, auc, base_rate = self.samples, self.auc, self.base_rate
        if self.large:
            from .data import CRITEO_LARGE as spec

            samples, base_rate, auc = spec.samples, spec.positives / spec.samples, spec.auc
        return builtin_clients(self.clients, self.partition, samples=samples, auc=auc, base_rate=base_rate,
                               data_seed=self.data_seed)


@dataclass(frozen=True)
class EvaluationRequest:
    """One evaluation, every option checked: the data, the mechanism (its family and options),
    the protocol and its options, the privacy ledger and the whole-evaluation report.

    ``evaluations``: T, with the mechanism's epsilon/delta the total of T evaluations (this one
    gets the planned share); ``budget``: (eps, delta) set on the ledger (else the plan's total
    when planning); ``metrics``: a :class:`secure_auc.report.spec.ReportSpec`, or None."""

    data: DataRequest
    choice: MechanismChoice
    protocol: str = "mpc"
    seed: int | None = None
    mpc_options: dict | None = None
    evaluations: int | None = None
    ledger: str | None = None
    budget: tuple | None = None
    dataset: str | None = None
    metrics: object = None


@dataclass
class Outcome:
    """What a request gave: the ``result``, the data's ``source`` in words, the whole
    evaluation's ``report`` (its entries of ``result.extra``, empty without metrics) and
    whether the mechanism ``flips`` labels (randomized response)."""

    result: EvaluationResult
    source: str
    report: dict = field(default_factory=dict)
    flips: bool = False


def run_request(request: EvaluationRequest, *, progress=None) -> Outcome:
    """Run ``request``: its data, its mechanism (or plan), its ledger, the evaluation.

    ``progress(step, steps)`` follows the planning of T evaluations.  Nothing is printed
    or written, except the ledger's charge."""
    data = request.data
    clients = data.load()
    choice = request.choice
    plan = None
    if request.evaluations is not None:
        plan = choice.plan(len(clients), total=sum(len(c) for c in clients), progress=progress)
    mechanism = plan.mechanism if plan else choice.mechanism(len(clients))
    ledger = None
    if request.ledger:
        from .dp.accountant import Ledger

        ledger = Ledger(request.ledger)
        budget = request.budget or (choice.total if plan else None)
        if budget is not None:
            ledger.set_budget(*budget)
    result = evaluate(clients, mechanism, protocol=request.protocol, seed=request.seed,
                      mpc_options=request.mpc_options, ledger=ledger, dataset_name=request.dataset,
                      reference=True, metrics=request.metrics)
    if plan:
        result.extra["plan"] = plan.summary()
    report = {k: result.extra[k] for k in REPORT_KEYS if k in result.extra}
    return Outcome(result, data.source(), report, choice.family.flips_labels)
