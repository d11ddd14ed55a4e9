"""A session of MPC evaluations: the parties started once on this machine, or deployed services.

:class:`MPCSession` is the one switch, read top to bottom: labels and a mechanism start the
parties here (:class:`secure_auc.mpc.session.LocalSession`); ``deploy=`` (or :meth:`MPCSession.connect`)
connects to deployed services instead (:class:`secure_auc.deploy.session.DeployedSession`).
Both have the same :meth:`~LocalSession.evaluate`, ``select`` and ``close``.  Importing this
module loads torch (the local session's launcher); ``import secure_auc`` does not.
"""

from __future__ import annotations

from abc import ABCMeta

from .deploy.session import DeployedSession
from .mpc.session import LocalSession
from .validation import InputError

__all__ = ["MPCSession"]


class MPCSession(LocalSession, metaclass=ABCMeta):
    """Start the MPC parties once for clients whose labels are fixed and evaluate new scores
    each epoch (:class:`secure_auc.mpc.session.LocalSession`), or, with ``deploy``, ask deployed
    services for evaluations (:class:`secure_auc.deploy.session.DeployedSession`, registered as
    a kind of ``MPCSession``: ``isinstance`` holds for both).

    Parameters
    ----------
    labels, mechanism, **options
        The local session's (:class:`secure_auc.mpc.session.LocalSession`).
    deploy : str or pathlib.Path, optional
        Connect to deployed services instead (a deployment's configuration file,
        :mod:`secure_auc.deploy`): no labels or mechanism here, each client holds its own;
        the result is the :class:`~secure_auc.deploy.session.DeployedSession` of :meth:`connect`.
    key : str or pathlib.Path, optional
        With ``deploy``: the server's identity key.

    Examples
    --------
    Not run here (they start processes, or need the services)::

        with MPCSession([y0, y1], make_mechanism("laplace", 1.0)) as session:     # local processes
            result = session.evaluate([model(x0), model(x1)])
        with MPCSession(deploy="deploy.toml", key="keys/server.pem") as session:  # deployed services
            result = session.evaluate(epoch=0)
    """

    def __new__(cls, *args, deploy=None, key=None, **kwargs):
        if deploy is None:
            return super().__new__(cls)
        if args or kwargs:
            raise InputError("with deploy=, a session takes only key= (the clients hold the labels; the "
                             "configuration holds the mechanism, the layout and the metrics: its [report] table)")
        return cls.connect(deploy, key=key)

    def __init__(self, labels, mechanism, *, deploy=None, key=None, **options):
        super().__init__(labels, mechanism, **options)

    @classmethod
    def connect(cls, config, *, key) -> DeployedSession:
        """A session with deployed services instead of local processes: the same ``evaluate``,
        ``select`` and ``close``, but each client scores and holds its own data (``config``: the
        deployment's TOML file, ``key``: the server's identity key)."""
        return DeployedSession(config, key=key)


MPCSession.register(DeployedSession)  # the same evaluate, select and close: isinstance(session, MPCSession) holds
