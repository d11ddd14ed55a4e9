"""A client host of the helpers layout across evaluations, written once.

:class:`HostRole` is what a client host (one process holding one or more clients' labels)
does in each evaluation and selection over its open links to the computing parties,
whatever hands it the scores: the local session's tasks (:func:`session_host_job`) or a
deployed client's scoring hook (:func:`secure_auc.deploy.service.run_client_service`).
After each evaluation its clients' rank statistic goes to the computing parties in shares,
and the host keeps its own rows' ranks for a release after a selection.  The steps
themselves are :mod:`..input_parties`'.
"""

from __future__ import annotations

import numpy as np

from ..comm.inlinks import connect
from ..comm.roster import describe_helpers_rank, describe_host
from ..input_parties import CH_HELLO, HostResult, host_evaluation, host_keep, host_session_select
from ..party import PartyConfig

__all__ = ["HostRole", "session_host_job"]


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

    def evaluate(self, clients, noise_keys) -> HostResult:
        """One evaluation of ``clients`` (their scores and labels, :class:`secure_auc.ClientData`)
        with each client's noise key (:func:`..input_parties.host_evaluation`), then their rank
        statistic shared with the computing parties (:func:`..input_parties.host_keep`);
        ``"ranks"``: each client's 2 x mid-ranks."""
        out = host_evaluation(self.h, clients, self.first, noise_keys, self.config, self.links, True)
        labels = [c.labels for c in clients]
        host_keep(self.links, self.h, labels, out["ranks"])
        self.kept.append((labels, np.concatenate(out["ranks"]).astype(np.int32)))
        return out

    def select(self, epochs, epsilon: float, honest: int, total: int, noise_keys, release_epsilon=None) -> None:
        """This host's part of a selection among the kept ``epochs`` (its clients' noise shares,
        :func:`..input_parties.host_session_select`); with ``release_epsilon``, its clients'
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
