"""An MPC session: the parties start once, then evaluate new scores each epoch.

Starting the parties (process start-up, CrypTen's rendezvous, the links'
handshakes) costs seconds; a training loop that evaluates its model every epoch
pays it once with :class:`LocalSession` (:class:`secure_auc.session.MPCSession`).  The session runs the helpers layout
(:mod:`.input_parties`): the computing parties and the dealer stay up between
evaluations, and the client hosts keep their links.  Each evaluation draws fresh
seeds for every share and, unless keys are given, fresh noise keys for every
client; only the server's result comes back.

Between evaluations the computing parties wait for the hosts' next message
without a time limit (a host that dies closes its links, and the launcher's
death kills every party); the server keeps the dealer's channel alive.
"""

from __future__ import annotations

import contextlib
import logging
import queue as queue_mod
import threading
import time

import numpy as np

from ..data.io import ClientData
from ..dp.accountant import Records, finishing
from ..validation import InputError, check_binary_labels
from . import RANK_METHODS, MPCError
from .roles.control import READY
from .party import PartyConfig

log = logging.getLogger(__name__)

__all__ = ["LocalSession", "run_mpc_local", "run_mpc_report"]


class LocalSession:
    """Start the MPC parties once, as processes of this machine, for clients whose labels are
    fixed; evaluate new scores with :meth:`evaluate`.  The public
    :class:`secure_auc.session.MPCSession` is this class, or with ``deploy=`` a session with
    deployed services.

    Parameters
    ----------
    labels : list of array-like
        Client k's labels (0/1), one array per client, in the order of its samples.
    mechanism : Mechanism
        The DP mechanism of every evaluation (:func:`secure_auc.dp.make_mechanism`).
    computing : {2, 3}, default 3
        Computing parties (the server and ``computing - 1`` helpers).
    provider, sort, timeout, hosts, port, threads
        As in :func:`run_mpc_local`.
    progress : bool, default False
        Log the server's progress through each rank step.
    ledger : secure_auc.Ledger, optional
        Charged for every client's labels before each evaluation
        (:meth:`secure_auc.Ledger.reserve`), as :func:`secure_auc.evaluate` does.
    ids : list of array-like, optional
        Client k's record identifiers, one per label (None for a client without):
        the ledger then charges every release to each record, as
        :func:`secure_auc.evaluate` does for a :class:`secure_auc.ClientData` with ``ids``;
        without, each client's labels are charged as one dataset.  They stay in this
        process (never sent to a party).
    dataset_name : str, optional
        A name for the clients' datasets in the ledger's report.
    started : float, optional
        The :func:`time.perf_counter` reading from which the first evaluation's
        ``startup_seconds`` count (default: this session's creation); the command line gives its
        process's start, so that its start-up includes its own imports.

    Examples
    --------
    Used as a context manager, so the parties stop with the block (not run here: it starts
    processes)::

        with LocalSession([y0, y1], make_mechanism("laplace", 1.0, allocation="adaptive")) as session:
            for epoch in range(10):
                train_one_epoch(model)
                result = session.evaluate([model(x0), model(x1)])
                log_epoch(epoch, result.auc, result.ci_low, result.ci_high)
    """

    deployed = False  # every party on this machine, the scores passed to evaluate()
    _audit: dict | None = None  # tests: a dict, filled at close() with what every process received (.audit)

    def __init__(self, labels, mechanism, *, computing: int = 3, provider: str = "ttp", sort: str = RANK_METHODS[0],
                 timeout: float = 60.0, hosts: int | None = None, port: int | None = None, ledger=None,
                 dataset_name: str | None = None, progress: bool = False, metrics=None,
                 budget: dict | None = None, report=None, ids=None, threads: int | None = None,
                 started: float | None = None):
        if computing not in (2, 3):
            raise InputError(f"a session has 2 or 3 computing parties, got {computing}")
        self.labels = [check_binary_labels(y, name=f"client {k}: labels") for k, y in enumerate(labels)]
        if not self.labels or any(len(y) == 0 for y in self.labels):
            raise InputError("every client needs at least one sample")
        self.sizes = [len(y) for y in self.labels]
        if ids is not None and len(ids) != len(self.labels):
            raise InputError(f"ids: expected one array of record identifiers per client ({len(self.labels)}), "
                             f"got {len(ids)}")
        records = [Records(y, None if ids is None or ids[k] is None else np.asarray(ids[k]), f"client {k}")
                   for k, y in enumerate(self.labels)]
        mechanism.check_release()
        self._cost = None  # with a report: what the ledger charges (the AUC's and the report's releases composed)
        self._total_cost = None
        if metrics is not None or budget is not None:
            from ..report.release import plan_report, report_plan
            from ..report.spec import ReportSpec

            spec = metrics if isinstance(metrics, ReportSpec) else ReportSpec(
                [metrics] if isinstance(metrics, str) else list(metrics or []), budget=budget)
            if spec.groups != ("auc",):
                bound = mechanism.for_clients(len(self.labels))
                mechanism, epsilons, kind, self._cost = plan_report(bound, spec)
                from ..report.release import check_report_range

                check_report_range(spec, epsilons, len(self.labels), sum(self.sizes))
                self._total_cost = bound.cost
                report = report_plan(spec, epsilons, kind, bound, len(self.labels))
        self.config = PartyConfig(mechanisms=(mechanism,), clients=len(self.labels), provider=provider, sort=sort,
                                  progress=progress, computing=computing, session=True, report=report)
        self.timeout = float(timeout)
        self.threads = threads  # each computing party's threads for its local work (None: the cores it may use)
        self.mechanism = self.config.mechanisms[0]  # bound to the clients present
        self.ledger, self.dataset_name = ledger, dataset_name
        if ledger is not None:  # keyed once (repeated identifiers refused now): each evaluation charges them
            self._datasets = [ledger.keyed(r, k) for k, r in enumerate(records)]
        self._closed = False
        self._stop = threading.Event()  # set: every party is stopped at once (abort)
        self._opened = False  # whether the current evaluation's aggregate reached this process
        self.releases = 0  # evaluations started: the index of the next one's noise keys
        self._error: BaseException | None = None
        self._started = time.perf_counter() if started is None else float(started)
        self.startup_seconds: float | None = None  # known once the first evaluation has waited for the parties
        self._start(hosts, port)

    # ------------------------------------------------------------------ processes
    def _start(self, hosts, port) -> None:
        import multiprocessing as mp

        from .launch import HelpersPlan, JobRef

        session_computing_job = JobRef("secure_auc.mpc.roles.computing", "session_computing_job")
        session_host_job = JobRef("secure_auc.mpc.roles.host", "session_host_job")

        ctx = mp.get_context("spawn")
        plan = HelpersPlan.draw(self.config.computing, self.config.clients, hosts, self.config.provider)
        self.groups = plan.groups
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in plan.groups]
        per_rank = {r: (self.config, *plan.rank_args(r), self.timeout, plan.names, self._results)
                    for r in range(plan.computing)}
        per_host = [(self.labels[a:b], a, self.config, *plan.host_args(h), self.timeout, self._tasks[h], self._results)
                    for h, (a, b) in enumerate(plan.groups)]

        def run():
            try:
                plan.spawn(session_computing_job, per_rank, session_host_job, per_host, provider=self.config.provider,
                           timeout=self.timeout, port=port, received=self._audit, stop=self._stop,
                           threads=self.threads)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller of evaluate()
                self._error = exc

        self._thread = threading.Thread(target=run, name="secure-auc-session", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ evaluations
    def evaluate(self, scores, noise_keys: list[int] | None = None):
        """One evaluation of new ``scores`` (one array per client, aligned with its labels).

        Parameters
        ----------
        scores : list of array-like
            Client k's scores, in the order of its labels: numpy arrays, lists or torch
            tensors (detached; a column ``(n, 1)`` is flattened).  Checked before anything
            is charged or sent.
        noise_keys : list of int, optional
            Each client's noise key (reproducibility); default fresh keys from :mod:`secrets`.
            Evaluation i of the session (0, 1, ...) uses :func:`secure_auc.dp.rng.release_key`
            ``(key, i)``: the same keys give the same run, and no two evaluations share noise.

        Returns
        -------
        secure_auc.EvaluationResult
            As :func:`secure_auc.evaluate` returns it: the estimate, its std and 95 % interval,
            the privacy spent (with a ledger) and the cost in ``extra``: ``rank_step_seconds``,
            ``server_bytes`` and, for the first evaluation only, ``startup_seconds`` (starting
            the parties and their links, not included in ``seconds``).
        """
        from ..result import make_result

        estimate, aggregate, extra, seconds = self.run(scores, noise_keys)
        result = make_result(self.mechanism, estimate, aggregate, self.sizes, protocol="mpc", seconds=seconds,
                             extra=extra)
        if self._total_cost is not None:  # the evaluation spent the total, the AUC its share
            finite = self._total_cost.epsilon != float("inf")
            result.epsilon = float(self._total_cost.epsilon) if finite else None
            result.delta = float(self._total_cost.delta) if finite else None
        return result

    def run(self, scores, noise_keys: list[int] | None = None):
        """:meth:`evaluate` before the result is made: ``(estimate, aggregate, extra, seconds)``,
        the server's :class:`~secure_auc.protocol.messages.Estimate` and
        :class:`~secure_auc.protocol.messages.Aggregate`, the cost (and with a ledger the
        privacy spent) in ``extra``, and the evaluation's seconds (the start-up apart)."""
        from ..result import privacy_spent

        if self._closed:
            raise InputError("the session is closed")
        if self._error is not None:
            raise self._error
        if len(scores) != len(self.sizes):
            raise InputError(f"expected {len(self.sizes)} score arrays (one per client), got {len(scores)}")
        clients = [ClientData(s, y, f"client {k}") for k, (s, y) in enumerate(zip(scores, self.labels))]
        keys = list(noise_keys) if noise_keys is not None else [None] * len(clients)
        if len(keys) != len(clients):
            raise InputError(f"expected {len(clients)} noise keys (one per client), got {len(keys)}")
        from ..dp.rng import release_key

        keys = [None if key is None else release_key(key, self.releases) for key in keys]
        self.releases += 1  # the next evaluation draws other noise, whether or not this one ends
        extra = {}
        self._opened = False
        with self._marking_stops():
            if self.startup_seconds is None:  # the first evaluation waits for the parties first
                self._wait(ready=True)
                self.startup_seconds = time.perf_counter() - self._started
                extra["startup_seconds"] = round(self.startup_seconds, 3)
        reservation = None
        if self.ledger is not None:
            reservation = self.ledger.reserve(self._datasets, self._cost or self.mechanism, total=sum(self.sizes),
                                              sizes=self.sizes,
                                              name=self.dataset_name, note="mpc session")
        start = time.perf_counter()
        with finishing(self.ledger, reservation), self._marking_stops():
            for h, (a, b) in enumerate(self.groups):
                self._tasks[h].put((clients[a:b], keys[a:b]))
            done = self._collect()
        self._evaluations = getattr(self, "_evaluations", 0) + 1
        if reservation is not None:
            extra |= privacy_spent(reservation)
        seconds = time.perf_counter() - start
        extra |= self._run_cost(done, seconds)
        if self.config.report is not None:
            plan = self.config.report
            start = time.perf_counter()
            extra |= plan.derive(done[0].report, sum(self.sizes), len(self.sizes))
            extra["privacy"] = {"auc": None if self.mechanism.cost.epsilon == float("inf") else
                                float(self.mechanism.cost.epsilon)} | plan.eps
            extra["report_seconds"] = round(time.perf_counter() - start, 3)
        return done[0].estimates[0], done[0].aggregates[0], extra, seconds

    def select(self, epochs=None, *, epsilon: float = 1.0, release_epsilon: float | None = None,
               noise_keys: list[int] | None = None):
        """Select the best of earlier evaluations of this session, releasing only which one
        (report-noisy-max, eps-DP whatever their number: :mod:`secure_auc.dp.selection`).

        Each evaluation left its rank statistic in shares at the computing parties (never
        opened); the clients add fresh noise shares, a secure argmax opens only the index to
        the server (:mod:`.selection`).

        Parameters
        ----------
        epochs : list of int, optional
            The evaluations to choose from, 0 for this session's first :meth:`evaluate`
            (default: all so far).
        epsilon : float, default 1.0
        release_epsilon : float, optional
            Also release the selected evaluation's DP AUC, its std and 95 % interval, with the
            session's mechanism at this eps: each client adds fresh noise to its statistics of
            that evaluation (from its own rows' ranks, which it received in the evaluation; the
            clients learn which evaluation was selected), opened to the server only.  The
            ledger charges eps + ``release_epsilon`` once, the two events composed.
        noise_keys : list of int, optional
            Each client's noise key (reproducibility); default fresh keys.

        Returns
        -------
        secure_auc.SelectionResult
            ``selected`` is the epoch (as a string; ``index`` its position in ``epochs``);
            with ``release_epsilon``, ``auc``, ``std``, ``ci_low``, ``ci_high``.
        """
        from ..dp.selection import SelectAndRelease, SelectionCharge, release_mechanism
        from ..result import SelectionResult, check_epsilon, release_result
        from ..result import privacy_spent

        if self._closed:
            raise InputError("the session is closed")
        if self._error is not None:
            raise self._error
        done_evals = getattr(self, "_evaluations", 0)
        epochs = list(range(done_evals)) if epochs is None else list(epochs)
        if not epochs or any(isinstance(e, bool) or not isinstance(e, (int, np.integer)) or not 0 <= e < done_evals
                             for e in epochs) or len(set(epochs)) != len(epochs):
            raise InputError(f"epochs must be distinct evaluations of this session, 0 to {done_evals - 1}, "
                             f"got {epochs!r}")
        epochs = [int(e) for e in epochs]
        epsilon = check_epsilon(epsilon, "epsilon")
        release_epsilon = check_epsilon(release_epsilon, "release_epsilon", allow_none=True)
        release = None if release_epsilon is None else release_mechanism(self.mechanism, release_epsilon)
        keys = list(noise_keys) if noise_keys is not None else [None] * len(self.sizes)
        if len(keys) != len(self.sizes):
            raise InputError(f"expected {len(self.sizes)} noise keys (one per client), got {len(keys)}")
        charge = SelectionCharge(epsilon)
        if release is not None:
            charge = SelectAndRelease(charge, release)
        reservation = None
        if self.ledger is not None:
            reservation = self.ledger.reserve(self._datasets, charge, total=sum(self.sizes), sizes=self.sizes,
                                              name=self.dataset_name,
                                              note=f"mpc session: selection among {len(epochs)} evaluations"
                                                   + ("" if release is None else ", the selected's AUC released"))
        start = time.perf_counter()
        total, k = sum(self.sizes), len(self.sizes)
        with finishing(self.ledger, reservation):
            for h, (a, b) in enumerate(self.groups):
                self._tasks[h].put(("select", epochs, epsilon, k, total, keys[a:b], release_epsilon))
            done = self._collect()
        extra = {"argmax_seconds": round(done[0].argmax_seconds, 4),
                 "argmax_bytes_per_party": [done[r].argmax_bytes for r in range(self.config.computing)],
                 "argmax_rounds_per_party": [done[r].argmax_rounds for r in range(self.config.computing)]}
        if reservation is not None:
            extra |= privacy_spent(reservation)
        selected = done[0].selected
        out = SelectionResult(selected=str(selected), index=epochs.index(selected), candidates=[str(e) for e in epochs],
                              method="noisy-max", epsilon=epsilon, delta=0.0, protocol="mpc", clients=k,
                              samples=total, seconds=round(time.perf_counter() - start, 3),
                              selection_epsilon=epsilon, extra=extra)
        if release is not None:
            from ..result import make_result

            res = make_result(release, *done[0].release, self.sizes, protocol="mpc", seconds=out.seconds)
            release_result(out, res, release_epsilon)
        return out

    def _run_cost(self, done: dict, seconds: float) -> dict:
        """One evaluation's cost: per computing party the bytes sent and received (the hosts'
        included) and the messages; per client host its bytes."""
        w = self.config.computing
        return {"rank_step_seconds": round(done[0].rank_seconds, 3), "server_bytes": done[0].bytes_sent,
                "mpc_seconds": round(seconds, 3), "provider": self.config.provider, "sort": self.config.sort,
                "layout": "helpers", "computing_parties": w, "client_hosts": len(self.groups),
                "bytes_per_party": [done[r].bytes_sent for r in range(w)],
                "bytes_from_clients_per_party": [done[r].client_bytes for r in range(w)],
                "rounds_per_party": [done[r].rounds for r in range(w)],
                "bytes_per_host": [done[-(h + 1)]["bytes"] for h in range(len(self.groups))]}

    @contextlib.contextmanager
    def _marking_stops(self):
        """A stop asked for meanwhile (KeyboardInterrupt: Ctrl-C, SIGTERM, SIGHUP) says whether the
        evaluation's aggregate had reached this process (``started``): a ledger charges it only then."""
        try:
            yield
        except KeyboardInterrupt as exc:
            exc.started = self._opened
            raise

    def _collect(self) -> dict:
        """Every computing party's and client host's report of the evaluation, by key."""
        done: dict = {}
        while len(done) < self.config.computing + len(self.groups):
            key, item = self._wait()
            if key in done:
                raise MPCError(f"the session's party {key} reported one evaluation twice")
            done[key] = item
            self._opened = self._opened or key == 0  # the server's result holds the opened aggregate
        return done

    def _wait(self, ready: bool = False):
        """The next ``(key, report)`` of a party (or, with ``ready``, the server's signal that
        every link is up)."""
        while True:
            try:
                item = self._results.get(timeout=0.2)
            except queue_mod.Empty:
                item = None
            if item is not None:
                if (item == READY) != ready:
                    raise MPCError(f"the session's server sent {'a result' if ready else 'a second ready signal'} "
                                   "out of turn")
                return item
            if self._error is not None:
                raise self._error
            if not self._thread.is_alive():
                raise MPCError("the session's parties stopped")

    def close(self) -> None:
        """Stop every party once its evaluation is done (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for q in self._tasks:
            q.put(None)
        self._thread.join(timeout=self.timeout + 10)

    def abort(self) -> None:
        """Stop every party now, mid-evaluation (within about a second; idempotent): what leaving
        the ``with`` block on an exception does, Ctrl-C, SIGTERM and SIGHUP included."""
        self._closed = True
        self._stop.set()
        from .forkserver import interrupt_starts

        end = time.monotonic() + 10
        self._thread.join(timeout=0.1)
        while self._thread.is_alive() and time.monotonic() < end:
            interrupt_starts()  # a start that waits on the fork server (still importing) is not waited for
            self._thread.join(timeout=0.2)

    def __enter__(self) -> "LocalSession":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


def run_mpc_local(
    clients: list[ClientData],
    mechanism,
    *,
    noise_keys: list[int] | None = None,
    provider: str = "ttp",
    sort: str = RANK_METHODS[0],
    timeout: float = 60.0,
    port: int | None = None,
    progress: bool = True,
    computing: int = 3,
    hosts: int | None = None,
    threads: int | None = None,
    started: float | None = None,
):
    """Run the MPC protocol with local processes.

    ``computing`` = w (2 or 3): the helpers layout, in which the server and w - 1
    helpers compute and the clients are input parties, hosted by ``hosts`` client-host
    processes (default 1): a :class:`LocalSession` for one evaluation, the
    start-up reported apart; ``computing=0``: every client is a computing party.
    ``noise_keys[k]`` (optional, reproducible runs): client k's noise key, handed
    to the process of client k only (:func:`secure_auc.dp.rng.client_key` derives them
    from a seed).  ``threads``: each computing party's threads for its local work
    (default: the cores it may use).  ``started``: as :class:`LocalSession` takes it (the helpers
    layout).  Returns ``(estimate, aggregate, cost)`` where ``cost`` has the
    wall seconds, and per party the bytes sent and received and communication rounds.
    """
    return run_mpc_report(clients, mechanism, None, noise_keys=noise_keys, provider=provider, sort=sort,
                          timeout=timeout, port=port, progress=progress, computing=computing, hosts=hosts,
                          threads=threads, started=started)


def run_mpc_report(clients: list[ClientData], mechanism, report, *, noise_keys=None, provider: str = "ttp",
                   sort: str = RANK_METHODS[0], timeout: float = 60.0, port: int | None = None, progress: bool = True,
                   computing: int = 3, hosts: int | None = None, threads: int | None = None,
                   started: float | None = None):
    """:func:`run_mpc_local` with a ``report`` (a :class:`secure_auc.report.release.ReportPlan`, or
    None): its metrics join the returned ``cost``."""
    if computing not in (0, 2, 3):
        raise InputError(f"computing parties must be 2 or 3 (or 0: every client computes), got {computing}")
    from .launch import announce, cost_summary, launch_local

    if progress:
        announce(sum(len(c) for c in clients), computing or len(clients) + 1, sort)
    start = time.perf_counter()
    if computing:
        with LocalSession([c.labels for c in clients], mechanism, computing=computing, provider=provider, sort=sort,
                        timeout=timeout, hosts=hosts, port=port, progress=progress, report=report,
                          threads=threads, started=started) as session:
            estimate, aggregate, extra, _ = session.run([c.scores for c in clients], noise_keys=noise_keys)
        return estimate, aggregate, extra | {"mpc_seconds": round(time.perf_counter() - start, 3)}
    config = PartyConfig(mechanisms=(mechanism,), clients=len(clients), provider=provider, sort=sort,
                         progress=progress, computing=computing, report=report)
    done = launch_local(clients, config, timeout=timeout, port=port, noise_keys=noise_keys, hosts=hosts,
                        threads=threads)
    extra = cost_summary(done, config, time.perf_counter() - start)
    if report is not None:  # every client computed: the server derives the report from the opened sum
        from ..report.release import attach_report

        extra |= attach_report(report, done[0].report, sum(len(c) for c in clients), len(clients),
                               config.mechanisms[0])
    return done[0].estimate, done[0].aggregate, extra
