"""The platform's end of a deployment: evaluations asked of the server's service.

:class:`DeployedSession` (``MPCSession.connect(config, key=...)``) connects to
the server service's ``server.session`` address over an authenticated,
encrypted link (the platform signs with the server's identity key: the session
and the server are the same organisation), checks that both were configured
alike, and asks for one evaluation per :meth:`DeployedSession.evaluate`.  The
clients produce their scores themselves (their hooks); this process holds no
client's labels or scores, only the aggregate and the estimate.
"""

from __future__ import annotations

import logging
import time

from ..mpc import MPCError
from ..validation import InputError
from ..mpc.roles.control import CH_CONTROL as _CONTROL, check_epoch
from .config import DeployConfig, load_config

log = logging.getLogger(__name__)

__all__ = ["DeployedSession", "EvaluationRefused", "evaluation_result", "selection_result", "reply_result"]


class EvaluationRefused(MPCError):
    """A client refused the evaluation before releasing anything (its budget, its hook);
    the deployment goes on."""


class DeployedSession:
    """A session with deployed services (see the module docstring).

    Parameters
    ----------
    config : str, pathlib.Path or DeployConfig
        The deployment configuration (:func:`secure_auc.deploy.load_config`).
    key : str or pathlib.Path
        The server's identity key (``secure-auc keygen``), which the roster lists
        under ``"server"``.

    Examples
    --------
    Not run here (it needs the services)::

        with MPCSession.connect("deploy.toml", key="keys/server.pem") as session:
            for epoch in range(10):
                train_one_epoch(model)
                save_model(model, epoch)          # the clients' hooks score with it
                result = session.evaluate(epoch=epoch)  # result.auc, .std, .ci_low, .ci_high
    """

    deployed = True  # the clients score their own samples: no scores are passed in

    def __init__(self, config, *, key):
        from ..mpc.comm.inlinks import PartyUnreachable, connect
        from ..mpc.comm.roster import read_identity
        from ..mpc.roles.control import answer_within

        start = time.perf_counter()
        self.config: DeployConfig = config if isinstance(config, DeployConfig) else load_config(config)
        self.mechanism = self.config.auc_mechanism()  # with a [report]: the AUC's share of the eps
        self._report = self.config.report()
        roster = self.config.roster()
        identity = read_identity(key)
        from ..mpc.comm.channel import public_bytes

        if public_bytes(identity) != roster.server:
            raise InputError(f"{key} is not the server's key in the roster {self.config.roster_path}: a session "
                             "signs with the server's identity")
        host, port = self.config.session_address
        join = self.config.join_timeout
        try:  # the server listens from its start; it answers once every party has joined, or to say why not
            self._link = connect(0, identity, [(host, port, roster.server)], timeout=join,
                                 describe_party=lambda p: "the server service", describe_me="the session",
                                 answer_within=answer_within(join, f"deployment.join_timeout = {join:g} s"))[0]
        except PartyUnreachable as exc:  # the setting that expired, named
            raise PartyUnreachable(f"{exc} (deployment.join_timeout = {join:g} s)") from None
        except MPCError:
            raise
        except (OSError, RuntimeError) as exc:  # another process at the address (its key), a failed handshake
            from ..mpc.comm.runtime import explain

            raise MPCError(f"the server service at {host}:{port}: {explain(exc)}") from None
        self._closed = False
        try:
            self._link.send_obj(_CONTROL, {"op": "hello", "agreed": self.config.agreed()})
        except (OSError, RuntimeError):
            pass  # the reply (the reason) or the closed link says why
        hello = self._reply()
        if "error" in hello:
            self._link.close()
            self._closed = True
            if hello.get("fatal"):  # the deployment could not start: the cause the services printed
                raise MPCError(hello["error"])
            raise InputError(hello["error"])
        self.clients = int(hello["clients"])
        self.startup = {"services_seconds": hello["startup_seconds"],
                        "connect_seconds": round(time.perf_counter() - start, 3)}
        self._reported_startup = False

    def _request(self, msg: dict) -> dict:
        """Send ``msg`` to the server service and return its reply; a refusal raises
        :class:`EvaluationRefused` (the session goes on), any other error :class:`MPCError`."""
        try:
            self._link.send_obj(_CONTROL, msg)
        except (OSError, RuntimeError):
            pass  # the reply (the reason) or the closed link says why
        reply = self._reply()
        if "error" in reply:
            if reply.get("refused"):
                raise EvaluationRefused(reply["error"])
            self._closed = True
            raise MPCError(reply["error"])
        return reply

    def _reply(self) -> dict:
        from ..mpc.comm.runtime import explain

        try:
            while not self._link.readable(1.0):
                pass
            return self._link.recv_obj(_CONTROL)
        except (OSError, RuntimeError) as exc:
            self._closed = True
            raise MPCError(f"the server service: {explain(exc)}") from None

    def evaluate(self, epoch=None):
        """One evaluation; each client scores ``epoch`` (a non-negative integer; default: the
        evaluation's number - 1).

        Returns
        -------
        secure_auc.EvaluationResult
            As :meth:`secure_auc.session.MPCSession.evaluate` and :func:`secure_auc.evaluate`
            return it: the estimate, std and 95 % interval (from the clients' public sizes and
            the aggregate), and in ``extra`` the cost: ``rank_step_seconds``, ``scoring_seconds``
            (the slowest client's hook), ``server_seconds``, ``sizes``, the server's bytes and,
            in the first evaluation only, the start-up (``startup_seconds``: the services' own,
            and ``connect_seconds``), which ``seconds`` (here, end to end) does not include.
            With a ``[report]`` in the configuration, its metrics join ``extra`` as
            :meth:`secure_auc.session.MPCSession.evaluate` (``metrics=``) puts them.

        Raises
        ------
        EvaluationRefused
            A client refused before anything was released (the reason names it); the
            session goes on.
        MPCError
            A party failed; the deployment ended (the message names the party)."""
        if self._closed:
            raise InputError("the session is closed")
        if epoch is not None:
            epoch = check_epoch(epoch)
        start = time.perf_counter()
        reply = self._request({"op": "evaluate", "epoch": epoch})
        startup = None
        if not self._reported_startup:
            self._reported_startup = True
            startup = {"startup_seconds": self.startup["services_seconds"],
                       "connect_seconds": self.startup["connect_seconds"]}
        return evaluation_result(self.mechanism, reply, startup=startup, seconds=time.perf_counter() - start,
                                 report=self._report)

    def select(self, epochs=None, *, epsilon: float = 1.0, release_epsilon: float | None = None):
        """Select the best of this deployment's earlier evaluations (their ``epochs``; default all),
        releasing only which (report-noisy-max, eps-DP: :meth:`secure_auc.session.MPCSession.select`);
        with ``release_epsilon``, also the selected evaluation's DP AUC, std and 95 % interval
        (the configured mechanism at that eps; each client's ledger charged eps + E2 once).

        Returns
        -------
        secure_auc.SelectionResult
            ``selected``: the epoch, as a string."""
        from ..dp.selection import release_mechanism
        from ..result import check_epsilon

        if self._closed:
            raise InputError("the session is closed")
        epsilon = check_epsilon(epsilon, "epsilon")
        release_epsilon = check_epsilon(release_epsilon, "release_epsilon", allow_none=True)
        if release_epsilon is not None:
            release_mechanism(self.mechanism, release_epsilon)  # refused before anything is sent
        if epochs is not None:
            epochs = [check_epoch(e, "an epoch of the selection") for e in epochs]
        start = time.perf_counter()
        reply = self._request({"op": "select", "epochs": epochs, "epsilon": epsilon,
                               "release_epsilon": release_epsilon})
        return selection_result(self.mechanism, reply, epsilon, release_epsilon, clients=self.clients,
                                seconds=time.perf_counter() - start)

    def shutdown(self) -> None:
        """Stop every service of the deployment (the server tells the others, and each ends
        with status 0).

        Raises
        ------
        MPCError
            The server service could not be told (it is gone: the message says why)."""
        if self._closed:
            return
        try:
            self._link.send_obj(_CONTROL, {"op": "shutdown"})
        except (OSError, RuntimeError):
            pass  # the reply (the reason) or the closed link says why
        try:
            reply = self._reply()
        finally:
            self.close()
        if "error" in reply:
            raise MPCError(reply["error"])

    def close(self) -> None:
        """Leave the deployment; the services stay up for the next session."""
        if not self._closed:
            self._closed = True
            self._link.close()

    def __enter__(self) -> "DeployedSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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


def reply_result(config: DeployConfig, reply: dict, select: tuple | None = None):
    """The result of a reply the server made to its own request (``secure-auc compute --epochs``,
    :func:`.service.run_computing_service`): an evaluation's (its start-up, from the server
    process's start, in ``startup_seconds``), or with ``select`` = (eps, release eps or None) the
    selection's."""
    mechanism = config.auc_mechanism()
    if "selected" in reply:
        return selection_result(mechanism, reply, *select, clients=len(config.clients), seconds=reply["seconds"])
    startup = {"startup_seconds": reply["startup_seconds"]} if "startup_seconds" in reply else None
    return evaluation_result(mechanism, reply, startup=startup, report=config.report())
