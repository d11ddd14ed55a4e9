r"""The helpers layout: clients are input parties of :math:`w` computing parties.

The computing parties are the server (rank 0) and :math:`w - 1` helpers
(ranks 1 .. w - 1), plus the dealer (rank w) with the TTP provider.  Clients
do not compute: each client, or each *client host* (one process hosting
several clients on one machine), opens one authenticated, encrypted link to
each computing party (:mod:`.comm.inlinks`) and never talks to another client.
One evaluation, as both sides run it:

=====  ==========================================  ============================================
step   client host h (clients a..b)                computing party p
=====  ==========================================  ============================================
1      sends its parameters, its clients' sample   check every host's parameters; the server's
       counts and a seed to each p != c(h)         list of counts is compared by all
2      shares the bit "some score is not           add the bits in shares, open only [sum = 0]
       float32-exact" (:mod:`.primitives.outside`)  (:func:`.ranks.limbs_from_shared_bits`) and
                                                   send every host the key width and M
3      shares its encoded keys and, for the radix  rank step on the shares
       sort, every digit's one-hot form            (:func:`.ranks.radix_midranks_shared` or the
                                                   bitonic network)
4      adds the shares of its rows' 2 x mid-ranks  send host h the shares of its rows only
5      each client runs :class:`secure_auc.protocol.Client` (labels, statistics, its own noise
       from its own key); the host shares the sum of its clients' fixed-point statistics
6                                                  add the hosts' shares, open the sum to the
                                                   server only (:func:`.primitives.opening.open_to`)
=====  ==========================================  ============================================

A host's traffic is proportional to its own rows; the computing parties' work
depends on M, not on the number of clients.  What each party receives is
listed in ``docs/mpc.md``.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass

import numpy as np

from .comm import backend
from .comm.inlinks import Heartbeat, PortBoard, accept_hosts, listen
from .comm.roster import describe_helpers_rank, describe_host
from .input_hosts import (CH_ALIVE, CH_BIT, CH_HELLO, CH_INPUTS, CH_KEEP, CH_PUBLIC, CH_RANKS, CH_STATS, HostResult,
                          connected_evaluation, host_evaluation, host_job, host_keep, host_session_select,
                          input_columns, receive_ranks, recv_public, release_statistics, run_client_host, send_hello)
from .party import PartyConfig, PartyResult, ProtocolError, agree_public, progress_reporter
from .primitives.argmax import secure_argmax
from .primitives.opening import open_to
from .primitives.outside import OutsideShares, correction_party
from .ranks import limbs_from_shared_bits
from .sort.registry import rank_sort
from . import finish

log = logging.getLogger(__name__)

# the client hosts' steps are :mod:`.input_hosts`' (no torch there); named here too, with the layout
__all__ = ["run_computing_party", "join_hosts", "run_client_host", "computing_job", "host_job", "HostResult",
           "input_columns", "compute_evaluation", "host_evaluation", "accept_links", "host_shares", "send_ranks",
           "open_statistics", "send_hello", "recv_public", "receive_ranks", "release_statistics",
           "connected_evaluation", "CH_HELLO", "CH_PUBLIC", "CH_BIT", "CH_INPUTS", "CH_RANKS", "CH_STATS", "CH_ALIVE",
           "CH_KEEP", "host_keep", "host_session_select"]


def _digit_slice(limbs: int, l: int) -> slice:
    return slice(limbs + l, limbs + l + 1)


# --------------------------------------------------------------------------- computing parties

def join_hosts(rank: int, config: PartyConfig, endpoint: tuple, identity, host_keys: list[bytes], timeout: float,
               host_names: list[str] | None = None):
    """Computing party ``rank`` (CrypTen initialised with the ``config.computing`` computing
    parties) agrees on the public parameters with the others and accepts the client hosts'
    links on ``endpoint`` (authenticated against ``host_keys``; ``host_names[h]`` names host h
    in errors).  Returns ``(links by host, describe)``, ``describe(r)`` naming a computing party."""
    w = config.computing
    if backend.world_size() != w:
        raise ProtocolError(f"world size is {backend.world_size()} but {w} computing parties were configured")

    def describe(r):
        return describe_helpers_rank(r, w - 1)

    agree_public(config, rank, describe)
    names = host_names or [describe_host(h) for h in range(len(host_keys))]
    links = accept_links(rank, endpoint, identity, host_keys, timeout=timeout, names=names, describe_me=describe(rank))
    return links, describe


def run_computing_party(rank: int, config: PartyConfig, endpoint: tuple[str, int], identity, host_keys: list[bytes],
                        timeout: float, host_names: list[str] | None = None) -> PartyResult:
    """Run one evaluation as computing party ``rank`` (CrypTen initialised with the
    ``config.computing`` computing parties): accept the client hosts' links on
    ``endpoint`` (authenticated against ``host_keys``; ``host_names[h]`` names host h
    in errors), rank their rows, open the aggregate to the server.  Returns this
    party's result (estimates at the server).  A session's party, which evaluates again
    each time the hosts send new inputs, is :func:`.roles.computing.session_computing_job`."""
    backend.reset_communication_stats()
    start = time.perf_counter()
    links, describe = join_hosts(rank, config, endpoint, identity, host_keys, timeout, host_names)
    try:
        hellos = {h: links[h].recv_obj(CH_HELLO) for h in range(len(links))}
        return compute_evaluation(rank, config, links, describe, rank == 0, start, hellos)
    finally:
        for link in links.values():
            link.close()


def accept_links(rank: int, endpoint: tuple, identity, host_keys: list[bytes], *, timeout: float, names: list[str],
                 describe_me: str) -> dict:
    """Listen on ``endpoint`` ``(addr, port)`` (``port`` a :class:`.comm.inlinks.PortBoard`: a
    port from the OS, published for the hosts of a local run) and accept one authenticated
    link from each input party whose public key is in ``host_keys``; ``names[h]`` names
    input party h in errors (one that never connects within ``timeout`` seconds among
    them).  Returns the links by input party."""
    addr, port = endpoint
    listener = listen(addr, 0 if isinstance(port, PortBoard) else port)
    if isinstance(port, PortBoard):  # a local run: the OS's port, published to the hosts
        port.publish(rank, listener.getsockname()[1])
    try:
        return accept_hosts(listener, rank, identity, host_keys, timeout=timeout, describe_me=describe_me,
                            describe_host=lambda h: names[h])
    finally:
        listener.close()


def _check_hosts(hellos: dict, config: PartyConfig, rank: int, describe, name_host=describe_host) -> list[list[int]]:
    """Each host's (clients, samples), checked: same parameters, clients 0..K-1 in order,
    and the same counts at every computing party as at the server (a host's clients'
    own sample counts stay with the host)."""
    mine = config.public()
    layout = []
    next_client = 0
    for h in range(len(hellos)):
        hello = hellos[h]
        who = name_host(h)
        if hello.get("public") != mine:
            keys = sorted(k for k in mine if (hello.get("public") or {}).get(k) != mine[k])
            raise ProtocolError(f"{who} was started with different parameters: "
                                + ", ".join(f"{k}={(hello.get('public') or {}).get(k)!r} ({describe(rank)}: {mine[k]!r})"
                                            for k in keys))
        clients, samples = hello.get("clients"), hello.get("samples")
        if hello.get("first") != next_client or not all(isinstance(v, int) and not isinstance(v, bool)
                                                       for v in (clients, samples)) or not 1 <= clients <= samples:
            raise ProtocolError(f"{who} announced clients {hello.get('first')}.. as {clients!r} clients with "
                                f"{samples!r} samples; expected clients from {next_client} on, each with at least "
                                "one sample")
        next_client += clients
        layout.append((clients, samples))
    if next_client != config.clients:
        raise ProtocolError(f"the client hosts hold {next_client} clients but {config.clients} were configured")
    server_layout = [tuple(x) for x in backend.broadcast_obj(layout if rank == 0 else None, 0)]
    if server_layout != layout:
        h = next(h for h in range(len(layout)) if h >= len(server_layout) or server_layout[h] != layout[h])
        raise ProtocolError(f"{name_host(h)} told {describe(rank)} other client or sample counts than it told "
                            "the server")
    return layout


def host_shares(hellos: dict, config: PartyConfig, rank: int, describe, name_host=describe_host):
    """Step 1 at computing party ``rank``, once every host's first message (``hellos[h]``,
    :data:`CH_HELLO`) has arrived: the hosts checked (:func:`_check_hosts`; ``name_host(h)``
    names host h in errors), their row counts, this party's :class:`.primitives.outside.OutsideShares`
    of their blocks and the hosts whose corrections it receives."""
    layout = _check_hosts(hellos, config, rank, describe, name_host)
    w = config.computing
    seeds = {h: (bytes.fromhex(hellos[h]["seed"]) if correction_party(h, w) != rank else None)
             for h in range(len(hellos))}
    shares = OutsideShares(rank, w, seeds)
    return [samples for _, samples in layout], shares, shares.corrected_hosts()


def send_ranks(links: dict, twice, rows: list[int]) -> None:
    """Step 4: send host h this party's shares of its own rows' 2 x mid-ranks (rows in host
    order, ``rows[h]`` each), as int32 words: shares mod 2^32, 2 x mid-rank < 2^31."""
    twice = twice.numpy().astype(np.int32)
    offset = 0
    for h in range(len(links)):
        links[h].send_array(CH_RANKS, twice[offset : offset + rows[h]], np.int32)
        offset += rows[h]


def open_statistics(links: dict, shares: OutsideShares, mine: list[int], mechanisms, dst: int = 0,
                    report_width: int = 0):
    """Step 6: the hosts' fixed-point statistics (2 per mechanism, then ``report_width`` entries
    of the report's vector), added in shares and opened to party ``dst`` only
    (:func:`.primitives.opening.open_to`): the int64 sum at ``dst``, None elsewhere."""
    width = 2 * len(mechanisms) + int(report_width)
    corr = {h: links[h].recv_array(CH_STATS, (1, width)) for h in mine}
    return finish.open_sum(shares.shares("statistics", [1] * len(links), width, corr), dst)


def compute_evaluation(rank, config, links, describe, is_server, start, hellos) -> PartyResult:
    """One evaluation at computing party ``rank`` over the hosts' open ``links``, once every
    host's first message (``hellos[h]``, :data:`CH_HELLO`) has arrived: steps 2 to 6."""
    hosts = len(links)
    bytes_before = sum(link.bytes for link in links.values())
    rows, shares, mine = host_shares(hellos, config, rank, describe)
    total = sum(rows)

    # 2. key width: only [no host has float64 scores] is opened, to the computing parties
    corr = {h: links[h].recv_array(CH_BIT, (1, 1)) for h in mine}
    limbs = limbs_from_shared_bits(shares.shares("float32-exact", [1] * hosts, 1, corr))
    for h in range(hosts):
        links[h].send_obj(CH_PUBLIC, {"limbs": limbs, "total": total})

    # 3. the rank step on the hosts' shares
    rank_start = time.perf_counter()
    rounds, cols = input_columns(config.sort, limbs)
    corr = {h: links[h].recv_array(CH_INPUTS, (rows[h], cols)) for h in mine}
    keys = shares.shares("keys", rows, limbs, corr, column_slice=slice(0, limbs))
    progress = progress_reporter(config.progress and is_server)

    def digits(l):  # a sort by digits reads them round by round
        return shares.shares(("digit", l), rows, 1, corr, column_slice=_digit_slice(limbs, l))

    with Heartbeat(links.values(), CH_ALIVE):  # the hosts wait for the ranks
        twice = rank_sort(config.sort).midranks(keys, digits, limbs, progress=progress)
    corr = keys = None  # freed
    rank_seconds = time.perf_counter() - rank_start

    # 4. each host gets the shares of its own rows only
    send_ranks(links, twice, rows)

    # 6. the hosts' statistics, summed in shares, opened to the server only
    report_width = 0 if config.report is None else config.report.layout(total).width
    opened = open_statistics(links, shares, mine, config.mechanisms, 0, report_width)

    result = PartyResult(rank=rank, role=describe(rank).split(" (")[0], seconds=0.0, bytes_sent=0, rounds=0,
                         rank_seconds=rank_seconds, sizes=rows)
    if is_server:
        result.estimates, result.aggregates = finish.server_estimates(opened, config.mechanisms, total)
        if report_width:
            result.report = finish.report_part(opened, config.mechanisms)
    stats = backend.communication_stats()
    result.client_bytes = int(sum(link.bytes for link in links.values()) - bytes_before)
    result.bytes_sent = int(stats["bytes"]) + result.client_bytes
    result.rounds = int(stats["rounds"])
    result.seconds = time.perf_counter() - start
    return result


# --------------------------------------------------------------------------- process entry points

def computing_job(rank: int, config: PartyConfig, endpoint, identity_raw: bytes, host_keys: list[bytes],
                  timeout: float, host_names: list[str] | None = None) -> PartyResult:
    """:func:`run_computing_party` with the identity key as raw bytes (a spawned process's arguments)."""
    from .comm.roster import identity_from_bytes

    return run_computing_party(rank, config, tuple(endpoint), identity_from_bytes(identity_raw), host_keys, timeout,
                               host_names)


# --------------------------------------------------------------------------- selection in a session

@dataclass


class SelectionPartyResult:
    rank: int
    role: str
    seconds: float
    bytes_sent: int
    rounds: int
    rank_seconds: float = 0.0
    argmax_seconds: float = 0.0
    argmax_bytes: int = 0
    argmax_rounds: int = 0
    client_bytes: int = 0
    selected: int | None = None  # the server only
    sizes: list | None = None
    release: tuple | None = None  # the server, with a release: (estimate, aggregate) of the selected


def party_keep(links, rank: int, w: int):
    """The computing party's end of :func:`host_keep`: its share (1,) of the hosts' summed D."""
    from .primitives.outside import OutsideShares, correction_party

    seeds, corr = {}, {}
    for h in range(len(links)):
        if correction_party(h, w) == rank:
            seeds[h], corr[h] = None, links[h].recv_array(CH_KEEP, (1, 1))
        else:
            seeds[h] = bytes.fromhex(links[h].recv_obj(CH_KEEP)["seed"])
    return OutsideShares(rank, w, seeds).shares("kept", [1] * len(links), 1, corr).sum(dim=0)


def party_session_select(rank: int, w: int, links, hellos: dict, kept: list, describe,
                         mechanism=None) -> SelectionPartyResult:
    """A session's selection at computing party ``rank``: the kept statistics of the announced
    evaluations plus the hosts' noise shares, permuted by the server's priority order, the
    secure argmax, the index opened to the server only.

    With a release (the hosts' ``release`` eps): the server names the selected evaluation to
    the hosts, which share its statistics under ``mechanism`` (the session's) at that eps;
    added in shares and opened to the server only (``result.release``: estimate, aggregate)."""
    import torch

    from .primitives.outside import OutsideShares, correction_party

    first = hellos[0]
    epochs = first.get("select")
    for h, hello in hellos.items():
        if (hello.get("select"), hello.get("epsilon"), hello.get("honest"), hello.get("release")) != \
                (epochs, first.get("epsilon"), first.get("honest"), first.get("release")):
            raise ProtocolError(f"{describe_host(h)} announced another selection than {describe_host(0)}")
    if not epochs or not all(isinstance(e, int) and 0 <= e < len(kept) for e in epochs):
        raise ProtocolError(f"a selection of evaluations {epochs} among the session's {len(kept)}")
    backend.reset_communication_stats()
    start = time.perf_counter()
    seeds = {h: (None if correction_party(h, w) == rank else bytes.fromhex(hellos[h]["seed"])) for h in hellos}
    shares = OutsideShares(rank, w, seeds)
    corr = {h: links[h].recv_array(CH_KEEP, (1, len(epochs))) for h in shares.corrected_hosts()}
    noise = shares.shares("selection noise", [1] * len(links), len(epochs), corr).sum(dim=0)
    values = torch.cat([kept[e] for e in epochs]) + noise
    order = secrets.SystemRandom().sample(range(len(epochs)), len(epochs)) if rank == 0 else None
    order = backend.broadcast_obj(order, 0)
    index = open_to(secure_argmax(values[torch.tensor(order, dtype=torch.long)]), 0)
    stats = backend.communication_stats()
    result = SelectionPartyResult(rank=rank, role=describe(rank).split(" (")[0], seconds=time.perf_counter() - start,
                                  bytes_sent=int(stats["bytes"]), rounds=int(stats["rounds"]),
                                  argmax_seconds=time.perf_counter() - start, argmax_bytes=int(stats["bytes"]),
                                  argmax_rounds=int(stats["rounds"]))
    if rank == 0:
        position = int(index.reshape(-1)[0])
        if not 0 <= position < len(epochs):
            raise ProtocolError(f"the secure argmax opened position {position} of {len(epochs)} candidates")
        result.selected = int(epochs[order[position]])
    if first.get("release") is not None:
        from ..dp.selection import release_mechanism

        if mechanism is None:
            raise ProtocolError("a release was asked of a selection, but this party has no mechanism")
        if rank == 0:
            for h in range(len(links)):
                links[h].send_obj(CH_KEEP, {"release": result.selected})
        release = release_mechanism(mechanism, float(first["release"]))
        opened = open_statistics(links, shares, shares.corrected_hosts(), [release], 0)
        if rank == 0:
            estimates, aggregates = finish.server_estimates(opened, [release], int(first["total"]))
            result.release = (estimates[0], aggregates[0])
        stats = backend.communication_stats()
        result.bytes_sent, result.rounds = int(stats["bytes"]), int(stats["rounds"])
        result.seconds = time.perf_counter() - start
    return result
