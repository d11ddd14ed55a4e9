r"""The evaluation's last steps, written once for every layout and path.

After the rank step each client holds the 2 x mid-ranks of its own rows:

1. :func:`client_statistics`: each client runs the plain protocol's client code
   (:class:`secure_auc.protocol.client.ClientGroup`: its labels, randomized response,
   its own noise from its own key) and, with a report, its noisy report vector; a
   process hosting several clients adds theirs up.
2. The sums are secret-shared (by the clients' processes: :func:`sum_and_open` when
   they are computing parties, the links' corrections of the helpers layout otherwise),
   added in shares and opened to the server only (:func:`open_sum`).
3. :func:`server_estimates`: the server's :meth:`secure_auc.protocol.Server.estimate`
   on the opened aggregate, one per mechanism, and :func:`report_part` the opened
   report vector.

Callers: the clients layout (:mod:`.party`), the helpers layout's hosts and computing
parties (:mod:`.input_parties`, the local session's and the deployed services' roles
through it), a session's selection with a release, and the CrypTen bridge and label
owners (:mod:`.crypten`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["client_statistics", "open_sum", "sum_and_open", "server_estimates", "report_part"]


def client_statistics(clients, first: int, noise_keys, mechanisms, twice, total: int, report=None) -> np.ndarray:
    r"""Step 1 where the clients are: the fixed-point statistics of clients ``first ..`` (one
    :class:`secure_auc.ClientData` each, their rows in ``twice``'s order), summed over them.

    Parameters
    ----------
    clients : list of ClientData
        Each client's labels (and scores: only a report reads them).
    first : int
        The index of the first client.
    noise_keys : list of int or None
        Each client's 128-bit noise key (None: a fresh one from :mod:`secrets`).
    mechanisms : list of Mechanism
        Evaluated on the same ranks, each from the clients' own streams for it.
    twice : array of int
        2 x the 0-based mid-rank of every row of these clients, concatenated.
    total : int
        M, the number of rows of every client.
    report : secure_auc.report.release.ReportPlan, optional
        Each client's noisy report vector too, from the same ranks, its true labels, its
        scores and the first mechanism's keys (another stream).

    Returns
    -------
    numpy.ndarray of int64
        :math:`\sum_k localSum'_k`, :math:`\sum_k localP'_k` per mechanism, then the
        report's summed vector.

    Examples
    --------
    Two clients hosted together release the sums of what each releases alone:

    >>> import numpy as np
    >>> from secure_auc import make_mechanism
    >>> from secure_auc.data.io import ClientData
    >>> a, b = ClientData(np.array([0.1, 0.7]), np.array([0, 1])), ClientData(np.array([0.4]), np.array([1]))
    >>> mech = [make_mechanism("laplace", 1.0)]
    >>> both = client_statistics([a, b], 0, [7, 8], mech, np.array([0, 4, 2]), 3)
    >>> alone = client_statistics([a], 0, [7], mech, np.array([0, 4]), 3) + client_statistics([b], 1, [8], mech,
    ...                                                                                         np.array([2]), 3)
    >>> bool((both == alone).all())
    True
    """
    from ..protocol.client import ClientGroup

    twice = np.asarray(twice)
    stats = np.zeros(2 * len(mechanisms), dtype=np.int64)
    ranks = twice.astype(np.float64) / 2.0
    keys = None
    for j, mechanism in enumerate(mechanisms):
        # every hosted client at once, each from its own streams: what each computes alone
        group = ClientGroup(first, clients, mechanism, noise_keys)
        keys = group.keys if keys is None else keys  # the report's noise: the first mechanism's keys, its own stream
        group.set_ranks(ranks, total)
        local_sum, local_p = group.fixed_statistics()
        stats[2 * j], stats[2 * j + 1] = int(local_sum.sum()), int(local_p.sum())
    if report is None:
        return stats
    from ..report.release import host_report

    return np.concatenate([stats, host_report(report, clients, twice, total, keys)])


def open_sum(rows, dst: int) -> np.ndarray | None:
    """Step 2 at every computing party: this party's shares ``rows`` (sources x width, Z_2^64)
    of each source's statistics, added and opened to party ``dst`` only
    (:func:`.primitives.opening.open_to`, point-to-point): the int64 sum at ``dst``, None
    elsewhere."""
    from .primitives.opening import open_to

    opened = open_to(rows.sum(dim=0), dst)
    return None if opened is None else opened.numpy().astype(np.int64)


def sum_and_open(values, n: int, sources: list[int], *, dst: int) -> np.ndarray | None:
    """Step 2 when the clients are computing parties: every party in ``sources``
    secret-shares its ``n`` int64 ``values`` (:class:`.primitives.inputs.SourceSharing`);
    the shares are added and the sum is opened to ``dst`` only (:func:`open_sum`).

    Integer encoding: the sum is exact in Z_2^64.  Parties other than ``dst`` get None."""
    from .comm import backend
    from .primitives.inputs import SourceSharing

    local = np.asarray(values, dtype=np.int64).reshape(n, 1) if backend.rank() in sources else None
    shares = SourceSharing([n] * len(sources), sources).share(local, 1, "statistics")
    return open_sum(shares.reshape(len(sources), n), dst)


def server_estimates(opened, mechanisms, total: int) -> tuple[list, list]:
    r"""Step 3 at the server: the estimates and aggregates, one per mechanism, from the opened
    sums (:math:`\sum_k localSum'_k`, :math:`\sum_k localP'_k` per mechanism, in that order)
    over ``total`` rows.

    Examples
    --------
    The AUC of scores 0.1, 0.7, 0.4 with labels 0, 1, 1 (both positives above the negative),
    without noise, from one client's statistics:

    >>> import numpy as np
    >>> from secure_auc import make_mechanism
    >>> from secure_auc.data.io import ClientData
    >>> none = [make_mechanism("none")]
    >>> data = ClientData(np.array([0.1, 0.7, 0.4]), np.array([0, 1, 1]))
    >>> opened = client_statistics([data], 0, [7], none, np.array([0, 4, 2]), 3)
    >>> estimates, aggregates = server_estimates(opened, none, 3)
    >>> aggregates[0].total, float(estimates[0].auc)
    (3, 1.0)
    """
    from ..protocol.messages import Aggregate
    from ..protocol.server import Server

    aggregates = [Aggregate(int(opened[2 * i]), int(opened[2 * i + 1]), int(total)) for i in range(len(mechanisms))]
    return [Server(m).estimate(a) for m, a in zip(mechanisms, aggregates)], aggregates


def report_part(opened, mechanisms) -> list[int]:
    """The opened report vector: what follows the mechanisms' statistics."""
    return [int(x) for x in opened[2 * len(mechanisms):]]
