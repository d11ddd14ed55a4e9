r"""The deployed parties of the helpers layout, each a service that stays up across evaluations.

``secure-auc serve --config deploy.toml --role ROLE --key KEY.pem`` runs one of:

* the **server** (rank 0) and each **helper** (ranks 1..w-1): a computing party.
  They meet at ``server.rendezvous`` (CrypTen's world, as under torchrun, with
  the roll call naming a party that never starts), accept each client's
  authenticated link on their ``clients`` address, then evaluate whenever the
  platform's session (:class:`.session.DeployedSession`) asks the server;
* the **dealer** (rank w, with ``provider = "ttp"``);
* each **client** (an input party): it holds its labels and its own privacy
  ledger and connects to every computing party.

One evaluation (the server drives; everything is on the authenticated links of
:mod:`secure_auc.mpc.comm.inlinks`, channel :data:`CH_CONTROL`):

=====  =================================================  ============================================
step   server                                             client k
=====  =================================================  ============================================
1      sends every client ``open`` (evaluation n, epoch)  calls its operator's hook for the epoch's
                                                          scores, checks them, charges its ledger
                                                          (:meth:`secure_auc.Ledger.reserve`); answers
                                                          ``ok``, or ``refused`` with a reason code and
                                                          counts (:mod:`.untrusted`; nothing is released)
2      all ok: ``go`` to the clients and the helpers;     ``go``: the evaluation of
       a refusal: ``cancel`` naming the client and why    :func:`secure_auc.mpc.input_parties.host_evaluation`;
                                                          ``cancel``: the reservation is withdrawn
3      :func:`secure_auc.mpc.input_parties.compute_evaluation` with the helpers; the aggregate goes to the
       session; then each client shares its rank statistic, which the computing parties keep in shares
       (:func:`secure_auc.mpc.input_parties.host_keep`)
=====  =================================================  ============================================

A selection among earlier evaluations (the session's ``select``) runs the same way: ``select``
(the evaluations, eps), each client charges its ledger and answers, ``go`` or ``cancel``, then
:mod:`secure_auc.mpc.selection`'s secure argmax on the kept statistics plus the clients' noise
shares; only the index is opened, to the server, which replies with the epoch.

At connection time every client sends each computing party the options it was
configured with (:meth:`.config.DeployConfig.agreed`); the server compares them
with its own and a difference ends the start with every party naming the
client and the option.  Between evaluations the server keeps the helpers' and
the dealer's waits alive and watches every client's link: a client that goes
away is named at once, and every party is told.  A fault other than a refusal
ends the deployment: every service stops with one line naming the cause, and
the operators restart them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dp.rng import release_key
from ..validation import InputError
from .config import DeployConfig, parse_role
from .untrusted import REASONS, check_epoch, check_private_code, describe_refusal, escape, refusal as _refusal

log = logging.getLogger(__name__)

__all__ = ["ServiceError", "ClientInputs", "serve", "run_computing_service", "run_client_service", "client_inputs",
           "evaluation_result", "selection_result", "load_hook", "read_labels", "CH_JOIN", "CH_CONTROL"]

CH_JOIN, CH_CONTROL = 20, 21  # beyond the evaluation's channels (secure_auc.mpc.input_parties)
SESSION_HOST = 0  # the session's id among the server's session links (it authenticates with the server's key)


class ServiceError(RuntimeError):
    """A fault that ends the deployment (names the party and the cause)."""


def describe_role(kind: str, index: int) -> str:
    return {"server": "server", "dealer": "dealer"}.get(kind, f"{kind} {index}")


def serve(config: DeployConfig, role: str, identity) -> int:
    """Run the service of ``role`` (``server``, ``helper-1``, ``dealer``, ``client-0``, ...)
    with this party's ``identity`` key until the deployment ends; returns 0 on an orderly
    shutdown (raises :class:`ServiceError` or :class:`InputError` otherwise)."""
    kind, index = parse_role(role, config.computing_parties, len(config.clients), config.dealer)
    if kind == "client":
        try:
            inputs = client_inputs(config, index)
        except InputError as exc:  # its labels, its hook, its ledger: the others are told at once
            refuse_at_start(config, index, identity, str(exc))
            raise
        return run_client_service(config, index, identity, inputs)
    return run_computing_service(config, kind, index, identity)


def refuse_at_start(config: DeployConfig, k: int, identity, reason: str) -> None:
    """Client ``k`` cannot take part (``reason``): it joins only to say why, so that every party
    and the session name the reason within seconds instead of waiting out ``join_timeout``
    (best effort: computing parties that cannot be reached within ``join_timeout``, at most
    30 s, learn it from their own wait)."""
    import dataclasses

    try:
        run_client_service(dataclasses.replace(config, join_timeout=min(config.join_timeout, 30.0)), k, identity,
                           refusal=reason)
    except Exception as unreachable:  # noqa: BLE001 - the refusal stands anyway
        log.debug("[client %d] the refusal did not reach the computing parties: %s", k, unreachable)


def join_setting(config: DeployConfig) -> str:
    """The setting that bounds the start-up's waits, as the operator wrote it: ``deployment.join_timeout
    = 30 s`` in a file, ``--timeout = 30 s`` on the command line (:func:`.config.options_config`).

    Examples
    --------
    >>> from secure_auc.deploy.config import options_config
    >>> join_setting(options_config(computing_parties=2, clients=1, mechanism={"name": "none"},
    ...                             roster="roster.json", client_addresses=[("h", 1), ("h", 2)], timeout=30))
    '--timeout = 30 s'
    """
    name = "--timeout" if str(config.path) == "<command line>" else "deployment.join_timeout"
    return f"{name} = {config.join_timeout:g} s"


def process_seconds() -> float:
    """Seconds since this process started (Linux ``/proc``: its imports included), else 0.

    Examples
    --------
    >>> 0.0 <= process_seconds() < 365 * 86400
    True
    """
    import os

    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def _check_identity(identity, expected: bytes, who: str, config: DeployConfig) -> None:
    from ..mpc.comm.channel import public_bytes

    if public_bytes(identity) != expected:
        raise InputError(f"this key is not the one the roster {config.roster_path} lists for the {who}")


def _set_timeout(links, seconds: float) -> None:
    """The links' waits during an evaluation (the join used the start-up's longer bound)."""
    for link in links:
        link.timeout = seconds
        link.sock.settimeout(seconds)


def _differences(theirs: dict, mine: dict) -> list[str]:
    keys = sorted(set(theirs) | set(mine))
    return [f"{k} = {theirs.get(k)!r} (server: {mine.get(k)!r})" for k in keys if theirs.get(k) != mine.get(k)]


# --------------------------------------------------------------------------- computing parties and dealer

def run_computing_service(config: DeployConfig, kind: str, index: int, identity, *,
                          rendezvous: tuple[str, int] | None = None, epochs: int | None = None,
                          on_result=None, select: tuple | None = None) -> int:
    """The server, a helper or the dealer (see the module docstring).

    ``rendezvous`` replaces ``server.rendezvous`` (under torchrun: its ``MASTER_ADDR`` and
    ``MASTER_PORT``).  With ``epochs`` = N the server asks for N evaluations itself
    (epochs 0..N-1), with no session, hands each :class:`secure_auc.EvaluationResult` to
    ``on_result``, then shuts the deployment down; a refusal then ends it, naming the
    client and its reason.  ``select`` = (eps, release eps or None) with ``epochs``: then a
    selection among the N evaluations, its :class:`secure_auc.SelectionResult` to ``on_result``."""
    from ..mpc.comm.roster import describe_helpers_rank
    from ..mpc.party import agree_public

    started = time.perf_counter() - process_seconds()  # the start-up is reported from the process's start
    w = config.computing_parties
    rank = {"server": 0, "dealer": w}.get(kind, index)
    me = describe_role(kind, index)
    host, port = rendezvous or config.rendezvous
    try:
        roster = config.roster()
        _check_identity(identity, roster.key(rank), me, config)
    except InputError as exc:  # it checks in at the roll-call only to say why: the others stop at once
        from ..mpc.comm.runtime import refuse_roll_call

        refuse_roll_call(rank, w + config.dealer, host, port + 1, str(exc), min(config.join_timeout, 30.0),
                         identity=identity)
        raise
    log.info("[%s] joining the deployment at %s:%d (%d computing parties%s, %d clients)", me, host, port, w,
             " and the dealer" if config.dealer else "", len(config.clients))
    # the start-up may take as long as join_timeout; every wait of the computing world is bounded by it
    # (the server keeps the others' waits alive between evaluations, every third of the timeout)
    from ..mpc.comm.runtime import PartyStartError
    from ..mpc.roles.world import WorldPlan, take_part

    place = WorldPlan(rank=rank, parties=w, address=host, port=port, provider=config.provider,
                      timeout=config.join_timeout + config.timeout, identity=identity, roster=roster, roll_call=True,
                      roll_call_timeout=config.join_timeout,
                      threads=config.threads)

    def describe(r):
        return describe_helpers_rank(r, w - 1)

    def job():
        pconfig = config.party_config()
        agree_public(pconfig, rank, describe)
        if rank == 0:
            server = _Server(config, pconfig, identity, roster, describe, started, epochs, on_result)
            server.selection = select
            return server.run()
        return _helper(config, pconfig, rank, identity, roster, describe)

    try:
        outcome = take_part(place, job, leave_on_error=True)
    except PartyStartError as exc:  # the setting that expired, named
        if getattr(exc, "started", True):
            raise
        raise ServiceError(f"{exc}" + ("" if "cannot start" in str(exc) else f" ({join_setting(config)})")) from None
    if not place.dealer:
        return outcome
    if outcome is not None and not outcome[1]:
        raise ServiceError(f"the deployment ended: {outcome[0]}")
    log.info("[dealer] %s", outcome[0] if outcome is not None else "the server ended the deployment")
    return 0


def _accept_clients(config: DeployConfig, rank: int, identity, roster, describe):
    from ..mpc.comm.inlinks import accept_hosts, listen

    listener = listen(config.listen[rank], config.client_addresses[rank][1])
    try:
        links = accept_hosts(listener, rank, identity, list(roster.clients), timeout=config.join_timeout,
                             describe_me=describe(rank), describe_host=lambda h: f"client {h}",
                             farewell=_tell_the_end)
    finally:
        listener.close()
    joins = {h: links[h].recv_obj(CH_JOIN) for h in range(len(links))}
    _set_timeout(links.values(), config.timeout)
    return links, joins


def _tell_the_end(link, error: Exception) -> None:
    """A computing party that cannot start tells a client that did join why (the client's
    :func:`_next_message` reads it from any computing party)."""
    link.send_obj(CH_CONTROL, {"op": "end", "reason": str(error), "shutdown": False})


def _helper(config, pconfig, rank, identity, roster, describe) -> int:
    from ..mpc.comm import backend
    from ..mpc.roles.computing import ComputingRole

    me = describe(rank).split(" (")[0]
    links, _ = _accept_clients(config, rank, identity, roster, describe)
    role = ComputingRole(rank, pconfig, links, describe)  # keeps each evaluation's rank statistic for a selection
    try:
        while True:
            msg = backend.broadcast_obj(None, 0)
            op = msg.get("op")
            if op == "idle":
                continue
            if op == "joined":
                log.info("[%s] every client joined; waiting for evaluations", me)
            elif op == "cancel":
                log.warning("[%s] %s", me, escape(msg["reason"]))
            elif op == "evaluate":
                role.evaluate()
            elif op == "select":
                role.select()
            elif op == "end":
                if msg.get("shutdown"):
                    log.info("[%s] %s", me, escape(msg["reason"]))
                    return 0
                raise ServiceError(f"the deployment ended: {escape(msg['reason'])}")
    finally:
        for link in links.values():
            link.close()


class _Server:
    """The server's service: the clients' links, the session's link, the evaluations."""

    def __init__(self, config, pconfig, identity, roster, describe, started, epochs=None, on_result=None):
        self.config, self.pconfig, self.identity, self.roster = config, pconfig, identity, roster
        self.describe, self.started = describe, started
        self.startup_seconds: float | None = None  # known once every client has joined
        self.epochs, self.on_result = epochs, on_result  # epochs: evaluations asked for here, with no session
        self.links: dict = {}
        self.session = None
        self.evaluations = 0
        self.role = None  # the computing party's role over the clients' links (its kept statistics)
        self.kept_epochs, self.total = [], 0  # the epoch of each kept evaluation, the rows (for selections)
        self.interval = max(0.5, config.timeout / 3)

    # -- keeping the computing world's waits alive
    def tick(self) -> None:
        from ..mpc.comm import backend
        from ..mpc.primitives.dealer import ping_dealer

        backend.broadcast_obj({"op": "idle"}, 0)
        ping_dealer()

    def tell_helpers(self, msg: dict) -> None:
        from ..mpc.comm import backend

        backend.broadcast_obj(msg, 0)

    def run(self) -> int:
        from ..mpc.comm.inlinks import listen

        control = listen(*self.config.session_address) if self.epochs is None else None
        try:
            from ..mpc.roles.computing import ComputingRole

            self.links, joins = _accept_clients(self.config, 0, self.identity, self.roster, self.describe)
            self.role = ComputingRole(0, self.pconfig, self.links, self.describe)
            self.join(joins)
            return self.loop(control) if control is not None else self.run_epochs()
        except KeyboardInterrupt as exc:  # SIGTERM, SIGINT, SIGHUP: the deployment ends in order
            import signal

            name = signal.Signals(getattr(exc, "signum", signal.SIGINT)).name
            log.info("[server] stopped by %s after %d evaluation(s); ending the deployment", name, self.evaluations)
            self.end(f"the server was stopped ({name})", shutdown=True)
            raise
        except BaseException as exc:
            from ..mpc.comm.runtime import explain

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
        mechanism, report = self.config.auc_mechanism(), self.config.report()
        for epoch in range(self.epochs):
            reply = self.evaluate(epoch)
            if "error" in reply:
                raise ServiceError(reply["error"])
            startup = None
            if epoch == 0:
                startup = {"startup_seconds": round(self.first_request - self.started, 3)}
            self.on_result(evaluation_result(mechanism, reply, startup=startup, report=report))
        if getattr(self, "selection", None):  # a selection among them (secure-auc compute --select-epsilon)
            start = time.perf_counter()
            reply = self.select(list(range(self.epochs)), *self.selection)
            if "error" in reply:
                raise ServiceError(reply["error"])
            self.on_result(selection_result(self.pconfig.mechanisms[0], reply, *self.selection,
                                            clients=len(self.config.clients), seconds=time.perf_counter() - start))
        log.info("[server] %d evaluation(s) done; ending the deployment", self.epochs)
        self.end(f"the server ran its {self.epochs} evaluation(s)", shutdown=True)
        return 0

    def join(self, joins: dict) -> None:
        mine = self.config.agreed()
        problems = []
        for h in sorted(joins):
            if joins[h].get("refused"):
                problems.append(f"client {h} refused: {describe_refusal(joins[h])}")
                continue
            diff = _differences(joins[h].get("agreed") or {}, mine)
            if not diff and joins[h].get("public") != self.pconfig.public():
                diff = _differences(joins[h].get("public") or {}, self.pconfig.public())
            if diff:
                problems.append(f"client {h} was configured differently: {', '.join(diff)}")
        if problems:
            raise ServiceError("; ".join(problems))
        self.tell_helpers({"op": "joined"})
        for link in self.links.values():
            link.send_obj(CH_CONTROL, {"op": "joined"})
        self.startup_seconds = time.perf_counter() - self.started  # from the process's start, imports included
        log.info("[server] every client joined (%.1f s after the start); %s", self.startup_seconds,
                 "waiting for the session on %s:%d" % self.config.session_address if self.epochs is None
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
            self.tell_helpers(msg)
        except Exception:  # noqa: BLE001 - the helpers learn it from their own links
            pass
        from ..mpc.primitives.dealer import tell_dealer_the_end

        with contextlib.suppress(Exception):  # a dealer that is gone learns nothing
            tell_dealer_the_end(reason, shutdown)

    def tell_waiting_session(self, control, reason: str) -> None:
        """A session that connected before the deployment could start (the server takes it only
        once every client joined) is told why it ended, instead of finding the link closed."""
        from ..mpc.comm.inlinks import accept_hosts

        if not _ready([], 0.0, [control]):
            return
        try:
            links = accept_hosts(control, 0, self.identity, [self.roster.server], timeout=5.0,
                                 describe_me="the server", describe_host=lambda h: "the session")
        except Exception as exc:  # noqa: BLE001 - a stray connection: nobody to tell
            log.debug("[server] no session to tell: %s", exc)
            return
        link = links[SESSION_HOST]
        try:
            link.recv_obj(CH_CONTROL)  # its hello
            link.send_obj(CH_CONTROL, {"error": f"the deployment did not start: {reason}", "fatal": True})
        except Exception:  # noqa: BLE001 - it went away meanwhile
            pass
        finally:
            link.close()

    def client_lost(self, h: int) -> ServiceError:
        from ..mpc.comm.runtime import explain

        try:
            msg = self.links[h].recv_obj(CH_CONTROL)
        except Exception as exc:  # noqa: BLE001 - the usual case: its link closed
            return ServiceError(explain(exc))  # names the client
        what = escape(repr(msg.get("op") if isinstance(msg, dict) else type(msg).__name__))[:60]
        return ServiceError(f"client {h} sent a message ({what}) outside an evaluation")

    def loop(self, control) -> int:
        from ..mpc.comm import tls
        from ..mpc.comm.inlinks import accept_hosts

        ticked = time.monotonic()
        while True:
            watched = {link.sock: ("client", h) for h, link in self.links.items()}
            watched[self.session.sock if self.session else control] = ("session" if self.session else "listener", 0)
            ready = _ready([*self.links.values(), *([self.session] if self.session else [])],
                           max(0.0, ticked + self.interval - time.monotonic()), [] if self.session else [control])
            if time.monotonic() >= ticked + self.interval:  # whatever arrives on the session port meanwhile
                self.tick()
                ticked = time.monotonic()
            if not ready:
                continue
            for sock in ready:
                what, h = watched[sock]
                if what == "client":
                    raise self.client_lost(h)
            what, _ = watched[ready[0]]
            if what == "listener":
                try:  # at most a third of the timeout: the computing world's waits are kept alive meanwhile
                    links = accept_hosts(control, 0, self.identity, [self.roster.server],
                                         timeout=min(self.interval, tls.HELLO_LIMIT), describe_me="the server",
                                         describe_host=lambda h: "the session")
                except Exception as exc:  # noqa: BLE001 - a stray or failed connection: keep serving
                    log.debug("[server] no session connected: %s", exc)
                    continue
                self.session = links[SESSION_HOST]
                _set_timeout([self.session], self.config.timeout)
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
        diff = _differences(hello.get("agreed") or {}, self.config.agreed())
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
        deadline = time.monotonic() + self.config.score_timeout
        while len(answers) < len(self.links):
            pending = {self.links[h].sock: h for h in self.links if h not in answers}
            ready = _ready([self.links[h] for h in pending.values()], self.interval)
            for sock in ready:
                h = pending[sock]
                try:
                    answer = self.links[h].recv_obj(CH_CONTROL)
                    answers[h] = answer if isinstance(answer, dict) else {"refused": None}
                except Exception as exc:  # noqa: BLE001
                    from ..mpc.comm.runtime import explain

                    raise ServiceError(explain(exc)) from None  # names the client
            if not ready:
                if time.monotonic() > deadline:
                    late = ", ".join(f"client {h}" for h in self.links if h not in answers)
                    raise ServiceError(f"{late} did not answer evaluation {n} (epoch {epoch}) within "
                                       f"{self.config.score_timeout:g} s (deployment.score_timeout)")
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
        result = self.role.evaluate()
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
                "computing_parties": self.config.computing_parties} | (
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
            return {"error": f"epochs must be distinct epochs evaluated in this deployment, got {epochs!r}", "refused": True}
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
        result = self.role.select()
        log.info("[server] selection among %d evaluations: epoch %s", len(idx), self.kept_epochs[result.selected])
        reply = {"ok": True, "selected": self.kept_epochs[result.selected], "epochs": list(epochs),
                 "argmax_seconds": round(result.argmax_seconds, 4), "argmax_bytes": result.argmax_bytes,
                 "argmax_rounds": result.argmax_rounds, "samples": self.total, "sizes": self.sizes}
        if result.release is not None:
            agg = result.release[1]
            reply["release"] = [int(agg.global_sum_fixed), int(agg.positives_fixed), int(agg.total)]
        return reply


def evaluation_result(mechanism, reply: dict, *, startup: dict | None = None, seconds: float | None = None,
                      report=None):
    """The :class:`secure_auc.EvaluationResult` of the server's ``reply`` to one evaluation: the
    estimate from the opened aggregate, the std and 95 % interval from the clients' public
    sizes, and the cost in ``extra``; ``startup`` (the first evaluation's) is reported apart,
    ``seconds`` (default: the server's own) is end to end.  With ``report``
    (:meth:`.config.DeployConfig.report`; ``mechanism`` is then the AUC's) the metrics derived
    from the opened report vector join ``extra``, as :func:`secure_auc.report.release.attach_report` puts them."""
    from ..mpc.finish import server_estimates
    from ..result import make_result

    ([estimate], [aggregate]) = server_estimates(reply["aggregate"][:2], [mechanism], reply["aggregate"][2])
    extra = {k: reply[k] for k in ("evaluation", "epoch", "rank_step_seconds", "scoring_seconds", "sizes",
                                   "server_bytes")}
    extra |= {"server_seconds": reply["seconds"], "layout": "helpers",
              "computing_parties": reply["computing_parties"]} | (startup or {})
    if report is not None:
        from ..report.release import attach_report

        extra = attach_report(report[1], reply["report"], sum(reply["sizes"]), len(reply["sizes"]), mechanism) | extra
    result = make_result(mechanism, estimate, aggregate, list(reply["sizes"]), protocol="mpc",
                         seconds=reply["seconds"] if seconds is None else seconds, extra=extra)
    if report is not None:  # the evaluation spent the total, the AUC its share
        finite = report[2].cost.epsilon != float("inf")
        result.epsilon = float(report[2].cost.epsilon) if finite else None
        result.delta = float(report[2].cost.delta) if finite else None
    return result


def selection_result(mechanism, reply: dict, epsilon: float, release_epsilon: float | None = None, *,
                     clients: int, seconds: float):
    """The :class:`secure_auc.SelectionResult` of the server's ``reply`` to a selection (``selected``:
    the epoch, as a string); with ``release_epsilon``, the selected's DP AUC from the opened
    aggregate under ``mechanism`` at that eps."""
    from ..dp.selection import release_mechanism
    from ..result import SelectionResult, release_result

    names = [str(e) for e in reply["epochs"]]
    out = SelectionResult(selected=str(reply["selected"]), index=names.index(str(reply["selected"])),
                          candidates=names, method="noisy-max", epsilon=epsilon, delta=0.0, protocol="mpc",
                          clients=clients, samples=int(reply["samples"]), seconds=round(seconds, 3),
                          selection_epsilon=epsilon,
                          extra={k: reply[k] for k in ("argmax_seconds", "argmax_bytes", "argmax_rounds")})
    if release_epsilon is not None:
        from ..mpc.finish import server_estimates
        from ..result import make_result

        release = release_mechanism(mechanism, release_epsilon)
        ([estimate], [aggregate]) = server_estimates(reply["release"][:2], [release], reply["release"][2])
        res = make_result(release, estimate, aggregate, list(reply["sizes"]), protocol="mpc", seconds=out.seconds)
        release_result(out, res, release_epsilon)
    return out


# --------------------------------------------------------------------------- clients

def read_labels(path: Path, column: str = "label") -> np.ndarray:
    """A client's labels: the column ``column`` (0/1) of a client file (CSV, CSV.gz, Parquet;
    other columns ignored), or a ``.npy`` array."""
    from ..data.io import read_label_file

    if path.suffix == ".npy":
        try:
            labels = np.load(path, allow_pickle=False).reshape(-1)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the labels {path}: {exc}") from None
        if not np.isin(labels, (0, 1)).all():
            raise InputError(f"{path}: labels must be 0 or 1")
        return labels.astype(np.int8)
    return read_label_file(path, label_column=column)


def load_hook(spec: str, folder: Path):
    """A client's source of scores: ``module:function`` (imported with ``folder`` first on
    ``sys.path``), called as ``function(epoch, client=k, evaluation=n)``; or a file per
    evaluation, ``path/with/{epoch}.npy``, or a CSV, gzip-compressed CSV or Parquet file with
    a column ``score`` (:func:`.data.io.read_score_file`; other columns ignored).

    The epoch is checked (a non-negative integer) and the file's name is the configured one
    with that ``int`` alone in it: nothing the server sends chooses a path.  A module (or the
    folder) that another user may write is refused (:func:`.untrusted.check_private_code`)."""
    module, sep, name = spec.partition(":")
    if sep and "/" not in module and "{" not in spec and not module.endswith((".npy", ".csv")):
        import importlib.util

        what = f"the scoring hook {spec!r}"
        check_private_code(folder, folder, what)
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:
            raise InputError(f"cannot load the scoring hook {spec!r}: {exc}") from None
        if found is not None and found.origin and Path(found.origin).resolve().is_relative_to(folder.resolve()):
            check_private_code(Path(found.origin).resolve(), folder.resolve(), what)
        try:
            fn = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise InputError(f"cannot load the scoring hook {spec!r}: {exc}") from None
        if not callable(fn):
            raise InputError(f"the scoring hook {spec!r} is not callable")
        return fn

    def from_file(epoch, **_):
        path = folder / spec.format(epoch=check_epoch(epoch))
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        from ..data.io import read_score_file

        return read_score_file(path)

    return from_file


class _Refusal(InputError):
    """A client's reason not to take part: ``message`` (:func:`.untrusted.refusal`) goes to the
    server, the text (the detail) only to the client's own log."""

    def __init__(self, detail: str, code: str, **numbers):
        super().__init__(detail)
        self.message = _refusal(code, **numbers)


def _scores(out, n: int) -> tuple[np.ndarray, int | None]:
    """The hook's answer (scores, or (scores, noise key)) checked: n finite numbers."""
    key = None
    if isinstance(out, tuple):
        out, key = out
    if hasattr(out, "detach"):  # a torch tensor
        out = out.detach().cpu().numpy()
    scores = np.asarray(out, dtype=np.float64)
    if scores.ndim == 2 and 1 in scores.shape:
        scores = scores.reshape(-1)
    if scores.shape != (n,):
        raise _Refusal(f"its scoring hook returned scores of shape {scores.shape} for {n} labels", "scores-shape",
                       got=scores.size, expected=n)
    if not np.isfinite(scores).all():
        bad = int((~np.isfinite(scores)).sum())
        raise _Refusal(f"its scoring hook returned {bad} score(s) that are not finite", "scores-not-finite", count=bad)
    return scores, key


def _answer_open(msg: dict, hook, inputs: ClientInputs, config: DeployConfig, mechanism, k: int):
    """Client ``k``'s answer to the server's ``open``: (scores, noise key, reservation, None)
    or (None, None, None, refusal message).  The refusal sent is a code and counts
    (:mod:`.untrusted`); the full detail goes to this client's log only."""
    from ..dp.accountant import BudgetExceeded

    labels, ledger = inputs.labels, inputs.ledger
    n, epoch = msg.get("evaluation"), msg.get("epoch")
    try:
        n = check_epoch(n, "the evaluation's number")
        epoch = check_epoch(epoch, "the epoch the server sent")
    except InputError as exc:
        log.warning("[client %d] refused an evaluation: %s", k, exc)
        return None, None, None, _refusal("epoch")
    step = "scores"
    try:
        try:
            out = hook(epoch, client=k, evaluation=n)
        except Exception as exc:  # noqa: BLE001 - the operator's hook (or its file) failed
            raise _Refusal(f"its scoring hook failed: {type(exc).__name__}: {exc}", "scores-unavailable") from None
        scores, key = _scores(out, len(labels))
        reservation = None
        if ledger is not None:
            step = "ledger"
            reservation = ledger.reserve([inputs.charged], mechanism, seed=key, clients=[k],
                                         total=len(labels) + len(config.clients) - 1, name=inputs.name,
                                         note=f"deployed client {k}, evaluation {n}, epoch {epoch}")
        return scores, key, reservation, None
    except Exception as exc:  # noqa: BLE001 - every failure refuses, with a code
        message = exc.message if isinstance(exc, _Refusal) else _refusal(
            "budget" if isinstance(exc, BudgetExceeded) else "ledger" if step == "ledger" else "scores-unavailable")
        log.warning("[client %d] refused evaluation %d (epoch %d): %s", k, n, epoch, escape(exc))
        return None, None, None, message


@dataclass
class ClientInputs:
    """What client k's service holds: its ``labels``, its ``hook`` (``hook(epoch, client=k,
    evaluation=n)`` -> scores, or (scores, noise key)), its own ``ledger`` (optional) and
    what the ledger charges (``charged``: a :class:`secure_auc.dp.accountant.Records` or
    :class:`secure_auc.ClientData`, each record when it has ``ids``, else the labels as one
    dataset; or the same keyed by :meth:`secure_auc.Ledger.keyed`)."""

    labels: np.ndarray
    hook: object
    ledger: object = None
    charged: object = None
    name: str | None = None  # the dataset's name in the ledger's report


def client_inputs(config: DeployConfig, k: int) -> ClientInputs:
    """Client ``k``'s inputs from its ``[[clients]]`` entry (paths on its host), its ledger
    read (and checked) now, so that a broken one stops the service at start-up."""
    from ..dp.accountant import Ledger, Records

    entry = config.clients[k]
    if entry.labels is None or entry.scores is None:
        raise InputError(f"{config.path}: clients[{k}] needs labels and scores on this client's host")
    labels, ids = read_labels(entry.labels, entry.label_column), None
    if entry.id_column is not None:  # each record charged, as evaluate charges a file read with --id-column
        from ..data.io import read_labels_and_ids

        labels, ids = read_labels_and_ids(entry.labels, label_column=entry.label_column, id_column=entry.id_column,
                                          id_option=f"clients[{k}].id_column in {config.path}")
    hook = load_hook(entry.scores, config.path.resolve().parent)
    ledger, charged = None, Records(labels, ids, str(entry.labels))
    if entry.ledger is not None:
        ledger = Ledger(entry.ledger)
        if entry.budget is not None:
            ledger.set_budget(entry.budget, entry.budget_delta)
        charged = ledger.keyed(charged, k)  # keyed once: each evaluation charges the same records
        ledger.spent(charged)
    return ClientInputs(labels, hook, ledger, charged)


def run_client_service(config: DeployConfig, k: int, identity, inputs: ClientInputs | None = None, *,
                       refusal: str | None = None) -> int:
    """Client ``k``'s service (see the module docstring), with ``inputs`` (default: from its
    entry of the configuration, :func:`client_inputs`).  With ``refusal`` (a reason of
    :data:`.untrusted.REASONS`; any other text counts as ``"inputs"`` and stays here) the client
    joins only to say why it cannot take part (the server ends the deployment, naming it) and
    returns."""
    from ..data.io import ClientData
    from ..dp.accountant import finishing
    from ..mpc.audit import forbid_crypten_randomness
    from ..mpc.comm.inlinks import PartyUnreachable, connect
    from ..mpc.comm.roster import describe_helpers_rank
    from ..mpc.roles.host import HostRole

    me = f"client {k}"
    roster = config.roster()
    _check_identity(identity, roster.clients[k], me, config)
    if refusal is None and inputs is None:
        inputs = client_inputs(config, k)
    mechanism, pconfig = config.charged(), config.party_config()  # with a report: the composed cost is charged
    w = config.computing_parties

    def describe_party(p):
        return describe_helpers_rank(p, w - 1).split(" (")[0]

    parties = [(h, p, roster.key(r)) for r, (h, p) in enumerate(config.client_addresses)]
    if refusal is None:
        log.info("[%s] %d labels; connecting to the %d computing parties", me, len(inputs.labels), w)
    try:
        links = connect(k, identity, parties, timeout=config.join_timeout, describe_party=describe_party,
                        describe_me=me)
    except PartyUnreachable as exc:  # the usual cause: another computing party (or the dealer) is not up
        raise ServiceError(f"{exc} ({join_setting(config)}); a computing party takes "
                           "clients only once every computing party and the dealer have joined: check that each "
                           "of them runs") from None
    try:
        for link in links:
            link.send_obj(CH_JOIN, {"client": k, "agreed": config.agreed(), "public": pconfig.public()}
                          | (_refusal(refusal if refusal in REASONS else "inputs") if refusal else {}))
        if refusal:
            return 0
        labels, hook, ledger = inputs.labels, inputs.hook, inputs.ledger
        role = HostRole(k, k, pconfig, links)  # keeps each evaluation's ranks for a release after a selection
        verdict = _next_message(links, config.join_timeout, describe_party)
        if verdict.get("op") != "joined":
            raise ServiceError(f"the deployment did not start: {escape(verdict.get('reason', verdict))}")
        _set_timeout(links, config.timeout)
        log.info("[%s] joined the deployment; waiting for evaluations", me)
        releases = 0  # evaluations this service has scored: the index of the next one's noise key
        with forbid_crypten_randomness():
            while True:
                msg = _next_message(links, None, describe_party)
                op = msg.get("op")
                if op == "end":
                    if msg.get("shutdown"):
                        log.info("[%s] %s", me, escape(msg["reason"]))
                        return 0
                    raise ServiceError(f"the deployment ended: {escape(msg['reason'])}")
                if op == "select":  # among earlier evaluations, whose statistics the computing parties kept
                    _client_select(msg, k, inputs, ledger, role, config, describe_party, me)
                    continue
                if op != "open":
                    raise ServiceError(f"the server sent {escape(repr(op))[:60]} where an evaluation was expected")
                start = time.perf_counter()
                scores, key, reservation, answer = _answer_open(msg, hook, inputs, config, mechanism, k)
                n, epoch = msg.get("evaluation"), msg.get("epoch")
                if key is not None:  # a hook's key: release i of this service draws from (key, i), never reused
                    key = release_key(key, releases)
                releases += 1
                links[0].send_obj(CH_CONTROL, answer or {"ok": True, "seconds": time.perf_counter() - start})
                # the others may score for as long as score_timeout
                decision = _next_message(links, config.score_timeout + config.timeout, describe_party)
                if decision.get("op") != "go":
                    if reservation is not None:
                        ledger.cancel(reservation)  # nothing was released
                    if decision.get("op") == "cancel":
                        if answer is None:
                            log.warning("[%s] %s", me, escape(decision["reason"]))
                        continue
                    if decision.get("op") == "end":
                        raise ServiceError(f"the deployment ended: {escape(decision['reason'])}")
                    raise ServiceError(f"the server sent {escape(repr(decision.get('op')))[:60]} where go or cancel "
                                       "was expected")
                if answer is not None:  # nothing to release: this client refused
                    raise ServiceError("the server sent go to an evaluation this client refused")
                with finishing(ledger, reservation):
                    role.evaluate([ClientData(scores, labels)], [key])
                log.info("[%s] evaluation %d (epoch %s) done in %.3f s", me, n, epoch, time.perf_counter() - start)
    finally:
        for link in links:
            link.close()


def _client_select(msg, k, inputs, ledger, role, config, describe_party, me) -> None:
    """Client ``k``'s part of a selection: charge its ledger (or refuse), then share its noise
    (and with a release, its statistics of the selected evaluation from the ranks its ``role``
    kept, :class:`secure_auc.mpc.roles.host.HostRole`)."""
    from ..dp.accountant import finishing
    from ..dp.selection import SelectAndRelease, SelectionCharge, release_mechanism

    from ..dp.accountant import BudgetExceeded

    reservation, answer, release_eps, evaluations, epsilon = None, None, None, None, None
    links = role.links
    try:
        evaluations, epsilon, total = msg["evaluations"], float(msg["epsilon"]), int(msg["total"])
        if not (math.isfinite(epsilon) and epsilon > 0) or total < 1:
            raise InputError(f"the server sent eps = {epsilon!r} and {total!r} samples for the selection")
        release_eps = msg.get("release_epsilon")
        charge = SelectionCharge(epsilon)
        if release_eps is not None:
            release_eps = float(release_eps)
            if not (math.isfinite(release_eps) and release_eps > 0):
                raise InputError(f"the server sent release eps = {release_eps!r} for the selection")
            charge = SelectAndRelease(charge, release_mechanism(role.config.mechanisms[0], release_eps))
        if ledger is not None:
            reservation = ledger.reserve([inputs.charged], charge, clients=[k], total=total,
                                         name=inputs.name, note=f"deployed client {k}, selection")
    except (InputError, KeyError, TypeError, ValueError) as exc:  # the detail stays here; the server gets a code
        answer = _refusal("budget" if isinstance(exc, BudgetExceeded) else "ledger")
        log.warning("[%s] refused the selection: %s", me, escape(exc))
    links[0].send_obj(CH_CONTROL, answer or {"ok": True})
    decision = _next_message(links, config.score_timeout + config.timeout, describe_party)
    if decision.get("op") != "go" or answer is not None:  # a refusal stands, whatever the server says
        if reservation is not None:
            ledger.cancel(reservation)
        if decision.get("op") == "end":
            raise ServiceError(f"the deployment ended: {escape(decision.get('reason'))}")
        return
    with finishing(ledger, reservation):
        role.select(evaluations, epsilon, len(config.clients), total, [None], release_eps)


def _ready(links, timeout: float, sockets=()) -> list:
    """The sockets of ``links`` with a message (or a disconnection) to read, and of ``sockets``
    that are readable, within ``timeout`` seconds: a message already decrypted into a link's
    buffer (two arrived together) shows in no ``poll``, so those come first."""
    from ..mpc.comm.inlinks import readable_sockets

    ready = [link.sock for link in links if link.session.buffered()]
    if ready:
        return ready
    return readable_sockets([link.sock for link in links] + list(sockets), timeout)


def _next_message(links, timeout: float | None, describe_party) -> dict:
    """The server's next control message; a computing party's link that closes meanwhile is
    named (``timeout``: None waits as long as every link stays open)."""
    from ..mpc.comm.runtime import explain

    deadline = None if timeout is None else time.monotonic() + timeout
    socks = {link.sock: p for p, link in enumerate(links)}
    while True:
        ready = _ready(links, 1.0)
        for sock in ready:
            p = socks[sock]
            if p != 0 and links[0].sock not in ready:  # the server's message first: it says why
                try:
                    msg = links[p].recv_obj(CH_CONTROL)
                except Exception as exc:  # noqa: BLE001
                    raise ServiceError(explain(exc)) from None  # names the party
                if isinstance(msg, dict) and msg.get("op") == "end":  # it could not start either (_tell_the_end)
                    return msg
                raise ServiceError(f"{describe_party(p)} sent a message outside an evaluation")
        if ready:
            try:
                return links[0].recv_obj(CH_CONTROL)
            except Exception as exc:  # noqa: BLE001
                raise ServiceError(explain(exc)) from None
        if deadline is not None and time.monotonic() > deadline:
            raise ServiceError(f"the server did not answer within {timeout:g} s")
