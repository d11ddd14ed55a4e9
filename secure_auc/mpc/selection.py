r"""Report-noisy-max over T candidates in MPC: only the index of the best comes out, to the server.

The helpers layout of :mod:`.input_parties` (w computing parties: the server and
w - 1 helpers, the dealer, client hosts as input parties), once per candidate and
then once more:

=====  ==========================================  ============================================
step   client host h (clients a..b)                computing party p
=====  ==========================================  ============================================
1..4   for each candidate t: steps 1 to 4 of one   the rank step on candidate t's shared keys;
       evaluation (:mod:`.input_parties`): share   host h gets the shares of its own rows'
       the keys of candidate t's scores, receive   2 x mid-ranks only
       the own rows' 2 x mid-ranks
5      each client: D_{k,t} = sum of its
       positives' 2 x mid-ranks, plus its share
       of the noise (:func:`secure_auc.dp.selection.noise_share`,
       from its own key); the host shares the
       T sums over its clients
6                                                  add the hosts' shares: [D_t + Z_t] for every
                                                   t, in shares; permute them by a priority order
                                                   the server draws from :mod:`secrets` (ties at
                                                   random); the secure argmax
                                                   (:mod:`.primitives.argmax`); open the index to
                                                   the server only
=====  ==========================================  ============================================

What each party receives: a host, its own rows' ranks (as in an evaluation); a
computing party, shares and Beaver-masked values; the server, in addition, the one
index.  No candidate's statistic, noisy or not, is ever opened.
``tests/mpc/test_selection.py`` records every buffer and opening of every process and
checks it (:mod:`.audit`), with a canary that opens the noisy statistics.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import numpy as np

from ..dp.rng import ClientRngs
from ..dp.selection import noise_share
from . import RANK_METHODS
from .comm import backend
from .comm.inlinks import Heartbeat
from .comm.roster import describe_helpers_rank, describe_host
from .input_parties import SelectionPartyResult  # a session's selection lives with the session's loop there
from .input_hosts import (CH_ALIVE, CH_BIT, CH_HELLO, CH_INPUTS, CH_PUBLIC, CH_STATS, connected_evaluation,
                          input_columns, share_and_rank)
from .input_parties import accept_links, host_shares, send_ranks
from .party import PartyConfig, ProtocolError, agree_public, progress_reporter
from .primitives.argmax import argmax_levels, secure_argmax
from .primitives.opening import open_to
from .ranks import limbs_from_shared_bits
from .sort.registry import rank_sort

__all__ = ["SelectionConfig", "SelectionPartyResult", "selection_computing_job", "selection_host_job",
           "run_selection_local"]


@dataclass(frozen=True)
class SelectionConfig(PartyConfig):
    """:class:`.party.PartyConfig` of a selection: ``candidates`` T, ``epsilon`` (None: no
    noise, the exact argmax: tests only) and ``honest`` h, the number of noise shares that
    sum to the full noise (default: every client's)."""

    candidates: int = 1
    epsilon: float | None = None
    honest: int = 0

    def public(self) -> dict:
        return super().public() | {"candidates": self.candidates, "epsilon": self.epsilon,
                                   "honest": self.honest or self.clients, "task": "select"}


# --------------------------------------------------------------------------- computing parties

def _rank_rows(rank, config, links, describe, is_server, hellos):
    """Steps 1 to 4 of one evaluation (:func:`.input_parties.compute_evaluation`) for one
    candidate: returns this party's :class:`.primitives.outside.OutsideShares`, the hosts
    whose corrections it receives, and the rank step's seconds."""
    hosts = len(links)
    rows, shares, mine = host_shares(hellos, config, rank, describe)
    corr = {h: links[h].recv_array(CH_BIT, (1, 1)) for h in mine}
    limbs = limbs_from_shared_bits(shares.shares("float32-exact", [1] * hosts, 1, corr))
    total = sum(rows)
    for h in range(hosts):
        links[h].send_obj(CH_PUBLIC, {"limbs": limbs, "total": total})
    start = time.perf_counter()
    rounds, cols = input_columns(config.sort, limbs)
    corr = {h: links[h].recv_array(CH_INPUTS, (rows[h], cols)) for h in mine}
    keys = shares.shares("keys", rows, limbs, corr, column_slice=slice(0, limbs))
    progress = progress_reporter(config.progress and is_server)

    def digits(l):  # a sort by digits reads them round by round
        return shares.shares(("digit", l), rows, 1, corr, column_slice=slice(limbs + l, limbs + l + 1))

    with Heartbeat(links.values(), CH_ALIVE):
        twice = rank_sort(config.sort).midranks(keys, digits, limbs, progress=progress)
    seconds = time.perf_counter() - start
    send_ranks(links, twice, rows)
    return rows, shares, mine, seconds


def compute_selection(rank, config: SelectionConfig, links, describe, start) -> SelectionPartyResult:
    """Steps 1 to 6 at computing party ``rank`` over the hosts' open ``links``."""
    is_server = rank == 0
    rank_seconds = 0.0
    t_count = config.candidates
    shares = mine = rows = None
    for _ in range(t_count):
        hellos = {h: links[h].recv_obj(CH_HELLO) for h in range(len(links))}
        rows, shares, mine, seconds = _rank_rows(rank, config, links, describe, is_server, hellos)
        rank_seconds += seconds
    # 5-6. the noisy statistics in shares, permuted by the server's priority order, the argmax
    corr = {h: links[h].recv_array(CH_STATS, (1, t_count)) for h in mine}
    noisy = shares.shares("selection", [1] * len(links), t_count, corr).sum(dim=0)
    order = secrets.SystemRandom().sample(range(t_count), t_count) if is_server else None
    order = backend.broadcast_obj(order, 0)
    stats0 = backend.communication_stats()
    arg_start = time.perf_counter()
    import torch

    index = open_to(secure_argmax(noisy[torch.tensor(order, dtype=torch.long)]), 0)
    arg_seconds = time.perf_counter() - arg_start
    stats = backend.communication_stats()
    result = SelectionPartyResult(rank=rank, role=describe(rank).split(" (")[0], seconds=0.0, bytes_sent=0, rounds=0,
                                  rank_seconds=rank_seconds, argmax_seconds=arg_seconds,
                                  argmax_bytes=int(stats["bytes"] - stats0["bytes"]),
                                  argmax_rounds=int(stats["rounds"] - stats0["rounds"]), sizes=rows)
    if is_server:
        position = int(index.reshape(-1)[0])
        if not 0 <= position < t_count:
            raise ProtocolError(f"the secure argmax opened position {position} of {t_count} candidates")
        result.selected = int(order[position])
    result.client_bytes = int(sum(link.bytes for link in links.values()))
    result.bytes_sent = int(stats["bytes"]) + result.client_bytes
    result.rounds = int(stats["rounds"])
    result.seconds = time.perf_counter() - start
    return result


def selection_computing_job(rank: int, config: SelectionConfig, endpoint, identity_raw: bytes,
                            host_keys: list[bytes], timeout: float, host_names: list[str]) -> SelectionPartyResult:
    """Computing party ``rank`` of one selection (CrypTen initialised with the
    ``config.computing`` parties): accept the hosts' links, run :func:`compute_selection`."""
    from .comm.roster import identity_from_bytes

    w = config.computing
    if backend.world_size() != w:
        raise ProtocolError(f"world size is {backend.world_size()} but {w} computing parties were configured")

    def describe(r):
        return describe_helpers_rank(r, w - 1)

    backend.reset_communication_stats()
    start = time.perf_counter()
    agree_public(config, rank, describe)
    links = accept_links(rank, tuple(endpoint), identity_from_bytes(identity_raw), host_keys, timeout=timeout,
                         names=host_names, describe_me=describe(rank))
    try:
        return compute_selection(rank, config, links, describe, start)
    finally:
        for link in links.values():
            link.close()


# --------------------------------------------------------------------------- client hosts

def _host_candidate(h, labels, scores, first, config, links) -> np.ndarray:
    """Steps 1 to 4 at host ``h`` for one candidate (``scores``: each hosted client's scores
    of it): share the keys, receive the own rows' 2 x mid-ranks.  Returns the hosted
    clients' D_{k,t} and the host's sharing of this round."""
    sizes = [len(y) for y in labels]
    flat = np.concatenate(scores) if len(scores) > 1 else np.asarray(scores[0], dtype=np.float64)
    twice, sharing, total = share_and_rank(h, flat, sizes, first, config, links)
    y = np.concatenate(labels).astype(bool)
    owner = np.repeat(np.arange(len(labels)), sizes)
    d = np.zeros(len(labels), dtype=np.int64)
    np.add.at(d, owner[y], twice[y])
    return d, sharing, total


def host_selection(h, labels, scores, first, noise_keys, config: SelectionConfig, links) -> dict:
    """One selection at client host ``h``: steps 1 to 5 (``scores[k]``: hosted client k's
    (n_k, T) scores; ``noise_keys[k]``: its key, None for a fresh one)."""
    t_count = config.candidates
    d = np.zeros((len(labels), t_count), dtype=np.int64)
    sharing = total = None
    for t in range(t_count):
        d[:, t], sharing, total = _host_candidate(h, labels, [s[:, t] for s in scores], first, config, links)
    if config.epsilon is not None:
        honest = config.honest or config.clients
        for k, key in enumerate(noise_keys):  # each client's own share, from its own key
            d[k] += noise_share(ClientRngs.from_key(key).stream("select"), t_count, total, config.epsilon, honest)
    links[sharing.corrector].send_array(CH_STATS, sharing.correction(d.sum(axis=0).reshape(1, t_count), "selection"))
    return {}


def selection_host_job(h: int, labels, scores, first: int, noise_keys, config: SelectionConfig, parties,
                       identity_raw: bytes, timeout: float) -> dict:
    """Client host ``h`` of one selection (a spawned process's arguments)."""
    from .comm.roster import identity_from_bytes

    me = describe_host(h, range(first, first + len(labels)))
    return connected_evaluation(h, identity_from_bytes(identity_raw), parties, timeout, me,
                                lambda links: host_selection(h, labels, scores, first, noise_keys, config, links))


# --------------------------------------------------------------------------- local launcher

def run_selection_local(labels: list[np.ndarray], scores: list[np.ndarray], *, epsilon: float | None,
                        noise_keys: list[int | None] | None = None, honest: int | None = None, computing: int = 3,
                        provider: str = "ttp", sort: str = RANK_METHODS[0], timeout: float = 60.0,
                        port: int | None = None, hosts: int | None = None, progress: bool = False,
                        received: dict | None = None, record_ranks=None) -> tuple[int, dict]:
    """Run one selection with local processes: client k holds ``labels[k]`` and ``scores[k]``
    ((n_k, T) array, one column per candidate).  Returns ``(index, cost)``: the selected
    candidate (what the server learned) and the run's cost (the argmax's seconds, bytes and
    rounds apart).  ``received``: as :func:`.launch.launch_local` (the audit)."""
    from .launch import HelpersPlan
    from ..dp.mechanisms import NoNoise

    k = len(labels)
    t_count = int(scores[0].shape[1])
    keys = list(noise_keys) if noise_keys is not None else [None] * k
    config = SelectionConfig(mechanisms=(NoNoise(),), clients=k, provider=provider, sort=sort,
                             progress=progress, computing=computing, candidates=t_count, epsilon=epsilon,
                             honest=int(honest or k))
    w = computing
    plan = HelpersPlan.draw(w, k, hosts, provider)
    hosts = len(plan.groups)
    per_rank = {r: (config, *plan.rank_args(r), timeout, plan.names) for r in range(w)}
    per_host = [(labels[a:b], scores[a:b], a, keys[a:b], config, *plan.host_args(h), timeout)
                for h, (a, b) in enumerate(plan.groups)]
    start = time.perf_counter()
    done = plan.spawn(selection_computing_job, per_rank, selection_host_job, per_host, provider=provider,
                      timeout=timeout, port=port, received=received, record_ranks=record_ranks)
    server = done[0]
    cost = {"mpc_seconds": round(time.perf_counter() - start, 3), "rank_step_seconds": round(server.rank_seconds, 3),
            "candidates": t_count, "argmax_seconds": round(server.argmax_seconds, 4),
            "argmax_levels": argmax_levels(t_count),
            "argmax_bytes_per_party": [done[r].argmax_bytes for r in range(w)],
            "argmax_rounds_per_party": [done[r].argmax_rounds for r in range(w)],
            "bytes_per_party": [done[r].bytes_sent for r in range(w)],
            "rounds_per_party": [done[r].rounds for r in range(w)],
            "provider": provider, "sort": sort, "layout": "helpers", "computing_parties": w,
            "client_hosts": hosts}
    return server.selected, cost
