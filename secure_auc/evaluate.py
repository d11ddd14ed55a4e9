"""One evaluation, from client data to the reported AUC.

    client files / built-in data  ->  ClientData per client
    -> Client roles (labels flipped here for RR) and a Server role
    -> the protocol runs (plain: :mod:`secure_auc.protocol.plain`, in-process;
       mpc: :mod:`secure_auc.mpc.launch`, one CrypTen process per party)
    -> the server's Estimate  ->  EvaluationResult (what the CLI prints)
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .data.io import ClientData, read_client_file, same_files
from .data.partition import partition_indices
from .dp.accountant import finishing
from .dp.rng import client_key, client_rngs, release_seed
from .metrics import rank_auc
from .protocol.client import Client
from .protocol.server import Server
from .protocol.plain import run_plain
from .result import (EvaluationResult, public_statistics, describe, error_bars,  # noqa: F401 - re-exported
                     error_interval, make_result, privacy_spent)
from .validation import InputError, check_secret_seed

__all__ = ["EvaluationResult", "builtin_clients", "load_clients", "check_clients", "evaluate", "describe",
           "error_bars", "error_interval", "check_fixed_point_range", "make_result", "privacy_spent"]


def builtin_clients(
    clients: int = 10,
    partition: str = "iid",
    *,
    samples: int | None = None,
    auc: float | None = None,
    base_rate: float | None = None,
    data_seed: int = 0,
) -> list[ClientData]:
    """The built-in Criteo-like data (:func:`secure_auc.data.make_ctr_dataset`) split over clients.

    The data are binormal scores whose population AUC is ``auc``, rounded to
    float32; the same arguments always give the same clients.

    Parameters
    ----------
    clients : int, default 10
        K, the number of clients.
    partition : {"iid", "noniid"}, default "iid"
        ``iid``: a random permutation (seeded by ``data_seed``) cut into K
        near-equal blocks; ``noniid``: the samples sorted by score and cut into
        K consecutive blocks.  The first ``M mod K`` clients get one more sample.
    samples : int, optional
        M; default 458,407 (the paper's small Criteo evaluation set).
    auc : float, optional
        Population AUC in [0.5, 1); default 0.7494 (the paper's first epoch).
    base_rate : float, optional
        P / M in (0, 1); default 117,317 / 458,407 (the paper's set).
    data_seed : int, default 0
        Seed of the data and of the IID partition.

    Returns
    -------
    list of ClientData
        Client k's ``source`` is ``"built-in client k"``.

    Raises
    ------
    InputError
        If ``samples < 2``, ``auc`` or ``base_rate`` is out of range,
        ``clients`` is not between 1 and M, or ``partition`` is unknown.

    Examples
    --------
    >>> from secure_auc import builtin_clients
    >>> clients = builtin_clients(3, samples=2000)
    >>> [len(c) for c in clients], sum(int(c.labels.sum()) for c in clients)
    ([667, 667, 666], 512)
    >>> bands = builtin_clients(2, "noniid", samples=2000)
    >>> bool(bands[0].scores.max() <= bands[1].scores.min())
    True
    """
    from .data.synthetic import make_ctr_dataset  # scipy's: loaded by the built-in data only

    kwargs = {"seed": data_seed, "base_rate": base_rate}
    if samples is not None:
        kwargs["samples"] = samples
    if auc is not None:
        kwargs["auc"] = auc
    scores, labels = make_ctr_dataset(**kwargs)
    parts = partition_indices(scores, clients, partition, seed=data_seed)
    return [ClientData(scores[i], labels[i], f"built-in client {k}") for k, i in enumerate(parts)]


def check_arguments(mechanism, *, protocol: str, seed, ledger, mpc_options, dataset_name=None) -> None:
    """Refuse arguments of :func:`evaluate` that are of the wrong kind or have no effect, each
    in one line naming the argument (the command line refuses the same)."""
    if protocol not in ("plain", "mpc"):
        raise InputError(f"protocol must be 'plain' or 'mpc', got {protocol!r}")
    if mechanism is not None and not hasattr(mechanism, "for_clients"):
        from .dp.registry import FAMILIES, family

        hint = "" if not isinstance(mechanism, str) else \
            f" (e.g. make_mechanism({mechanism!r}{'' if mechanism in FAMILIES and not family(mechanism).private else ', 1.0'}))"
        raise InputError(f"mechanism must come from secure_auc.make_mechanism{hint}, got {mechanism!r}")
    if seed is not None:
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
            raise InputError(f"seed must be an integer, got {seed!r}")
    if ledger is not None and not hasattr(ledger, "reserve"):
        raise InputError(f"ledger must be a secure_auc.Ledger (Ledger(path)), got {ledger!r}")
    if dataset_name is not None and ledger is None:
        raise InputError("dataset_name names the clients' datasets in a ledger's report: it needs a ledger")
    if mpc_options:
        if protocol != "mpc":
            raise InputError(f"mpc_options apply to protocol='mpc' only, got {sorted(mpc_options)} with 'plain'")
        from .mpc import MPC_OPTIONS

        unknown = sorted(set(mpc_options) - set(MPC_OPTIONS))
        if unknown:
            raise InputError(f"mpc_options: unknown option(s) {', '.join(unknown)} (known: {', '.join(MPC_OPTIONS)})")


def load_clients(paths: list[str | Path], *, score_column: str | None = None,
                 label_column: str | None = None, id_column: str | None = None) -> list[ClientData]:
    """Read one client file per path with :func:`secure_auc.data.io.read_client_file`.

    Parameters
    ----------
    paths : list of str or pathlib.Path
        One file per client (CSV, gzip-compressed CSV or Parquet), in client order.
    score_column, label_column : str, optional
        The columns of the scores and labels (default ``score`` and ``label``).
    id_column : str, optional
        A column of record identifiers, read for the privacy ledger (default none).

    Returns
    -------
    list of ClientData
        Client k holds the k-th file.

    Raises
    ------
    InputError
        From the first file that cannot be read, naming it, or if one file is
        given twice (under any spelling: :func:`secure_auc.data.io.same_files`).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from secure_auc import load_clients
    >>> from secure_auc.data.io import write_client_csv
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     paths = [Path(tmp) / "a.csv", Path(tmp) / "b.csv"]
    ...     write_client_csv(paths[0], [0.9, 0.1], [1, 0])
    ...     write_client_csv(paths[1], [0.6], [0])
    ...     clients = load_clients(paths)
    >>> [len(c) for c in clients]
    [2, 1]
    """
    if isinstance(paths, (str, bytes, Path)):
        raise InputError(f"load_clients takes a list of paths, one per client, got one path: {paths!r}")
    same_files(paths)
    return [read_client_file(p, score_column=score_column or "score", label_column=label_column or "label",
                             id_column=id_column) for p in paths]


def check_clients(clients: list[ClientData]) -> None:
    """Refuse inputs whose AUC is undefined (checked where all data is at hand).

    Parameters
    ----------
    clients : list of ClientData

    Raises
    ------
    InputError
        If there are no clients, or all labels of all clients are of one class.

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc import ClientData
    >>> from secure_auc.evaluate import check_clients
    >>> check_clients([ClientData(np.array([0.3]), np.array([0])), ClientData(np.array([0.8]), np.array([1]))])
    >>> check_clients([ClientData(np.array([0.3, 0.8]), np.array([1, 1]))])
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: all 2 labels across all 1 clients are positive (1): AUC is undefined
    """
    if not clients:
        raise InputError("no clients")
    for k, c in enumerate(clients):
        if not isinstance(c, ClientData):
            raise InputError(f"clients[{k}] must be a ClientData(scores, labels), got {type(c).__name__}")
    positives = sum(int(c.labels.sum()) for c in clients)
    total = sum(len(c) for c in clients)
    if positives == 0 or positives == total:
        kind = "negative (0)" if positives == 0 else "positive (1)"
        raise InputError(
            f"all {total} labels across all {len(clients)} clients are {kind}: AUC is undefined"
        )


FIXED_POINT_LIMIT = 2.0**54  # |value| of a released statistic: 64-bit integers with 8 fractional bits, 2 bits spare


def check_fixed_point_range(mechanism, total: int, sizes) -> None:
    """Refuse budgets whose noise cannot be held by the released fixed-point statistics.

    The clients release localSum'_k and localP'_k as 64-bit integers with 8
    fractional bits (:data:`secure_auc.protocol.messages.FRACTION_BITS`); their sum must
    stay below 2^54 in magnitude (2 bits spare).  The check bounds it by
    M^2 / 2 plus 40 standard deviations of the summed noise (a Laplace or
    Gaussian variable exceeds that with probability below 1e-24), the noise
    calibrated as for an IID layout with the largest sensitivity (M - 1).

    Raises
    ------
    InputError
        Saying the noise's standard deviation and the limit.

    Examples
    --------
    >>> from secure_auc import make_mechanism
    >>> from secure_auc.evaluate import check_fixed_point_range
    >>> check_fixed_point_range(make_mechanism("laplace", 1e-6, allocation="split"), 458_407, [45_841] * 10)
    >>> check_fixed_point_range(make_mechanism("laplace", 1e-6, allocation="split"), 10**8, [10**7] * 10)
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: eps = 1e-06 needs noise of standard deviation 8.9e+14 on the rank sum ...
    """
    from .dp.distributed import DistributedNoiseMechanism
    from .dp.mechanisms import StatisticsMechanism

    k = len(sizes)
    stats = public_statistics(sizes, 1.0, total)
    if isinstance(mechanism, StatisticsMechanism):
        al = mechanism.allocate(stats, total)
        fam = mechanism.family
        var = np.sum((al.c1 * fam.std(al.eps1)) ** 2 + (al.c2 * fam.std(np.where(al.c2 == 0, 1.0, al.eps2))) ** 2)
    elif isinstance(mechanism, DistributedNoiseMechanism):
        var_c, var_p = mechanism.noise_variance(total, k)
        var = var_c + ((total - 1) / 2.0) ** 2 * var_p
    else:
        return
    sd = float(np.sqrt(var))
    if not (total * total / 2.0 + 40.0 * sd < FIXED_POINT_LIMIT):
        cost = mechanism.cost
        raise InputError(
            f"eps = {cost.epsilon:g}" + (f", delta = {cost.delta:g}" if cost.delta else "")
            + f" needs noise of standard deviation {sd:.1e} on the rank sum of M = {total:,} samples: beyond "
            f"the range of the released fixed-point statistics (|x| < 2^54 = {FIXED_POINT_LIMIT:.1e}, 64-bit "
            "integers with 8 fractional bits), so the estimate would be meaningless; use a larger eps")


def _reference_auc(clients: list[ClientData]) -> float:
    return rank_auc(
        np.concatenate([c.labels for c in clients]), np.concatenate([c.scores for c in clients])
    )


def plain_report(roles, clients, report, inbox) -> dict:
    """The report's step in the plain protocol: each client's noisy report vector (from its
    ranks, its true labels, its scores and its own key) goes to the server, which sums them
    and derives the metrics (:mod:`secure_auc.report`)."""
    from .report.release import ReportMessage, client_report, server_report
    from .report.stats import Layout

    spec, epsilons, kind, _, _ = report
    total = sum(len(c) for c in clients)
    layout = Layout(spec, total)
    start = time.perf_counter()
    vectors = []
    for role, data in zip(roles, clients):
        twice = np.rint(2.0 * role.ranks).astype(np.int64)
        v = client_report(layout, twice, data.labels, data.scores, np.zeros(len(data), dtype=np.int64),
                          role.keys, epsilons, kind)[0]
        vectors.append(inbox.deliver(ReportMessage(role.index, tuple(int(x) for x in v))).vector)
    out = server_report(layout, vectors, epsilons, len(clients), kind)
    out["privacy"] = {"auc": role.mechanism.cost.epsilon if role.mechanism.cost.epsilon != float("inf") else None} | {
        g: e for g, e in epsilons.items()}
    out["report_seconds"] = round(time.perf_counter() - start, 3)
    return out


def evaluate(
    clients: list[ClientData],
    mechanism=None,
    *,
    protocol: str = "mpc",
    seed: int | None = None,
    reference: bool = False,
    mpc_options: dict | None = None,
    ledger=None,
    dataset_name: str | None = None,
    release: int = 0,
    metrics=None,
    budget: dict | None = None,
) -> EvaluationResult:
    """Run one evaluation; ``reference`` adds the non-private AUC (local runs only).

    ``seed`` fixes every client's noise key (:func:`secure_auc.dp.rng.client_key`)
    for reproducibility.  With ``protocol="mpc"`` client k's key reaches only
    client k's process, and the result does not repeat the seed.

    Client k applies the mechanism's label step (randomized response flips its
    labels), gets the global mid-ranks of its own scores, computes
    (localSum_k, localP_k) and releases them with its own noise; the server
    sums the releases and applies eq. (1),
    AUC = (globalSum - P (P - 1) / 2) / (P N), debiased where the mechanism
    needs it.  In the plain protocol the server sorts the clients' (shuffled)
    scores itself; in the MPC protocol the ranks are computed on secret shares
    and the server opens only the aggregated sums.  Both give bit-identical
    estimates for the same noise keys.

    Parameters
    ----------
    clients : list of ClientData
        One entry per client (K >= 1).
    mechanism : Mechanism, optional
        From :func:`secure_auc.make_mechanism`; default the command line's:
        Laplace noise with the adaptive allocation, eps = 1 (``make_mechanism("none")``
        is the exact, non-private computation).
    protocol : {"mpc", "plain"}, default "mpc"
        ``mpc`` (as on the command line): the secret-shared protocol with one local
        process per party, a one-evaluation :class:`secure_auc.mpc.session.LocalSession`
        (imports torch and CrypTen only then; ``extra["startup_seconds"]`` is the
        parties' start-up, which ``seconds`` leaves out).  ``plain``: the
        paper's plain-sort protocol in this process (the server sees every score).
    seed : int, optional
        Seed of the clients' noise keys; None draws fresh keys from
        :mod:`secrets`.  Never reuse a seed for two noisy releases
        (:class:`secure_auc.Ledger` refuses it).  With ``protocol="mpc"`` it
        must be a secret in [2^128, 2^256) (``secrets.randbits(256)``;
        :func:`secure_auc.validation.check_secret_seed`): the server could find
        a smaller one from the aggregate, and with it the exact statistics.
    reference : bool, default False
        Also compute the exact AUC of the pooled data (``reference_auc``,
        ``abs_error``): a non-private number, for local experiments only; a real
        deployment has no party that could.
    mpc_options : dict, optional
        Keyword arguments of :func:`secure_auc.mpc.session.run_mpc_local`
        (e.g. ``provider``, ``sort``, ``timeout``, ``port``).
    ledger : Ledger, optional
        Charge each client's records (its ``ids``; without them its labels as one
        dataset) before the run (:meth:`secure_auc.Ledger.reserve`: refused releases
        never start); the result's ``extra`` then reports the spent budget.
    dataset_name : str, optional
        A name for the clients' datasets in the ledger's report.
    release : int, default 0
        The index of this release under ``seed`` (a metric object counts its releases):
        the clients' keys come from :func:`secure_auc.dp.rng.release_seed` ``(seed, release)``,
        so releases 0, 1, ... under one seed are reproducible and never share noise.
    metrics : list of str or ReportSpec, optional
        The whole evaluation (:mod:`secure_auc.report`): any of ``auc``, ``roc``, ``pr``,
        ``ks``, ``lift``, ``precision-at``, ``calibration``, ``logloss``, ``brier`` (the
        AUC is always released).  The mechanism's eps is the total, split by ``budget``
        (default: half to the AUC, the rest equally); the metrics go into ``extra`` (keys
        ``roc``, ``pr``, ``ks``, ``ks_at``, ``average_precision``, ``lift``, ``gain``,
        ``precision_at``, ``recall_at``, ``calibration``, ``log_loss``, ``brier``, with
        their ``_std`` and ``_interval``), the eps of each release in ``extra["privacy"]``.
        In the MPC protocol (helpers layout) each client's report vector enters as shares
        and only the aggregate is opened, to the server.
    budget : dict, optional
        Shares of the total eps by release (``auc``, ``bands``, ``calibration``,
        ``log_loss``, ``brier``; :func:`secure_auc.report.split_budget`).

    Returns
    -------
    EvaluationResult

    Raises
    ------
    InputError
        If there are no clients, all labels are of one class, the mechanism
        needs a secure sum (``distributed``) but the protocol is ``plain``, the
        protocol is unknown, or (with ``reference``) a label or score is invalid.
    MPCError
        If a party of the MPC protocol fails; the message names the party.

    Examples
    --------
    Two clients, eight samples; without noise the estimate is the exact AUC:

    >>> import numpy as np
    >>> from secure_auc import ClientData, builtin_clients, evaluate, make_mechanism
    >>> clients = [ClientData(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])),
    ...            ClientData(np.array([0.4, 0.4, 0.9, 0.2]), np.array([0, 1, 1, 0]))]
    >>> exact = evaluate(clients, make_mechanism("none"), protocol="plain", reference=True)
    >>> exact.auc, exact.reference_auc, exact.samples, exact.estimated_positives
    (0.8125, 0.8125, 8, 4.0)

    Laplace noise (eps = 1) on 2,000 built-in samples over three clients; the
    same ``seed`` gives the same noise, hence the same estimate:

    >>> clients = builtin_clients(3, samples=2000)
    >>> noisy = evaluate(clients, make_mechanism("laplace", 1.0), protocol="plain", seed=0, reference=True)
    >>> round(noisy.reference_auc, 4), noisy.abs_error < 0.1
    (0.7711, True)
    >>> evaluate(clients, make_mechanism("laplace", 1.0), protocol="plain", seed=0).auc == noisy.auc
    True
    >>> noisy.mechanism, noisy.epsilon, noisy.allocation, noisy.sensitivity, noisy.seed
    ('laplace', 1.0, 'adaptive', None, 0)

    Noise on the aggregate protects only the sum, so it needs the MPC protocol:

    >>> evaluate(clients, make_mechanism("distributed", 1.0, clients=3), protocol="plain")
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: distributed noise protects only the aggregate: ...
    """
    check_arguments(mechanism, protocol=protocol, seed=seed, ledger=ledger, mpc_options=mpc_options,
                    dataset_name=dataset_name)
    if mechanism is None:
        from .dp.registry import DEFAULT_FAMILY, make_mechanism

        mechanism = make_mechanism(DEFAULT_FAMILY, 1.0)  # as the command line's defaults
    check_clients(clients)
    mechanism = mechanism.for_clients(len(clients))  # calibrated for the clients present, or refused
    sizes = [len(c) for c in clients]
    report = None
    if metrics is not None or budget is not None:
        from .report.release import plan_report
        from .report.spec import ReportSpec

        spec = metrics if isinstance(metrics, ReportSpec) else ReportSpec(
            ["auc"] + ([metrics] if isinstance(metrics, str) else list(metrics or [])), budget=budget)
        if spec.groups != ("auc",):
            from .report.release import check_report_range

            total_mechanism = mechanism
            mechanism, epsilons, kind, cost = plan_report(mechanism, spec)
            check_report_range(spec, epsilons, len(clients), sum(sizes))
            report = (spec, epsilons, kind, cost, total_mechanism)
    check_fixed_point_range(mechanism, sum(sizes), sizes)
    start = time.perf_counter()
    extra: dict = {}
    if protocol == "plain" and mechanism.needs_secure_sum:
        raise InputError(
            "distributed noise protects only the aggregate: in the plain protocol the server would see each "
            "client's statistics with only a share of the noise; use --protocol mpc"
        )
    if protocol not in ("plain", "mpc"):
        raise InputError(f"protocol must be 'plain' or 'mpc', got {protocol!r}")
    mechanism.check_release()
    if protocol == "mpc" and seed is not None:
        check_secret_seed(seed)
    if isinstance(release, (bool, np.bool_)) or not isinstance(release, (int, np.integer)) or release < 0:
        raise InputError(f"release must be an integer >= 0, got {release!r}")
    user_seed, seed = seed, (None if seed is None else release_seed(seed, int(release)))
    reservation = None
    if ledger is not None:
        reservation = ledger.reserve(clients, mechanism if report is None else report[3], seed=seed,
                                     total=sum(len(c) for c in clients), sizes=[len(c) for c in clients],
                                     name=dataset_name, note=f"{protocol} protocol, {len(clients)} clients")
    with finishing(ledger, reservation):
        if protocol == "plain":
            roles = [Client(k, c, mechanism, client_rngs(seed, k)) for k, c in enumerate(clients)]
            estimate, aggregate, inbox = run_plain(roles, Server(mechanism))
            if report is not None:
                extra |= plain_report(roles, clients, report, inbox)
        else:
            from .mpc import session  # imports CrypTen only when needed

            keys = None if seed is None else [client_key(seed, k) for k in range(len(clients))]
            plan = None
            if report is not None:
                from .report.release import report_plan

                plan = report_plan(report[0], report[1], report[2], report[4], len(clients))
            if plan is None:
                estimate, aggregate, extra = session.run_mpc_local(clients, mechanism, noise_keys=keys,
                                                                   **(mpc_options or {}))
            else:
                estimate, aggregate, extra = session.run_mpc_report(clients, mechanism, plan, noise_keys=keys,
                                                                    **(mpc_options or {}))
            if seed is not None:
                extra["noise_keys"] = "per client from --seed, each given to its client's process only"
    if reservation is not None:
        extra |= privacy_spent(reservation)
    if release:
        extra["release"] = int(release)
    # the start-up is reported apart (of it, what came before this call when it counts from an earlier start)
    before = max(0.0, start - (mpc_options or {}).get("started", start))
    seconds = time.perf_counter() - start - max(0.0, extra.get("startup_seconds", 0.0) - before)
    if report is not None:
        result = make_result(mechanism, estimate, aggregate, sizes, protocol=protocol, seconds=seconds,
                             seed=user_seed if protocol == "plain" else None,
                             reference_auc=_reference_auc(clients) if reference else None, extra=extra)
        total_cost = report[4].cost
        result.epsilon = None if total_cost.epsilon == float("inf") else float(total_cost.epsilon)
        result.delta = None if result.epsilon is None else float(total_cost.delta)
        return result
    return make_result(mechanism, estimate, aggregate, sizes, protocol=protocol, seconds=seconds,
                       seed=user_seed if protocol == "plain" else None,  # an MPC report keeps nothing to recompute noise from
                       reference_auc=_reference_auc(clients) if reference else None, extra=extra)

