"""Choose the best of T candidates (checkpoints, models) for the privacy cost of one release.

:func:`select` releases only *which* candidate has the highest AUC, by report-noisy-max
on the candidates' rank sums (:mod:`secure_auc.dp.selection`: the derivation of the
sensitivity and the privacy argument), computed in MPC (:mod:`secure_auc.mpc.selection`:
the statistics stay in shares, the clients add their shares of the noise, a secure argmax
opens only the index, to the server).  It costs eps once, whatever T.  With
``release_epsilon`` the selected candidate's DP AUC is released too, at that extra cost.

``method="repeat-and-select"`` is the alternative for candidates whose statistics cannot
be kept: a random number of eps0-DP evaluations (geometric, mean ``mean``), each of a
candidate drawn at random, the best noisy AUC released (Papernot & Steinke 2022),
accounted with dp-accounting's ``RepeatAndSelectDpEvent`` (RDP).
"""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .data.io import ClientData
from .dp.accountant import finishing
from .dp.selection import (METHODS, SelectionCharge, base_epsilon_for, doubled_rank_sums, noise_share,
                           repeat_select_epsilon, selection_scale)
from .result import SelectionResult, check_epsilon, release_result  # noqa: F401 - part of this API
from .validation import InputError, check_binary_labels

__all__ = ["CandidateScores", "SelectionResult", "select", "load_candidates"]

_MPC_OPTIONS = ("computing", "provider", "sort", "timeout", "port", "hosts", "progress")


@dataclass
class CandidateScores:
    """One client's labels and its scores of every candidate.

    Parameters
    ----------
    labels : numpy.ndarray of shape (n_k,)
        0/1 labels.
    scores : numpy.ndarray of shape (n_k, T)
        Column t: candidate t's scores of the client's samples (finite floats).
    source : str
        Where they came from (a file), for messages.
    ids : numpy.ndarray, optional
        Record identifiers, for a ledger's per-record charges.

    Examples
    --------
    >>> import numpy as np
    >>> c = CandidateScores(np.array([1, 0]), np.array([[0.9, 0.2], [0.1, 0.3]]), "a.csv")
    >>> len(c), c.candidate(1).scores.tolist()
    (2, [0.2, 0.3])
    """

    labels: np.ndarray
    scores: np.ndarray
    source: str = ""
    ids: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def candidate(self, t: int) -> ClientData:
        """The client's data for candidate ``t`` (a :class:`~secure_auc.ClientData`)."""
        return ClientData(self.scores[:, t], self.labels, self.source, ids=self.ids)


def load_candidates(paths, candidates, *, label_column: str = "label", id_column: str | None = None):
    """Read one client file per path with its label column and one score column per candidate.

    Parameters
    ----------
    paths : list of str or pathlib.Path
        CSV (optionally gzip-compressed) or Parquet files, one per client.
    candidates : list of str
        The score columns, one per candidate.
    label_column, id_column : str

    Returns
    -------
    list of CandidateScores

    Raises
    ------
    InputError
        Naming the file and the column or row at fault.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = pathlib.Path(tmp) / "a.csv"
    ...     _ = p.write_text("label,e1,e2\\n1,0.9,0.2\\n0,0.1,0.3\\n")
    ...     c = load_candidates([p], ["e1", "e2"])
    >>> c[0].scores.tolist(), c[0].labels.tolist()
    ([[0.9, 0.2], [0.1, 0.3]], [1, 0])
    """
    from .data.io import read_client_file, same_files

    if isinstance(paths, (str, bytes, Path)):
        raise InputError(f"load_candidates takes a list of paths, one per client, got one path: {paths!r}")
    candidates = _check_names(candidates)
    same_files(paths)
    out = []
    for p in paths:
        cols = [read_client_file(p, score_column=c, label_column=label_column, id_column=id_column) for c in candidates]
        out.append(CandidateScores(cols[0].labels, np.stack([c.scores for c in cols], axis=1), str(p), cols[0].ids))
    return out


def _check_names(candidates) -> list[str]:
    if isinstance(candidates, str) or not isinstance(candidates, (list, tuple)) or not candidates:
        raise InputError(f"candidates must be a non-empty list of names, got {candidates!r}")
    names = [str(c) for c in candidates]
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise InputError(f"candidate(s) named twice: {', '.join(dup)}")
    return names


def _as_candidate_scores(clients, candidates) -> tuple[list[CandidateScores], list[str]]:
    """Normalise the two accepted forms: CandidateScores with a list of names, or label arrays /
    ClientData with a dict name -> one score array per client."""
    if not isinstance(clients, (list, tuple)) or not clients:
        raise InputError("clients must be a non-empty list, one entry per client")
    if isinstance(candidates, dict):
        names = _check_names(list(candidates))
        out = []
        for k, c in enumerate(clients):
            labels = c.labels if hasattr(c, "labels") else c
            labels = check_binary_labels(labels, name=f"client {k}: labels")
            cols = []
            for name in names:
                per = candidates[name]
                if not isinstance(per, (list, tuple)) or len(per) != len(clients):
                    raise InputError(f"candidate {name!r}: expected one score array per client ({len(clients)})")
                s = np.asarray(per[k], dtype=np.float64).reshape(-1)
                if s.shape != labels.shape:
                    raise InputError(f"candidate {name!r}, client {k}: {len(s)} scores for {len(labels)} labels")
                cols.append(s)
            out.append(CandidateScores(labels, np.stack(cols, axis=1), getattr(c, "source", f"client {k}"),
                                       getattr(c, "ids", None)))
        return out, names
    names = _check_names(candidates)
    for k, c in enumerate(clients):
        if not isinstance(c, CandidateScores):
            raise InputError(f"clients[{k}] must be a CandidateScores (or pass candidates as a dict of score "
                             f"arrays), got {type(c).__name__}")
        if c.scores.ndim != 2 or c.scores.shape != (len(c.labels), len(names)):
            raise InputError(f"{c.source or f'client {k}'}: scores of shape {c.scores.shape}, expected "
                             f"({len(c.labels)}, {len(names)}): one column per candidate")
    return list(clients), names


def select(clients, candidates=None, *, epsilon: float | None = 1.0, release_epsilon: float | None = None,
           method: str = "noisy-max", protocol: str = "mpc", mean: float | None = None, delta: float = 1e-6,
           seed: int | None = None, reference: bool = False, ledger=None, dataset_name: str | None = None,
           mpc_options: dict | None = None) -> SelectionResult:
    """Select the candidate with the highest AUC, releasing only which one it is (eps-DP).

    Parameters
    ----------
    clients : list
        One entry per client: :class:`CandidateScores` (``candidates`` then lists the names of
        the score columns), or label arrays / :class:`~secure_auc.ClientData` with
        ``candidates`` a dict ``{name: [scores of client 0, scores of client 1, ...]}``.
    candidates : list of str or dict
        The candidates, T >= 1 of them.
    epsilon : float or None, default 1.0
        The selection's eps.  None: no noise, the exact argmax (not private; tests and
        local experiments only; refused with a ledger).
    release_epsilon : float, optional
        Also release the selected candidate's DP AUC with this eps (the ``distributed``
        mechanism in MPC, ``laplace`` in the plain protocol), charged on top.
    method : {"noisy-max", "repeat-and-select"}
        ``noisy-max``: report-noisy-max in MPC over every candidate (eps whatever T).
        ``repeat-and-select``: a geometric number of evaluations (mean ``mean``, default T)
        of candidates drawn at random, each eps0-DP with eps0 the largest whose
        repeat-and-select spends ``epsilon`` at ``delta`` (RDP accountant); the best released.
    protocol : {"mpc", "plain"}
        ``plain``: the same mechanism computed in this process (a reference: one party sees
        every statistic).
    mean, delta : float
        repeat-and-select only.
    seed : int, optional
        ``plain`` only: seed of the noise and the tie-break (reproducible reference runs).
    reference : bool
        Add every candidate's exact AUC (``reference_aucs``; local experiments only).
    ledger : secure_auc.Ledger, optional
        Charged once for the selection (a pure eps event for noisy-max, the
        repeat-and-select event otherwise) and once for the release, before each runs.
    mpc_options : dict, optional
        ``computing``, ``provider``, ``sort``, ``timeout``, ``port``, ``hosts``, ``progress``.

    Returns
    -------
    SelectionResult

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc import select
    >>> y = [np.array([0, 1, 1, 0]), np.array([1, 0, 0, 1])]
    >>> good = [np.array([.1, .8, .9, .2]), np.array([.7, .3, .2, .6])]
    >>> bad = [np.array([.5, .4, .3, .2]), np.array([.1, .3, .4, .2])]
    >>> select(y, {"bad": bad, "good": good}, epsilon=None, protocol="plain").selected
    'good'
    """
    start = time.perf_counter()
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if protocol not in ("mpc", "plain"):
        raise InputError(f"protocol must be 'plain' or 'mpc', got {protocol!r}")
    data, names = _as_candidate_scores(clients, candidates)
    epsilon = check_epsilon(epsilon, "epsilon", allow_none=method == "noisy-max")
    release_epsilon = check_epsilon(release_epsilon, "release_epsilon", allow_none=True)
    if epsilon is None and ledger is not None:
        raise InputError("epsilon=None selects without noise, which no ledger covers; give an epsilon")
    if seed is not None and protocol == "mpc":
        raise InputError("seed applies to protocol='plain' only (the MPC clients draw fresh noise keys)")
    if mpc_options and protocol != "mpc":
        raise InputError(f"mpc_options apply to protocol='mpc' only, got {sorted(mpc_options)} with 'plain'")
    unknown = sorted(set(mpc_options or {}) - set(_MPC_OPTIONS))
    if unknown:
        raise InputError(f"mpc_options: unknown option(s) {', '.join(unknown)} (known: {', '.join(_MPC_OPTIONS)})")
    labels = np.concatenate([c.labels for c in data])
    positives = int(labels.sum())
    total = len(labels)
    if positives in (0, total):
        raise InputError(f"all {total} labels across all {len(data)} clients are "
                         f"{'negative (0)' if positives == 0 else 'positive (1)'}: AUC is undefined")
    t_count = len(names)
    if epsilon is not None and method == "noisy-max" and \
            float(total) * total + 60.0 * selection_scale(total, epsilon) >= 2.0**62:
        raise InputError(f"eps = {epsilon:g} needs noise of scale {selection_scale(total, epsilon):.1e} on rank sums of "
                         f"M = {total:,} samples: beyond the 64-bit range the secure argmax compares; use a larger eps")
    extra: dict = {}
    if method == "noisy-max":
        charge = SelectionCharge(math.inf if epsilon is None else epsilon)
    else:
        mean = float(mean if mean is not None else t_count)
        if not mean >= 1:
            raise InputError(f"mean must be >= 1 evaluation, got {mean}")
        eps0 = base_epsilon_for(epsilon, mean, delta)
        spent = repeat_select_epsilon(eps0, mean, delta)
        charge = SelectionCharge(spent, "repeat-and-select", base_epsilon=eps0, mean=mean, delta=delta)
        extra |= {"base_epsilon": eps0, "mean_runs": mean}
    reservation = None
    if ledger is not None:
        reservation = ledger.reserve([c.candidate(0) for c in data], charge, total=total,
                                     sizes=[len(c) for c in data], name=dataset_name,
                                     note=f"{method} selection among {t_count} candidates, {protocol} protocol")
    with finishing(ledger, reservation):
        if method == "noisy-max":
            index, cost = _noisy_max(data, epsilon, protocol, seed, mpc_options or {})
        else:
            index, cost = _repeat_and_select(data, charge, protocol, seed, mpc_options or {})
        extra |= cost
    if reservation is not None:
        from .result import privacy_spent

        extra |= privacy_spent(reservation)
    out = SelectionResult(selected=names[index], index=index, candidates=names, method=method,
                          epsilon=charge.epsilon, delta=charge.delta, protocol=protocol, clients=len(data),
                          samples=total, seconds=0.0, selection_epsilon=charge.epsilon, extra=extra)
    if release_epsilon is not None:
        _release(out, data, index, release_epsilon, protocol, seed, ledger, dataset_name, mpc_options)
    if reference:
        from .metrics import rank_auc

        scores = np.concatenate([c.scores for c in data])
        out.reference_aucs = [rank_auc(labels, scores[:, t]) for t in range(t_count)]
    out.seconds = round(time.perf_counter() - start, 3)
    return out


def _noisy_max(data, epsilon, protocol, seed, mpc_options) -> tuple[int, dict]:
    total = sum(len(c) for c in data)
    if protocol == "plain":
        rng = np.random.default_rng(seed if seed is not None else secrets.randbits(128))
        labels = np.concatenate([c.labels for c in data])
        d = doubled_rank_sums(labels, np.concatenate([c.scores for c in data]))
        if epsilon is not None:  # each client's share, summed: DLap(Delta / eps) exactly
            d = d + sum(noise_share(rng, d.size, total, epsilon, len(data)) for _ in data)
        order = rng.permutation(d.size)
        return int(order[int(np.argmax(d[order]))]), {}
    from .mpc.selection import run_selection_local  # imports CrypTen only when needed

    opts = dict(mpc_options)
    opts.setdefault("progress", False)
    return run_selection_local([c.labels for c in data], [c.scores for c in data], epsilon=epsilon, **opts)


def _repeat_and_select(data, charge: SelectionCharge, protocol, seed, mpc_options) -> tuple[int, dict]:
    from .dp.distributed import DistributedNoise
    from .dp.mechanisms import StatisticsMechanism
    from .evaluate import evaluate

    rng = np.random.default_rng(seed if seed is not None else secrets.randbits(128))
    runs = int(rng.geometric(1.0 / charge.mean))
    picks = rng.integers(0, data[0].scores.shape[1], runs)
    k = len(data)
    if protocol == "plain":
        mech = StatisticsMechanism(charge.base_epsilon, allocation="adaptive")  # the default family's defaults
        aucs = [evaluate([c.candidate(int(t)) for c in data], mech, protocol="plain",
                         seed=int(rng.integers(0, 2**62))).auc for t in picks]
    else:
        from .mpc.session import LocalSession

        opts = dict(mpc_options)
        with LocalSession([c.labels for c in data], DistributedNoise(charge.base_epsilon, k),
                        **opts) as session:
            aucs = [session.evaluate([c.scores[:, int(t)] for c in data]).auc for t in picks]
    best = int(np.argmax(aucs))
    return int(picks[best]), {"runs": runs, "evaluated": [int(t) for t in picks]}


def _release(out: SelectionResult, data, index, release_epsilon, protocol, seed, ledger, dataset_name, mpc_options):
    from .dp.distributed import DistributedNoise
    from .dp.mechanisms import StatisticsMechanism
    from .evaluate import evaluate

    mech = (DistributedNoise(release_epsilon, len(data)) if protocol == "mpc"
            else StatisticsMechanism(release_epsilon, allocation="adaptive"))
    opts = None
    if protocol == "mpc":
        opts = dict(mpc_options or {})
        opts.setdefault("progress", False)
    res = evaluate([c.candidate(index) for c in data], mech, protocol=protocol,
                   seed=None if seed is None else seed + 1, mpc_options=opts, ledger=ledger,
                   dataset_name=dataset_name)
    release_result(out, res, release_epsilon)
