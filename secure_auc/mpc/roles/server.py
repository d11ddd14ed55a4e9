"""The server of the helpers layout as a deployed service, across evaluations.

:class:`ServerService` is rank 0 of a deployment once CrypTen's world stands: it accepts
every client's link (:func:`.computing.accept_clients`), checks that each was configured
alike, then serves the platform's sessions (or runs ``epochs`` evaluations itself, under
torchrun).  Each evaluation and selection is the same :class:`.computing.ComputingRole`
that a local session's server runs; around it, the control messages of :mod:`.control`:

=====  =================================================  ============================================
step   server                                             client k (:func:`.host.client_service`)
=====  =================================================  ============================================
1      sends every client ``open`` (evaluation n, epoch)  calls its operator's hook for the epoch's
                                                          scores, checks them, charges its ledger
                                                          (:meth:`secure_auc.Ledger.reserve`); answers
                                                          ``ok``, or ``refused`` with a reason code and
                                                          counts (:mod:`.control`; nothing is released)
2      all ok: ``go`` to the clients and the helpers;     ``go``: the evaluation of
       a refusal: ``cancel`` naming the client and why    :class:`.host.HostRole`;
                                                          ``cancel``: the reservation is withdrawn
3      :meth:`.computing.ComputingRole.evaluate` with the helpers (:func:`.computing.helper_service`);
       the aggregate goes to the session; the computing parties keep each client's rank statistic in shares
=====  =================================================  ============================================

A selection among earlier evaluations (the session's ``select``) runs the same way: ``select``
(the evaluations, eps), each client charges its ledger and answers, ``go`` or ``cancel``, then
:mod:`secure_auc.mpc.selection`'s secure argmax on the kept statistics plus the clients' noise
shares; only the index is opened, to the server, which replies with the epoch.

Between evaluations the server keeps the helpers' and the dealer's waits alive and watches
every client's link: a client that goes away is named at once, and every party is told.  A
fault other than a refusal ends the deployment: every party is told the cause.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time

from ...validation import InputError
from ..comm import backend, tls
from ..comm.inlinks import accept_hosts, listen, ready
from ..comm.runtime import explain
from ..primitives.dealer import ping_dealer, tell_dealer_the_end
from .computing import ComputingRole, accept_clients
from .control import CH_CONTROL, ServiceError, ServicePlan, check_epoch, describe_refusal, differences, escape

log = logging.getLogger(__name__)

__all__ = ["ServerService", "SESSION_HOST", "tell_who_waits", "QUIET", "TELL_AT_MOST"]

SESSION_HOST = 0  # the session's id among the server's session links (it authenticates with the server's key)
QUIET = 1.0  # seconds a server that could not start goes on telling the parties waiting for it, after the last one
TELL_AT_MOST = 10.0  # seconds it tells them at most (and at most join_timeout)


class ServerService:
    """The server's service of a deployment (CrypTen initialised): the clients' links, the
    session's link, the evaluations (see the module docstring).

    Parameters
    ----------
    plan : ServicePlan
        The server's configuration (``plan.party``: the MPC parties' public parameters).
    identity
        The server's identity key (a session authenticates with it too).
    describe : callable
        ``describe(r)`` names computing party r in errors.
    started : float
        ``time.perf_counter()`` at the process's start: the start-up is reported from it.
    epochs : int, optional
        Evaluations asked for here (epochs 0..N-1), with no session; each reply goes to
        ``on_reply``, then the deployment ends.
    on_reply : callable, optional
    selection : tuple, optional
        With ``epochs``: (eps, release eps or None) of a selection among the N evaluations
        afterwards, its reply to ``on_reply``.
    """

    def __init__(self, plan: ServicePlan, identity, describe, started: float, epochs=None, on_reply=None,
                 selection=None, listeners: dict | None = None):
        self.plan, self.config, self.identity, self.roster = plan, plan.party, identity, plan.roster
        self.describe, self.started, self.selection = describe, started, selection
        self.startup_seconds: float | None = None  # known once every client has joined
        self.epochs, self.on_reply = epochs, on_reply
        self.links: dict = {}
        self.session = None
        self.evaluations = 0
        self.role = None  # the computing party's role over the clients' links (its kept statistics)
        self.kept_epochs, self.total = [], 0  # the epoch of each kept evaluation, the rows (for selections)
        self.interval = plan.interval
        self.stepping = False  # in an evaluation's or a selection's MPC steps with the helpers
        self.listeners = dict(listeners or {})  # open since the start (:func:`.deployed.open_listeners`)

    # -- keeping the computing world's waits alive
    def tick(self) -> None:
        backend.broadcast_obj({"op": "idle"}, 0)
        ping_dealer()

    def tell_helpers(self, msg: dict) -> None:
        backend.broadcast_obj(msg, 0)

    def run(self) -> int:
        control = None
        if self.epochs is None:
            control = self.listeners.pop("session", None) or listen(*self.plan.session_address)
        try:
            self.links, joins = accept_clients(self.plan, 0, self.identity, self.describe,
                                               self.listeners.pop("clients", None))
            self.role = ComputingRole(0, self.config, self.links, self.describe)
            self.join(joins)
            return self.loop(control) if control is not None else self.run_epochs()
        except KeyboardInterrupt as exc:  # SIGTERM, SIGINT, SIGHUP: the deployment ends in order
            name = signal.Signals(getattr(exc, "signum", signal.SIGINT)).name
            log.info("[server] stopped by %s after %d evaluation(s); ending the deployment", name, self.evaluations)
            self.end(f"the server was stopped ({name})", shutdown=True)
            raise
        except BaseException as exc:
            reason = str(exc) if isinstance(exc, (ServiceError, InputError)) else explain(exc)
            self.end(reason)
            if control is not None and self.session is None:
                self.tell_waiting_session(control, reason)
            raise
        finally:
            if control is not None:
                control.close()
            for link in list(self.links.values()) + ([self.session] if self.session else []):
                link.close()

    def run_epochs(self) -> int:
        """Evaluations 1..N asked for by the server itself (epochs 0..N-1), then the end."""
        for epoch in range(self.epochs):
            reply = self.evaluate(epoch)
            if "error" in reply:
                raise ServiceError(reply["error"])
            if epoch == 0:  # the start-up, from the process's start to the first request
                reply["startup_seconds"] = round(self.first_request - self.started, 3)
            self.on_reply(reply)
        if self.selection:  # a selection among them (secure-auc compute --select-epsilon)
            start = time.perf_counter()
            reply = self.select(list(range(self.epochs)), *self.selection)
            if "error" in reply:
                raise ServiceError(reply["error"])
            self.on_reply(reply | {"seconds": time.perf_counter() - start})
        log.info("[server] %d evaluation(s) done; ending the deployment", self.epochs)
        self.end(f"the server ran its {self.epochs} evaluation(s)", shutdown=True)
        return 0

    def join(self, joins: dict) -> None:
        mine = self.plan.agreed
        problems = []
        for h in sorted(joins):
            if joins[h].get("refused"):
                problems.append(f"client {h} refused: {describe_refusal(joins[h])}")
                continue
            diff = differences(joins[h].get("agreed") or {}, mine)
            if not diff and joins[h].get("public") != self.config.public():
                diff = differences(joins[h].get("public") or {}, self.config.public())
            if diff:
                problems.append(f"client {h} was configured differently: {', '.join(diff)}")
        if problems:
            raise ServiceError("; ".join(problems))
        self.tell_helpers({"op": "joined"})
        for link in self.links.values():
            link.send_obj(CH_CONTROL, {"op": "joined"})
        self.startup_seconds = time.perf_counter() - self.started  # from the process's start, imports included
        log.info("[server] every client joined (%.1f s after the start); %s", self.startup_seconds,
                 "waiting for the session on %s:%d" % self.plan.session_address if self.epochs is None
                 else f"{self.epochs} evaluation(s) to run")

    def end(self, reason: str, shutdown: bool = False, tell_session: bool = True) -> None:
        """Tell every party the deployment ends (best effort: some may be gone); the session too
        unless it asked for the end (``tell_session=False``: it is answered ``ok``)."""
        msg = {"op": "end", "reason": reason, "shutdown": shutdown}
        for link in self.links.values():
            try:
                link.send_obj(CH_CONTROL, msg)
            except Exception:  # noqa: BLE001 - that client is gone
                pass
        if self.session is not None and tell_session:
            try:
                self.session.send_obj(CH_CONTROL, {"error": f"the deployment ended: {reason}", "fatal": True})
            except Exception:  # noqa: BLE001
                pass
        try:
            if self.stepping:  # mid-step: a broadcast would meet the step's own messages
                from ..comm import secure

                if secure.mesh() is not None:
                    secure.mesh().farewell(msg)  # read by the helpers when the server's links close
            else:
                self.tell_helpers(msg)
        except Exception:  # noqa: BLE001 - the helpers learn it from their own links
            pass
        with contextlib.suppress(Exception):  # a dealer that is gone learns nothing
            tell_dealer_the_end(reason, shutdown)

    def tell_waiting_session(self, control, reason: str) -> None:
        """A session that connected before the deployment could start (the server takes it only
        once every client joined) is told why it ended, instead of finding the link closed."""
        if ready([], 0.0, [control]):
            _tell_session(control, self.identity, self.roster.server, reason, 5.0)

    def client_lost(self, h: int) -> ServiceError:
        try:
            msg = self.links[h].recv_obj(CH_CONTROL)
        except Exception as exc:  # noqa: BLE001 - the usual case: its link closed
            return ServiceError(explain(exc))  # names the client
        what = escape(repr(msg.get("op") if isinstance(msg, dict) else type(msg).__name__))[:60]
        return ServiceError(f"client {h} sent a message ({what}) outside an evaluation")

    def loop(self, control) -> int:
        ticked = time.monotonic()
        while True:
            watched = {link: ("client", h) for h, link in self.links.items()}
            watched[self.session or control] = ("session" if self.session else "listener", 0)
            got = ready([*self.links.values(), *([self.session] if self.session else [])],
                        max(0.0, ticked + self.interval - time.monotonic()), [] if self.session else [control])
            if time.monotonic() >= ticked + self.interval:  # whatever arrives on the session port meanwhile
                self.tick()
                ticked = time.monotonic()
            if not got:
                continue
            for item in got:
                what, h = watched[item]
                if what == "client":
                    raise self.client_lost(h)
            what, _ = watched[got[0]]
            if what == "listener":
                try:  # at most a third of the timeout: the computing world's waits are kept alive meanwhile
                    links = accept_hosts(control, 0, self.identity, [self.roster.server],
                                         timeout=min(self.interval, tls.HELLO_LIMIT), describe_me="the server",
                                         describe_host=lambda h: "the session")
                except Exception as exc:  # noqa: BLE001 - a stray or failed connection: keep serving
                    log.debug("[server] no session connected: %s", exc)
                    continue
                self.session = links[SESSION_HOST]
                self.session.set_timeout(self.plan.timeout)
                self.session_hello()
                continue
            try:
                request = self.session.recv_obj(CH_CONTROL)
            except Exception:  # noqa: BLE001 - the session went away; the services stay up
                log.info("[server] the session disconnected; waiting for the next one")
                self.session.close()
                self.session = None
                continue
            op = request.get("op") if isinstance(request, dict) else None
            if op == "evaluate":
                try:
                    epoch = None if request.get("epoch") is None else check_epoch(request["epoch"],
                                                                                   "the session's epoch")
                except InputError as exc:
                    log.warning("[server] %s", exc)
                    reply = {"error": str(exc), "refused": True}
                else:
                    reply = self.evaluate(epoch)
            elif op == "select":
                try:
                    epochs = request.get("epochs")
                    epochs = None if epochs is None else [check_epoch(e, "an epoch of the selection")
                                                          for e in (epochs if isinstance(epochs, list) else [epochs])]
                except InputError as exc:
                    log.warning("[server] %s", exc)
                    reply = {"error": str(exc), "refused": True}
                else:
                    reply = self.select(epochs, request.get("epsilon"), request.get("release_epsilon"))
            elif op == "shutdown":
                log.info("[server] the session shut the deployment down after %d evaluation(s)", self.evaluations)
                self.end("the session shut the deployment down", shutdown=True, tell_session=False)
                self.session.send_obj(CH_CONTROL, {"ok": True})
                return 0
            else:
                reply = {"error": f"unknown request {escape(repr(op))[:60]}"}
            self.session.send_obj(CH_CONTROL, reply)
            ticked = time.monotonic()  # the evaluation (or the shutdown) spoke to every party

    def session_hello(self) -> None:
        hello = self.session.recv_obj(CH_CONTROL)
        diff = differences(hello.get("agreed") or {}, self.plan.agreed)
        if diff:
            reason = f"the session's configuration differs from the server's: {', '.join(diff)}"
            log.warning("[server] %s", reason)
            self.session.send_obj(CH_CONTROL, {"error": reason})
            self.session.close()
            self.session = None
            return
        log.info("[server] a session connected")
        self.session.send_obj(CH_CONTROL, {"ok": True, "clients": len(self.links), "evaluations": self.evaluations,
                                           "startup_seconds": None if self.startup_seconds is None else
                                           round(self.startup_seconds, 3)})

    def wait_answers(self, n: int, epoch) -> dict:
        """Every client's answer to ``open``, waiting up to score_timeout (the others' waits kept alive)."""
        answers: dict = {}
        deadline = time.monotonic() + self.plan.score_timeout
        while len(answers) < len(self.links):
            pending = {self.links[h]: h for h in self.links if h not in answers}
            got = ready(list(pending), self.interval)
            for link in got:
                h = pending[link]
                try:
                    answer = self.links[h].recv_obj(CH_CONTROL)
                    answers[h] = answer if isinstance(answer, dict) else {"refused": None}
                except Exception as exc:  # noqa: BLE001
                    raise ServiceError(explain(exc)) from None  # names the client
            if not got:
                if time.monotonic() > deadline:
                    late = ", ".join(f"client {h}" for h in self.links if h not in answers)
                    raise ServiceError(f"{late} did not answer evaluation {n} (epoch {epoch}) within "
                                       f"{self.plan.score_timeout:g} s (deployment.score_timeout)")
                self.tick()
        return answers

    def evaluate(self, epoch) -> dict:
        start = time.perf_counter()
        if self.evaluations == 0:
            self.first_request = start
        self.evaluations += 1
        n = self.evaluations
        epoch = n - 1 if epoch is None else epoch
        for link in self.links.values():
            link.send_obj(CH_CONTROL, {"op": "open", "evaluation": n, "epoch": epoch})
        answers = self.wait_answers(n, epoch)
        refusals = [f"client {h} refused: {describe_refusal(a)}" for h, a in sorted(answers.items()) if "ok" not in a]
        if refusals:
            reason = f"evaluation {n} (epoch {epoch}) did not run: " + "; ".join(refusals)
            log.warning("[server] %s", reason)
            for link in self.links.values():
                link.send_obj(CH_CONTROL, {"op": "cancel", "reason": reason})
            self.tell_helpers({"op": "cancel", "reason": reason})
            return {"error": reason, "refused": True}
        scoring = max(float(a["seconds"]) if isinstance(a.get("seconds"), (int, float)) else 0.0
                      for a in answers.values())
        for link in self.links.values():
            link.send_obj(CH_CONTROL, {"op": "go"})
        self.tell_helpers({"op": "evaluate", "evaluation": n})
        self.stepping = True
        result = self.role.evaluate()
        self.stepping = False
        self.kept_epochs.append(epoch)
        self.sizes = [int(rows) for rows in result.sizes]  # each client's samples (public)
        self.total = sum(self.sizes)
        agg = result.aggregate
        log.info("[server] evaluation %d (epoch %s): AUC estimate %.6f, rank step %.3f s, %.3f s in all", n, epoch,
                 float(result.estimate.auc), result.rank_seconds, time.perf_counter() - start)
        return {"ok": True, "evaluation": n, "epoch": epoch,
                "aggregate": [int(agg.global_sum_fixed), int(agg.positives_fixed), int(agg.total)],
                "sizes": list(self.sizes),
                "seconds": round(time.perf_counter() - start, 4), "scoring_seconds": round(scoring, 4),
                "rank_step_seconds": round(result.rank_seconds, 4), "server_bytes": int(result.bytes_sent),
                "computing_parties": self.plan.computing} | (
                    {} if result.report is None else {"report": result.report})  # the opened aggregate report vector


    def select(self, epochs, epsilon, release_epsilon=None) -> dict:
        """A selection among earlier evaluations (their epochs; default all), as
        :meth:`secure_auc.session.MPCSession.select` does locally: each client is asked (it may
        refuse: its budget), then adds its noise shares; only the index is opened, here.  With
        ``release_epsilon``: the clients then share their statistics of the selected evaluation at
        that eps (the configured mechanism), opened here (``release``: the aggregate)."""
        if epochs is None:
            epochs = list(dict.fromkeys(self.kept_epochs))
        last = {e: i for i, e in enumerate(self.kept_epochs)}  # an epoch evaluated twice: its latest evaluation
        missing = [e for e in epochs if e not in last]
        if not epochs or missing or len(set(map(repr, epochs))) != len(epochs):
            return {"error": f"epochs must be distinct epochs evaluated in this deployment, got {epochs!r}",
                    "refused": True}
        idx = [last[e] for e in epochs]
        for link in self.links.values():
            link.send_obj(CH_CONTROL, {"op": "select", "evaluations": idx, "epsilon": epsilon, "total": self.total,
                                       "release_epsilon": release_epsilon})
        answers = self.wait_answers(self.evaluations, "selection")
        refusals = [f"client {h} refused: {describe_refusal(a)}" for h, a in sorted(answers.items()) if "refused" in a]
        if refusals:
            reason = "the selection did not run: " + "; ".join(refusals)
            for link in self.links.values():
                link.send_obj(CH_CONTROL, {"op": "cancel", "reason": reason})
            self.tell_helpers({"op": "cancel", "reason": reason})
            return {"error": reason, "refused": True}
        for link in self.links.values():
            link.send_obj(CH_CONTROL, {"op": "go"})
        self.tell_helpers({"op": "select"})
        self.stepping = True
        result = self.role.select()
        self.stepping = False
        log.info("[server] selection among %d evaluations: epoch %s", len(idx), self.kept_epochs[result.selected])
        reply = {"ok": True, "selected": self.kept_epochs[result.selected], "epochs": list(epochs),
                 "argmax_seconds": round(result.argmax_seconds, 4), "argmax_bytes": result.argmax_bytes,
                 "argmax_rounds": result.argmax_rounds, "samples": self.total, "sizes": self.sizes}
        if result.release is not None:
            agg = result.release[1]
            reply["release"] = [int(agg.global_sum_fixed), int(agg.positives_fixed), int(agg.total)]
        return reply


def _tell_session(control, identity, server_key: bytes, reason: str, timeout: float) -> bool:
    """Tell a session that connects to ``control`` within ``timeout`` seconds that the deployment
    did not start (``reason``; it raises :class:`secure_auc.MPCError` with it); whether one was told."""
    try:
        links = accept_hosts(control, 0, identity, [server_key], timeout=timeout, describe_me="the server",
                             describe_host=lambda h: "the session")
    except Exception as exc:  # noqa: BLE001 - no session, or a stray connection: nobody to tell
        log.debug("[server] no session to tell: %s", exc)
        return False
    link = links[SESSION_HOST]
    try:
        link.recv_obj(CH_CONTROL)  # its hello
        link.send_obj(CH_CONTROL, {"error": f"the deployment did not start: {reason}", "fatal": True})
    except Exception:  # noqa: BLE001 - it went away meanwhile
        pass
    finally:
        link.close()
    return True


def tell_who_waits(plan: ServicePlan, identity, reason: str, *, session: bool, patient: bool = False,
                   session_reason: str | None = None, listeners: dict | None = None) -> None:
    """The server could not start (``reason``: another computing party or the dealer cannot, or
    never joined): the clients connecting to it, and with ``session`` a session connecting to
    its session address, are told why (a client's ``end``; the session's error) instead of
    waiting out ``join_timeout``.  It listens until each of them has been told, or :data:`QUIET`
    seconds pass with nobody new (at most :data:`TELL_AT_MOST` seconds and ``join_timeout``).
    ``patient``: the server itself cannot start, and the others may be started as late as
    ``join_timeout`` after it: it listens until every client has been told (then a session for
    :data:`QUIET` seconds more), or ``join_timeout``.  ``session_reason``: what the session (the
    server's own operator) hears instead of ``reason``.  ``listeners``: its sockets that are open
    already (:func:`.deployed.open_listeners`; taken from the dict, and closed).  Best effort: raises nothing."""
    import threading

    from ..comm.inlinks import tell_hosts

    begun = time.monotonic()
    deadline = begun + (plan.join_timeout if patient else min(plan.join_timeout, TELL_AT_MOST))
    quiet = plan.join_timeout if patient else QUIET
    listeners = listeners if listeners is not None else {}
    try:
        clients = listeners.pop("clients", None) or listen(plan.listen[0], plan.client_addresses[0][1])
    except Exception as exc:  # noqa: BLE001 - its port is taken: nobody can be told
        log.debug("[server] cannot tell the clients: %s", exc)
        return
    told_session: list = []
    teller = None
    if session:
        try:
            control = listeners.pop("session", None) or listen(*plan.session_address)
        except Exception:  # noqa: BLE001
            control = None
        if control is not None:
            def tell():
                try:
                    told_session.append(_tell_session(control, identity, plan.roster.server, session_reason or reason,
                                                      max(0.0, deadline - time.monotonic())))
                finally:
                    control.close()

            teller = threading.Thread(target=tell, name="secure-auc tell the session", daemon=True)
            teller.start()
    try:
        told = tell_hosts(clients, 0, identity, list(plan.roster.clients), CH_CONTROL,
                          {"op": "end", "reason": reason, "shutdown": False}, deadline=deadline, quiet=quiet,
                          describe_me="the server", describe_host=lambda h: f"client {h}")
    except Exception as exc:  # noqa: BLE001
        log.debug("[server] telling the clients failed: %s", exc)
        told = set()
    finally:
        clients.close()
    if teller is not None:  # a session that is waiting connects about as soon as the clients do
        teller.join(timeout=max(0.0, (time.monotonic() if patient else begun) + QUIET - time.monotonic()))
    log.debug("[server] told %d client(s)%s why the deployment did not start", len(told),
              " and the session" if told_session and told_session[0] else "")
