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
from .config import DeployConfig, load_config
from .service import CH_CONTROL as _CONTROL, evaluation_result
from .untrusted import check_epoch

log = logging.getLogger(__name__)

__all__ = ["DeployedSession", "EvaluationRefused"]


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
        try:
            self._link = connect(0, identity, [(host, port, roster.server)], timeout=self.config.join_timeout,
                                 describe_party=lambda p: "the server service", describe_me="the session")[0]
        except PartyUnreachable as exc:  # the setting that expired, named
            raise PartyUnreachable(f"{exc} (deployment.join_timeout = {self.config.join_timeout:g} s)") from None
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
        from .service import selection_result

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

