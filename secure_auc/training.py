"""The label-DP AUC in a training loop: a metric object and a scikit-learn-style function.

Both are thin layers over :func:`secure_auc.evaluate` (one evaluation, the parties started
for it) or over an open :class:`secure_auc.session.MPCSession` (the parties started
once, every epoch evaluated on the same links), and return the same
:class:`secure_auc.EvaluationResult`:

* :class:`FederatedAUC` -- ``update`` with a batch of each client's scores, ``compute`` at the
  end of the epoch, ``reset`` (the torchmetrics pattern);
* :func:`dp_roc_auc_score` -- ``(y_true, y_score)`` as scikit-learn's ``roc_auc_score``,
  with a ``client`` grouping array (or column of a DataFrame) saying which client holds
  each sample.

Every input is checked where it comes in (:class:`secure_auc.ClientData`): torch tensors
detached and flattened, labels 0/1, scores finite, sizes matching; nothing starts and
nothing is charged to a ledger before that.
"""

from __future__ import annotations

import numpy as np

from .data.io import ClientData
from .evaluate import EvaluationResult, check_arguments, evaluate
from .validation import InputError, as_vector, check_binary_labels, check_scores

__all__ = ["FederatedAUC", "dp_roc_auc_score"]


def _groups(client, n: int) -> list[np.ndarray]:
    """The row indices of each client, clients in sorted order of their ids (stable within one)."""
    if client is None:
        return [np.arange(n)]
    ids = as_vector(client, name="client")
    if len(ids) != n:
        raise InputError(f"client has {len(ids)} entries but there are {n} samples")
    _, inverse = np.unique(ids, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(inverse[order])) + 1)


def _columns(data, y_true, y_score, client):
    """Columns of ``data`` named by ``y_true``, ``y_score`` and ``client`` (a DataFrame or a dict)."""
    if data is None:
        return y_true, y_score, client

    def column(name, what):
        if name is None or not isinstance(name, str):
            return name
        try:
            return data[name]
        except (KeyError, IndexError):
            raise InputError(f"data has no column {name!r} (the {what})") from None

    return column(y_true, "labels"), column(y_score, "scores"), column(client, "client ids")


def _check_local(session) -> None:
    """Scores passed in need a session whose parties take them: a deployed session's clients
    score their own samples (their hooks), so the platform has none to pass."""
    if getattr(session, "deployed", False):
        raise InputError("a deployed session's clients score their own samples with their hooks: call "
                         "session.evaluate(epoch=...) instead of passing scores")


def dp_roc_auc_score(y_true, y_score, *, client=None, data=None, mechanism=None, session=None,
                     protocol: str = "mpc", seed: int | None = None, ledger=None,
                     mpc_options: dict | None = None, metrics=None, budget: dict | None = None,
                     ids=None) -> EvaluationResult:
    """Label-DP ROC AUC with scikit-learn's argument order.

    Parameters
    ----------
    y_true : array-like of shape (n,) or str
        The labels (0/1), or a column name of ``data``.  With ``session`` it may be None:
        the session's clients hold their labels.
    y_score : array-like of shape (n,) or str
        The scores (numpy, list, pandas or a torch tensor), or a column name of ``data``.
    client : array-like of shape (n,) or str, optional
        Which client holds each sample (any sortable ids; client k is the k-th smallest
        id), or a column name of ``data``; default: one client.  Each client's rows keep
        their order.
    data : DataFrame or dict of columns, optional
        Where the column names above are looked up.
    ids : array-like of shape (n,) or str, optional
        Each sample's record identifier (or a column name of ``data``): the ledger charges
        every release to each record, as :func:`secure_auc.evaluate` does for clients with
        ``ids``; default: each client's labels as one dataset.  With a ``session``, the
        session's identifiers count (``MPCSession(..., ids=...)``).
    mechanism : Mechanism, optional
        Default: Laplace noise with the adaptive allocation, eps = 1.  Ignored with a
        ``session`` (the session's mechanism).
    session : MPCSession, optional
        Evaluate on an open session: its labels stay where they are, and ``y_true``, when
        given, must equal them client by client.
    protocol, seed, ledger, mpc_options, metrics, budget
        As in :func:`secure_auc.evaluate` (without a session).

    Returns
    -------
    EvaluationResult
        ``float(result)`` is the estimate.

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc import make_mechanism
    >>> from secure_auc.training import dp_roc_auc_score
    >>> y = [0, 1, 1, 0, 1, 0]
    >>> s = [0.1, 0.9, 0.4, 0.4, 0.8, 0.2]
    >>> r = dp_roc_auc_score(y, s, client=["b", "a", "a", "b", "b", "a"], mechanism=make_mechanism("none"),
    ...                      protocol="plain")
    >>> float(r), r.clients
    (0.9444444444444444, 2)
    >>> from sklearn.metrics import roc_auc_score
    >>> roc_auc_score(y, s)
    0.9444444444444444
    >>> dp_roc_auc_score(y, s[:5], protocol="plain")
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: y_true has 6 entries but y_score has 5
    """
    _check_local(session)
    _check_metrics(metrics, budget, session)
    if ids is not None and session is not None:
        raise InputError("the session holds the record identifiers: pass ids= to the session "
                         "(MPCSession(labels, mechanism, ids=...))")
    y_true, y_score, client = _columns(data, y_true, y_score, client)
    if isinstance(ids, str) and data is not None:
        try:
            ids = data[ids]
        except (KeyError, IndexError):
            raise InputError(f"data has no column {ids!r} (the record identifiers)") from None
    scores = check_scores(y_score, name="y_score")
    labels = None if y_true is None else check_binary_labels(y_true, name="y_true")
    if labels is not None and len(labels) != len(scores):
        raise InputError(f"y_true has {len(labels)} entries but y_score has {len(scores)}")
    groups = _groups(client, len(scores))
    if session is not None:
        if labels is not None:
            for k, (idx, held) in enumerate(zip(groups, session.labels)):
                if len(idx) != len(held) or not np.array_equal(labels[idx], held):
                    raise InputError(f"client {k}: y_true differs from the labels the session holds")
        return session.evaluate([scores[idx] for idx in groups])
    if labels is None:
        raise InputError("y_true is needed without a session")
    if ids is not None:
        ids = as_vector(ids, name="ids")
        if len(ids) != len(scores):
            raise InputError(f"ids has {len(ids)} entries but there are {len(scores)} samples")
    clients = [ClientData(scores[idx], labels[idx], f"client {k}", None if ids is None else ids[idx])
               for k, idx in enumerate(groups)]
    return evaluate(clients, mechanism, protocol=protocol, seed=seed, ledger=ledger, mpc_options=mpc_options,
                    metrics=metrics, budget=budget)


def _check_metrics(metrics, budget, session) -> None:
    """The report's metrics are checked where they come in; a session releases the metrics it was
    started with."""
    if metrics is None and budget is None:
        return
    from .report.spec import ReportSpec

    spec = metrics if isinstance(metrics, ReportSpec) else ReportSpec(
        [metrics] if isinstance(metrics, str) else list(metrics or []), budget=budget)
    if session is not None and spec.groups != ("auc",):
        raise InputError("with a session, its own metrics are released: pass metrics= to the session "
                         "(MPCSession(labels, mechanism, metrics=[...]))")


class FederatedAUC:
    """Label-DP AUC as a metric object: ``update`` per batch, ``compute`` per epoch, ``reset``.

    Parameters
    ----------
    mechanism : Mechanism, optional
        Default: Laplace noise with the adaptive allocation, eps = 1.  Ignored with a
        ``session`` (the session's mechanism).
    session : MPCSession, optional
        Evaluate on an open session (the parties started once): ``update`` then takes only
        scores, in the order of each client's labels in the session.
    protocol, seed, ledger, mpc_options, metrics, budget
        As in :func:`secure_auc.evaluate` (without a session); ``metrics`` asks for the whole
        evaluation (curves, KS, lift, ...: :mod:`secure_auc.report`) under one budget.
        :meth:`update` may give each row's record identifier (``ids``): the ledger then
        charges each release to each record, as :func:`secure_auc.evaluate` does; with a
        session, the session's identifiers count.

    Examples
    --------
    Two clients, each scoring its samples batch by batch:

    >>> import numpy as np
    >>> from secure_auc import make_mechanism
    >>> from secure_auc.training import FederatedAUC
    >>> metric = FederatedAUC(make_mechanism("none"), protocol="plain")
    >>> metric.update([0.1, 0.9], [0, 1], client=0)
    >>> metric.update([0.4, 0.3], [1, 0], client=1)
    >>> metric.update([0.35, 0.8], [0, 1], client=0)
    >>> result = metric.compute()
    >>> result.auc, result.clients, result.samples
    (1.0, 2, 6)
    >>> metric.reset()
    >>> metric.compute()
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: nothing to evaluate: update() was not called since the last reset()
    """

    def __init__(self, mechanism=None, *, session=None, protocol: str = "mpc", seed: int | None = None,
                 ledger=None, mpc_options: dict | None = None, metrics=None, budget: dict | None = None):
        _check_local(session)
        if session is None:  # refused now, not at the first compute()
            check_arguments(mechanism, protocol=protocol, seed=seed, ledger=ledger, mpc_options=mpc_options)
        _check_metrics(metrics, budget, session)
        self.mechanism, self.session = mechanism, session
        self.options = {"protocol": protocol, "seed": seed, "ledger": ledger, "mpc_options": mpc_options,
                        "metrics": metrics, "budget": budget}
        self.releases = 0  # releases made so far: the index of the next under the seed
        self.reset()

    def reset(self) -> None:
        """Forget every batch (the next epoch starts; the next :meth:`compute` is a new release)."""
        self._scores: dict[int, list[np.ndarray]] = {}
        self._labels: dict[int, list[np.ndarray]] = {}
        self._ids: dict[int, list] = {}  # per client: each batch's record identifiers (None: not given)
        self._result: EvaluationResult | None = None

    def update(self, scores, labels=None, *, client=0, ids=None) -> None:
        """Add a batch of one client's scores (and labels, without a session).

        Parameters
        ----------
        scores : array-like of shape (b,)
            numpy, list, pandas or a torch tensor (detached, a column flattened).
        labels : array-like of shape (b,), optional
            Required without a session; with one, the session's clients hold them.
        client : int or array-like of shape (b,), default 0
            The client of the whole batch, or of each row.
        ids : array-like of shape (b,), optional
            Each row's record identifier (integers or text), for the ledger: given with
            every batch of a client or with none.  Without a session only (a session's
            identifiers are given to the session).
        """
        s = check_scores(scores, name="scores")
        if self.session is None and labels is None:
            raise InputError("labels are needed without a session")
        if self.session is not None and labels is not None:
            raise InputError("the session's clients hold the labels: update() takes only scores")
        y = None if labels is None else check_binary_labels(labels, name="labels")
        if y is not None and len(y) != len(s):
            raise InputError(f"{len(s)} scores but {len(y)} labels")
        if ids is not None:
            if self.session is not None:
                raise InputError("the session holds the record identifiers: pass ids= to the session "
                                 "(MPCSession(labels, mechanism, ids=...))")
            ids = as_vector(ids, name="ids")
            if len(ids) != len(s):
                raise InputError(f"{len(s)} scores but {len(ids)} record identifiers")
        if np.ndim(client) == 0:
            rows = {int(client): np.arange(len(s))}
        else:
            ids = as_vector(client, name="client")
            if len(ids) != len(s):
                raise InputError(f"client has {len(ids)} entries but the batch has {len(s)} scores")
            rows = {int(k): np.flatnonzero(ids == k) for k in np.unique(ids)}
        for k, idx in rows.items():
            if k < 0 or (self.session is not None and k >= len(self.session.labels)):
                raise InputError(f"client {k} is not a client of this evaluation")
            if self.session is None and k in self._ids and (ids is None) != (self._ids[k][0] is None):
                raise InputError(f"client {k}: record identifiers must come with every batch or with none")
            self._scores.setdefault(k, []).append(s[idx])
            if y is not None:
                self._labels.setdefault(k, []).append(y[idx])
                self._ids.setdefault(k, []).append(None if ids is None else ids[idx])
        self._result = None  # the state changed: the next compute() is a new release

    def compute(self) -> EvaluationResult:
        """Evaluate every batch since the last :meth:`reset` (one release, charged to the ledger).

        One release per state: a second call without :meth:`update` or :meth:`reset` in
        between returns the same result, with no new release and no new charge.  With a
        ``seed``, release i of this object draws its noise from
        :func:`secure_auc.dp.rng.release_seed` ``(seed, i)``: the run is reproducible and no
        two releases share noise.

        Returns
        -------
        EvaluationResult
        """
        if self._result is not None:
            return self._result
        if not self._scores:
            raise InputError("nothing to evaluate: update() was not called since the last reset()")
        count = len(self.session.labels) if self.session is not None else max(self._scores) + 1
        missing = [k for k in range(count) if k not in self._scores]
        if missing:
            raise InputError(f"no scores for client(s) {', '.join(map(str, missing))}")
        scores = [np.concatenate(self._scores[k]) for k in range(count)]
        if self.session is not None:
            result = self.session.evaluate(scores)
        else:
            clients = [ClientData(scores[k], np.concatenate(self._labels[k]), f"client {k}",
                                  None if self._ids[k][0] is None else np.concatenate(self._ids[k]))
                       for k in range(count)]
            result = evaluate(clients, self.mechanism, release=self.releases, **self.options)
        self.releases += 1
        self._result = result
        return result

    def select(self, epochs=None, *, epsilon: float = 1.0, release_epsilon: float | None = None):
        """Select the best of the session's earlier evaluations, releasing only which one
        (report-noisy-max, eps-DP whatever their number), and with ``release_epsilon`` its DP
        AUC: the session's :meth:`~secure_auc.session.MPCSession.select`.

        Parameters
        ----------
        epochs : list, optional
            The session's evaluations, 0 for its first (for a session this metric alone
            evaluates on, the n-th :meth:`compute`), default all.
        epsilon : float, default 1.0
        release_epsilon : float, optional

        Returns
        -------
        secure_auc.SelectionResult

        Examples
        --------
        >>> from secure_auc import make_mechanism
        >>> FederatedAUC(make_mechanism("laplace", 1.0), protocol="plain").select(epsilon=1.0)
        Traceback (most recent call last):
            ...
        secure_auc.validation.InputError: select() needs a session, whose computing parties keep each ...
        """
        if self.session is None:
            raise InputError("select() needs a session, whose computing parties keep each evaluation's statistics; "
                             "without one, secure_auc.select() chooses among candidates' scores")
        return self.session.select(epochs, epsilon=epsilon, release_epsilon=release_epsilon)
