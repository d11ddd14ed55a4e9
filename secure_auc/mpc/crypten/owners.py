r"""The DP AUC of ``MPCTensor`` scores whose labels are held by input parties.

The computing parties (the server, rank 0, and the helpers; CrypTen's world)
hold the scores as a CrypTen ``MPCTensor`` :math:`x` of :math:`M` rows, e.g. a
model's output under CrypTen.  The labels are held by :math:`K` *label owners*
(advertisers) that are not in CrypTen's world: each is an input party of the
helpers layout (:mod:`..input_parties`), its own process, with one
authenticated TLS link to every computing party (:mod:`..comm.inlinks`).
Owner :math:`h` holds the labels of rows
:math:`[o_h, o_h + n_h)`, :math:`o_h = \sum_{j<h} n_j`; the sizes :math:`n_h`
are public and :math:`\sum_h n_h = M`.

=====  ==========================================  ============================================
step   label owner h                               computing party p
=====  ==========================================  ============================================
1      sends its parameters, :math:`n_h` and a     check every owner's parameters and
       seed to each p != c(h)                      :math:`n_h` against the public sizes
2                                                  send every owner M; the rank step on the
                                                   ``MPCTensor``'s shares
                                                   (:func:`.bridge.twice_midranks_mpctensor`)
3      adds the shares of its rows' 2 x mid-ranks  send owner h its rows' shares only
       (mod :math:`2^{32}`)
4      the client code (:class:`secure_auc.protocol.client.ClientGroup`): its labels, RR
       flips and noise from its own key; shares its fixed-point statistics
5                                                  add the owners' shares, open the sum to the
                                                   server only
=====  ==========================================  ============================================

Steps 1, 3, 4 and 5 are those of client hosts (:func:`..input_parties.host_shares`,
:func:`~..input_parties.send_ranks`, :func:`~..input_parties.open_statistics`;
:func:`~..input_hosts.send_hello`, :func:`~..input_hosts.receive_ranks`,
:func:`~..input_hosts.release_statistics`): an owner is a client host
with one client whose scores it does not have.

Opened: the range bit of the conversion (to every computing party), owner
:math:`h`'s :math:`2 r_i` for :math:`i` in its rows (to :math:`h`), the
aggregate :math:`(\sum_h localSum'_h, \sum_h localP'_h)` per mechanism (to the
server); besides, only values masked by fresh dealer randomness and the radix
sort's shuffled permutations.  A computing party receives from an owner only
its parameters, a seed (or the owner's masked statistics, at its correction
party :math:`c(h) = h \bmod w`).
"""

from __future__ import annotations

import contextlib
import logging

import numpy as np
import torch

from ...data.io import ClientData
from ...validation import InputError
from .. import RANK_METHODS
from ..sort.registry import rank_sort
from ..comm import backend
from ..comm.inlinks import Heartbeat
from ..comm.roster import describe_helpers_rank
from ..input_hosts import (CH_ALIVE, CH_HELLO, CH_PUBLIC, HostResult, connected_evaluation, receive_ranks, recv_public,
                           release_statistics, send_hello)
from ..input_parties import accept_links, host_shares, open_statistics, send_ranks
from .. import finish
from ..party import PartyConfig, ProtocolError
from ..primitives.outside import HostSharing
from .bridge import score_count, twice_midranks_mpctensor
from .safe import released

log = logging.getLogger(__name__)

__all__ = ["OwnersConfig", "describe_owner", "owner_links", "evaluate_mpctensor_for_owners", "label_owner_evaluation",
           "run_label_owner", "label_owner_job"]


def describe_owner(h: int) -> str:
    """Label owner ``h`` (an input party), as errors name it."""
    return f"label owner {h}"


class OwnersConfig(PartyConfig):
    """The public parameters of an evaluation of ``MPCTensor`` scores with input-party
    label owners (``clients``: the number K of owners; ``computing``: w; ``sort``: the
    rank method), which the owners and the computing parties must agree on.  Its
    :meth:`public` says that the scores come from an ``MPCTensor`` (a client host of
    the client-shared path is refused) and leaves out CrypTen's provider (the owners
    take no part in the computing parties' randomness)."""

    def public(self) -> dict:
        out = super().public()
        del out["provider"]
        return out | {"scores": "crypten MPCTensor"}


def _config(mechanisms, owners: int, computing: int, method: str) -> OwnersConfig:
    rank_sort(method)  # an unknown name refused, naming the sorts there are
    mechanisms = tuple(mechanisms) if isinstance(mechanisms, (list, tuple)) else (mechanisms,)
    return OwnersConfig(mechanisms=mechanisms, clients=int(owners), sort=method, progress=False,
                        computing=int(computing))


# --------------------------------------------------------------------------- computing parties


@contextlib.contextmanager
def owner_links(endpoint: tuple, identity, owner_keys: list[bytes], *, timeout: float = 60.0,
                names: list[str] | None = None):
    """The links of this computing party to the label owners, for a ``with`` block.

    Parameters
    ----------
    endpoint : (str, int)
        Where this party listens for the owners: address and port (or a
        :class:`~secure_auc.mpc.comm.inlinks.PortBoard` in a local run).
    identity : Ed25519PrivateKey
        This party's identity key (the owners check its public key).
    owner_keys : list of bytes
        Owner h's public key at index h; a connection with another key is closed.
    timeout : float
        Seconds to wait for every owner to connect (one that does not is named), and
        for each later message.
    names : list of str, optional
        How errors name each owner (default :func:`describe_owner`).

    Yields
    ------
    dict of int to InputLink
        The links by owner.  During the block every owner gets a heartbeat
        (:data:`..input_hosts.CH_ALIVE`) every third of ``timeout``, so that the
        owners wait for as long as the computing parties work (a model's inference
        before :func:`evaluate_mpctensor_for_owners` included), not longer than the
        timeout after they stop.  The links are closed at the end.
    """
    rank, w = backend.rank(), backend.world_size()
    names = names or [describe_owner(h) for h in range(len(owner_keys))]
    links = accept_links(rank, endpoint, identity, owner_keys, timeout=timeout, names=names,
                         describe_me=describe_helpers_rank(rank, w - 1))
    try:
        with Heartbeat(links.values(), CH_ALIVE):
            yield links
    finally:
        for link in links.values():
            link.close()


def evaluate_mpctensor_for_owners(x, links: dict, *, sizes: list[int], mechanisms, server: int = 0,
                                  method: str = RANK_METHODS[0], progress=None, names: list[str] | None = None):
    r"""The paper's DP AUC of the scores in the ``MPCTensor`` ``x``, labels held by input parties.

    Every computing party calls it at the same point (after
    :func:`secure_auc.mpc.crypten.install`), with the links of :func:`owner_links`;
    each label owner runs :func:`run_label_owner` (module docstring).  Owner
    :math:`h` gets :math:`2 r_i` of its own rows only (:math:`r_i` the 0-based mid-rank
    of row :math:`i`: ties share the mean of their positions), and only
    :math:`(\sum_h localSum'_h, \sum_h localP'_h)` per mechanism is opened, to
    ``server``, which computes the estimate.

    Parameters
    ----------
    x : crypten.mpc.MPCTensor
        The scores, M values (flattened), arithmetic shares, CrypTen's fixed point:
        any 64-bit values with the radix sort (beyond :math:`[-2^{30}, 2^{30})` after
        encoding, i.e. scores outside :math:`[-2^{14}, 2^{14})` at 16 fractional bits,
        with two-limb keys); the sorting network refuses those at every party.
    links : dict of int to InputLink
        This party's links to the owners 0..K-1 (:func:`owner_links`).
    sizes : list of int
        Owner h's number of rows (public); they add up to M, owner 0's rows first.
    mechanisms : Mechanism or list of Mechanism
        The DP mechanisms (:func:`secure_auc.dp.make_mechanism`), evaluated on the
        same ranks; the owners must be given the same ones.
    server : int
        The computing party that gets the aggregate and the estimates.
    method : {"radix", "network"}
        The rank step's sort; the owners must be given the same.
    progress : callable, optional
        Called with (step, steps) during the rank step.
    names : list of str, optional
        How errors name each owner (default :func:`describe_owner`).

    Returns
    -------
    (list of Estimate, list of Aggregate) or None
        At ``server``, one estimate and one aggregate per mechanism; None elsewhere.

    Raises
    ------
    InputError
        At every computing party, before any link is used, if ``sizes`` do not add up to
        the ``MPCTensor``'s length, or, with ``method="network"``, if a score is outside
        :math:`[-2^{14}, 2^{14})` (16 fractional bits).
    ProtocolError
        If an owner was started with other parameters or holds another number of labels
        than its block has rows (the owner is named).

    Examples
    --------
    In each computing party ``p`` (not run here: it needs the parties)::

        with install(), owner_links((addr, port[p]), identity, owner_keys) as links:
            scores = model(x).sigmoid()                       # an MPCTensor
            result = evaluate_mpctensor_for_owners(scores, links, sizes=[n0, n1],
                                                   mechanisms=[make_mechanism("laplace", 1.0)])
    """
    rank, w = backend.rank(), backend.world_size()
    total = score_count(x)
    sizes = [int(n) for n in sizes]
    who = describe_helpers_rank(rank, w - 1)
    if sum(sizes) != total or not sizes or min(sizes) < 1:
        raise InputError(f"the label owners' sizes {sizes} must be positive and add up to the {total} scores of "
                         f"the MPCTensor ({who})")
    if sorted(links) != list(range(len(sizes))):
        raise InputError(f"{len(sizes)} label owners' sizes but links to owners {sorted(links)} ({who})")
    if not 0 <= server < w:
        raise InputError(f"the server must be a computing party (0..{w - 1}), got {server}")
    config = _config(mechanisms, len(sizes), w, method)
    names = names or [describe_owner(h) for h in range(len(sizes))]
    hellos = {h: links[h].recv_obj(CH_HELLO) for h in range(len(sizes))}
    rows, shares, mine = host_shares(hellos, config, rank, lambda r: describe_helpers_rank(r, w - 1),
                                     lambda h: names[h])
    if rows != sizes:
        h = next(h for h in range(len(sizes)) if rows[h] != sizes[h])
        raise ProtocolError(f"{names[h]} holds {rows[h]} labels but its block of the MPCTensor has {sizes[h]} rows "
                            f"(sizes {sizes})")
    for h in range(len(sizes)):
        links[h].send_obj(CH_PUBLIC, {"total": total})
    with Heartbeat(links.values(), CH_ALIVE):  # the owners wait for their ranks
        twice = twice_midranks_mpctensor(x, method=method, progress=progress, dtype=torch.int32)
    send_ranks(links, twice, rows)
    with released():
        opened = open_statistics(links, shares, mine, config.mechanisms, server)
    if rank != server:
        return None
    return finish.server_estimates(opened, config.mechanisms, total)


# --------------------------------------------------------------------------- label owners


def label_owner_evaluation(h: int, labels, noise_key: int | None, config: OwnersConfig, links) -> HostResult:
    r"""One evaluation at label owner ``h`` over its open ``links`` to the computing parties
    (module docstring, the owner's steps); returns a :class:`~..input_hosts.HostResult`
    whose ``"ranks"`` are its rows' :math:`2 r_i` (0-based mid-ranks, doubled)."""
    data = ClientData(np.zeros(len(labels)), labels, describe_owner(h))  # the client code reads labels and ranks
    sharing = HostSharing(h, len(links))
    send_hello(links, sharing, config, h, [len(data)])
    total = int(recv_public(links)["total"])
    twice = receive_ranks(links, len(data))
    release_statistics([data], h, [noise_key], config.mechanisms, twice, total, sharing, links)
    return HostResult(ranks=twice)


def run_label_owner(h: int, labels, *, parties: list[tuple], identity, owners: int, mechanisms,
                    noise_key: int | None = None, method: str = RANK_METHODS[0], timeout: float = 60.0) -> HostResult:
    """Take part as label owner ``h`` (an input party) in
    :func:`evaluate_mpctensor_for_owners`.

    Parameters
    ----------
    h : int
        This owner's index: its rows are the h-th block of the scores.
    labels : array of 0/1
        The labels of its rows, in the rows' order (as many as its public size).
    parties : list of (str, int, bytes)
        Every computing party's address, port and public identity key, by rank.
    identity : Ed25519PrivateKey
        This owner's identity key (the computing parties check its public key).
    owners : int
        The number K of label owners.
    mechanisms, method
        The same as the computing parties'.
    noise_key : int, optional
        This owner's 128-bit key for its RR flips and noise (None: fresh from
        :mod:`secrets`); it never leaves the owner.
    timeout : float
        Seconds to wait for each computing party (to connect, and without a heartbeat).

    Returns
    -------
    HostResult
        ``"ranks"`` (its rows' 2 x 0-based mid-ranks), ``"bytes"`` sent and received,
        ``"seconds"``.

    Raises
    ------
    InputError
        If a label is not 0 or 1 (before connecting).
    """
    me = describe_owner(h)
    ClientData(np.zeros(len(labels)), labels, me)  # refused before anything is sent
    config = _config(mechanisms, owners, len(parties), method)
    return connected_evaluation(h, identity, parties, timeout, me,
                                lambda links: label_owner_evaluation(h, labels, noise_key, config, links))


def label_owner_job(h: int, labels, owners: int, mechanisms, noise_key, parties, identity_raw: bytes, timeout: float,
                    method: str = RANK_METHODS[0]) -> HostResult:
    """:func:`run_label_owner` with the identity key as raw bytes (a spawned process's arguments,
    :func:`secure_auc.mpc.launch.spawn_parties`' ``host_job``)."""
    from ..comm.roster import identity_from_bytes

    return run_label_owner(h, labels, parties=parties, identity=identity_from_bytes(identity_raw), owners=owners,
                           mechanisms=mechanisms, noise_key=noise_key, method=method, timeout=timeout)
