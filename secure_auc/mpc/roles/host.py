"""A client host of the helpers layout across evaluations, written once.

:class:`HostRole` is what a client host (one process holding one or more clients' labels)
does in each evaluation and selection over its open links to the computing parties,
whatever hands it the scores: the local session's tasks (:func:`session_host_job`) or a
deployed client's scoring hook (:func:`client_service`, a loop over the server's control
messages, :mod:`.control`).
After each evaluation its clients' rank statistic goes to the computing parties in shares,
and the host keeps its own rows' ranks for a release after a selection.  The steps
themselves are :mod:`..input_hosts`'.  Nothing here loads torch, CrypTen or numba: a
client host computes nothing in MPC (``tests/mpc/test_light_host.py``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time

import numpy as np

from ...validation import InputError
from ..comm.inlinks import ControlMessage, connect
from ..comm.roster import describe_helpers_rank, describe_host
from ..input_hosts import CH_HELLO, HostResult, host_evaluation, host_keep, host_session_select
from ..party import PartyConfig
from .control import (CH_CONTROL, CH_JOIN, REASONS, ServiceError, check_epoch, ended, escape,
                      next_message, refusal as _refusal, answer_within)

log = logging.getLogger(__name__)

__all__ = ["HostRole", "session_host_job", "client_service", "checked_scores", "answer_open"]


class HostRole:
    """Client host ``h``, hosting clients ``first ..``, over its open ``links`` to the computing
    parties (by rank).

    Attributes
    ----------
    kept : list
        Per evaluation: its clients' labels and the host's rows' 2 x mid-ranks (int32), for the
        release of a selected evaluation.
    """

    def __init__(self, h: int, first: int, config: PartyConfig, links: list):
        self.h, self.first, self.config, self.links = h, first, config, links
        self.kept: list = []

    def evaluate(self, clients, noise_keys, on_labels=None) -> HostResult:
        """One evaluation of ``clients`` (their scores and labels, :class:`secure_auc.ClientData`)
        with each client's noise key (:func:`..input_hosts.host_evaluation`; ``on_labels()``
        just before their labels are first used), then their rank statistic shared with the
        computing parties (:func:`..input_hosts.host_keep`); ``"ranks"``: each client's 2 x
        mid-ranks."""
        out = host_evaluation(self.h, clients, self.first, noise_keys, self.config, self.links, True, on_labels)
        labels = [c.labels for c in clients]
        host_keep(self.links, self.h, labels, out["ranks"])
        self.kept.append((labels, np.concatenate(out["ranks"]).astype(np.int32)))
        return out

    def select(self, epochs, epsilon: float, honest: int, total: int, noise_keys, release_epsilon=None) -> None:
        """This host's part of a selection among the kept ``epochs`` (its clients' noise shares,
        :func:`..input_hosts.host_session_select`); with ``release_epsilon``, its clients'
        statistics of the selected evaluation under the configured mechanism at that eps."""
        release = None if release_epsilon is None else (release_epsilon, self.config.mechanisms[0], self.first,
                                                        self.kept)
        host_session_select(self.links, self.h, epochs, epsilon, honest, total, noise_keys, release)


def session_host_job(h: int, labels, first: int, config: PartyConfig, parties, identity_raw: bytes, timeout: float,
                     tasks, results=None) -> dict:
    """A client host of a :class:`..session.LocalSession`: connect once, then evaluate each
    ``(clients, noise keys)`` taken from ``tasks`` until None, or select among earlier
    evaluations for a task ``("select", epochs, eps, k, M, noise keys, release eps or None)``
    (:class:`HostRole`); after each, ``(-(h + 1), {"bytes": ...})`` (sent and received in it)
    goes to ``results``."""
    from ..comm.roster import identity_from_bytes

    w = len(parties)
    me = describe_host(h, range(first, first + len(labels)))
    links = connect(h, identity_from_bytes(identity_raw), parties, timeout=timeout,
                    describe_party=lambda p: describe_helpers_rank(p, w - 1), describe_me=me)
    role = HostRole(h, first, config, links)
    evaluations = 0
    try:
        while True:
            task = tasks.get()
            if task is None:
                for link in links:
                    link.send_obj(CH_HELLO, {"stop": True})
                return {"evaluations": evaluations, "bytes": int(sum(link.bytes for link in links))}
            before = sum(link.bytes for link in links)
            if task[0] == "select":  # a selection among earlier evaluations
                _, epochs, eps, honest, total, keys, release_eps = task
                role.select(epochs, eps, honest, total, keys, release_eps)
            else:
                clients, noise_keys = task
                role.evaluate(clients, noise_keys)
                evaluations += 1
            if results is not None:
                results.put((-(h + 1), {"bytes": int(sum(link.bytes for link in links) - before)}))
    finally:
        for link in links:
            link.close()


# --------------------------------------------------------------------------- a deployed client

class _Refusal(InputError):
    """A client's reason not to take part: ``message`` (:func:`.control.refusal`) goes to the
    server, the text (the detail) only to the client's own log."""

    def __init__(self, detail: str, code: str, **numbers):
        super().__init__(detail)
        self.message = _refusal(code, **numbers)


def checked_scores(out, n: int) -> tuple[np.ndarray, int | None]:
    """A scoring hook's answer (scores, or (scores, noise key)) checked: n finite numbers
    (a torch tensor detached, a column flattened); else a refusal carrying its reason code.

    >>> checked_scores(([[0.5], [0.25]], 7), 2)
    (array([0.5 , 0.25]), 7)
    """
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


def answer_open(msg: dict, inputs, mechanism, k: int, clients: int):
    """Client ``k``'s answer to the server's ``open`` (of ``clients``) from its ``inputs`` (its
    ``labels``, scoring ``hook``, ``ledger`` with what it ``charged`` and the dataset's ``name``): (scores, noise key,
    reservation, None) or (None, None, None, refusal message).  The refusal sent is a code
    and counts (:mod:`.control`); the full detail goes to this client's log only."""
    from ...dp.accountant import BudgetExceeded

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
            out = inputs.hook(epoch, client=k, evaluation=n)
        except Exception as exc:  # noqa: BLE001 - the operator's hook (or its file) failed
            raise _Refusal(f"its scoring hook failed: {type(exc).__name__}: {exc}", "scores-unavailable") from None
        scores, key = checked_scores(out, len(labels))
        reservation = None
        if ledger is not None:
            step = "ledger"
            reservation = ledger.reserve([inputs.charged], mechanism, seed=key, clients=[k],
                                         total=len(labels) + clients - 1, name=inputs.name,
                                         note=f"deployed client {k}, evaluation {n}, epoch {epoch}")
        return scores, key, reservation, None
    except Exception as exc:  # noqa: BLE001 - every failure refuses, with a code
        message = exc.message if isinstance(exc, _Refusal) else _refusal(
            "budget" if isinstance(exc, BudgetExceeded) else "ledger" if step == "ledger" else "scores-unavailable")
        log.warning("[client %d] refused evaluation %d (epoch %d): %s", k, n, epoch, escape(exc))
        return None, None, None, message


def client_service(plan, k: int, identity, inputs, *, refusal: str | None = None) -> int:
    """Client ``k``'s service of a deployment (:class:`.control.ServicePlan` ``plan``): connect to
    every computing party, say who it is and how it was configured, then answer the server's
    ``open`` and ``select`` with ``inputs`` (:class:`HostRole` evaluates) until the server ends
    the deployment; 0 on an orderly end.  With ``refusal`` (a reason of :data:`.control.REASONS`; any other text counts
    as ``"inputs"`` and stays here) it joins only to say why it cannot take part (the server
    ends the deployment, naming it) and returns."""
    from ...data.io import ClientData
    from ...dp.accountant import finishing
    from ...dp.rng import release_key
    from ..audit import forbid_crypten_randomness
    from ..comm.inlinks import PartyUnreachable

    me, w, config = f"client {k}", plan.computing, plan.party

    def describe_party(p):
        return describe_helpers_rank(p, w - 1).split(" (")[0]

    parties = [(h, p, plan.roster.key(r)) for r, (h, p) in enumerate(plan.client_addresses)]
    if refusal is None:
        log.info("[%s] %d labels; connecting to the %d computing parties", me, len(inputs.labels), w)
    try:
        links = connect(k, identity, parties, timeout=plan.join_timeout, describe_party=describe_party,
                        describe_me=me, waiting=_told_by_the_server,
                        answer_within=answer_within(plan.join_timeout, plan.join_setting))
    except PartyUnreachable as exc:  # the usual cause: another computing party (or the dealer) is not up
        raise ServiceError(f"{exc} ({plan.join_setting}); a computing party takes "
                           "clients only once every computing party and the dealer have joined: check that each "
                           "of them runs") from None
    try:
        for link in links:
            link.send_obj(CH_JOIN, {"client": k, "agreed": plan.agreed, "public": config.public()}
                          | (_refusal(refusal if refusal in REASONS else "inputs") if refusal else {}))
        if refusal:
            return 0
        role = HostRole(k, k, config, links)  # keeps each evaluation's ranks for a release after a selection
        verdict = next_message(links, plan.join_timeout, describe_party)
        if verdict.get("op") != "joined":
            raise ServiceError(f"the deployment did not start: {escape(verdict.get('reason', verdict))}")
        for link in links:
            link.set_timeout(plan.timeout)
        links[0].control = CH_CONTROL  # the server's end may come in the middle of a step
        log.info("[%s] joined the deployment; waiting for evaluations", me)
        releases = 0  # evaluations this service has scored: the index of the next one's noise key
        with forbid_crypten_randomness():
            while True:
                msg = next_message(links, None, describe_party)
                op = msg.get("op")
                if op == "end":
                    return ended(msg, me, log)
                if op == "select":  # among earlier evaluations, whose statistics the computing parties kept
                    _client_select(msg, k, inputs, role, plan, describe_party, me)
                    continue
                if op != "open":
                    raise ServiceError(f"the server sent {escape(repr(op))[:60]} where an evaluation was expected")
                start = time.perf_counter()
                scores, key, reservation, answer = answer_open(msg, inputs, plan.charged, k, plan.clients)
                n, epoch = msg.get("evaluation"), msg.get("epoch")
                if key is not None:  # a hook's key: release i of this service draws from (key, i), never reused
                    key = release_key(key, releases)
                releases += 1
                links[0].send_obj(CH_CONTROL, answer or {"ok": True, "seconds": time.perf_counter() - start})
                # the others may score for as long as score_timeout
                if not _decided(links, plan, describe_party, inputs.ledger, reservation, answer, me):
                    continue
                labels_used: list = []
                try:  # a step that ends before this client's labels were used released nothing of them
                    with finishing(inputs.ledger, reservation), _marking_labels(labels_used):
                        role.evaluate([ClientData(scores, inputs.labels)], [key],
                                      on_labels=lambda: labels_used.append(True))
                except Exception as exc:  # noqa: BLE001 - the server may have ended the deployment meanwhile
                    # (its end read here, or waiting on its link while another party's link closed first)
                    msg = exc.message if isinstance(exc, ControlMessage) else links[0].last_word(CH_CONTROL, 2.0)
                    if not isinstance(msg, dict) or msg.get("op") != "end" or "reason" not in msg:
                        if isinstance(exc, ControlMessage):
                            raise ServiceError(f"the server sent {escape(repr(msg))[:60]} in the middle of an "
                                               "evaluation") from None
                        raise
                    log.info("[%s] evaluation %d (epoch %s) stopped: %s", me, n, epoch,
                             "its statistics were shared (charged)" if labels_used else "nothing was released")
                    return ended(msg, me, log)
                log.info("[%s] evaluation %d (epoch %s) done in %.3f s", me, n, epoch, time.perf_counter() - start)
    finally:
        for link in links:
            link.close()


@contextlib.contextmanager
def _marking_labels(labels_used: list):
    """An evaluation that ends (a stop, a fault, the deployment's end) before this client used its
    labels carries ``started = False``: its ledger withdraws the reservation
    (:func:`secure_auc.dp.accountant.finishing`); after, it is charged (the aggregate may have
    been opened)."""
    try:
        yield
    except BaseException as exc:
        with contextlib.suppress(AttributeError, TypeError):
            exc.started = bool(labels_used)
        raise


def _told_by_the_server(links) -> None:
    """While a client waits for another computing party to listen, the server it already reached
    may say why the deployment cannot start (it could not: another computing party or the dealer
    cannot); that is raised at once, instead of waiting out ``join_timeout``."""
    if not links or not links[0].readable(0.0):
        return
    msg = links[0].recv_obj(CH_CONTROL)  # a closed link raises, naming the server
    if isinstance(msg, dict) and msg.get("op") == "end":
        raise ServiceError(f"the deployment did not start: {escape(msg.get('reason'))}")
    raise ServiceError("the server sent a message before every computing party was reached")


def _decided(links, plan, describe_party, ledger, reservation, answer, me: str) -> bool:
    """The server's decision after every client answered: True on ``go`` (to this client's ``ok``);
    on ``cancel`` False, the reservation withdrawn (nothing was released); anything else ends."""
    decision = next_message(links, plan.score_timeout + plan.timeout, describe_party)
    op = decision.get("op")
    if op == "go" and answer is None:
        return True
    if reservation is not None:
        ledger.cancel(reservation)  # nothing was released
    if op == "go":  # nothing to release: this client refused
        raise ServiceError("the server sent go to an evaluation this client refused")
    if op == "cancel":
        if answer is None:
            log.warning("[%s] %s", me, escape(decision["reason"]))
        return False
    if op == "end":
        raise ServiceError(f"the deployment ended: {escape(decision['reason'])}")
    raise ServiceError(f"the server sent {escape(repr(op))[:60]} where go or cancel was expected")


def _client_select(msg, k, inputs, role, plan, describe_party, me) -> None:
    """Client ``k``'s part of a selection: charge its ledger (or refuse), then share its noise
    (and with a release, its statistics of the selected evaluation from the ranks its ``role``
    kept)."""
    from ...dp.accountant import BudgetExceeded, finishing
    from ...dp.selection import SelectAndRelease, SelectionCharge, release_mechanism

    reservation, answer, release_eps, evaluations, epsilon = None, None, None, None, None
    ledger = inputs.ledger
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
    role.links[0].send_obj(CH_CONTROL, answer or {"ok": True})
    decision = next_message(role.links, plan.score_timeout + plan.timeout, describe_party)
    if decision.get("op") != "go" or answer is not None:  # a refusal stands, whatever the server says
        if reservation is not None:
            ledger.cancel(reservation)
        if decision.get("op") == "end":
            raise ServiceError(f"the deployment ended: {escape(decision.get('reason'))}")
        return
    with finishing(ledger, reservation):
        role.select(evaluations, epsilon, plan.clients, total, [None], release_eps)
