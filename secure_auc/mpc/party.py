"""The MPC protocol as run by one party (one process).

World layout: rank 0 is the server, ranks 1..K are the clients (client k - 1
holds its own ``ClientData`` and nothing else); with the TTP provider CrypTen
adds a dealer at rank K + 1 that only produces correlated randomness.

Steps, each party running the same code:

1. Agree on the public parameters: every party's configuration
   (:meth:`PartyConfig.public`) and the clients' sample counts n_k are
   exchanged (sizes are public by design); a difference is named.
2. Rank step (:mod:`secure_auc.mpc.ranks`): each client secret-shares its
   encoded scores; an oblivious sort (``--sort``: the radix sort by default,
   or the bitonic network) and a segmented scan compute 2 x mid-rank of every
   score in shares; each client's slice is opened to that client only.
3. Each client runs the same :class:`secure_auc.protocol.Client` code as in the
   plain protocol: labels flipped once for RR, local statistics, its own noise,
   fixed-point rounding.  Its noise comes from its own key (``noise_key``,
   given to that client's process only, or fresh from :mod:`secrets`): no
   other process holds anything from which it could recompute the noise.
   With a report (``PartyConfig.report``), each client also computes its noisy report
   vector (:func:`secure_auc.report.release.host_report`: counts of positives per rank
   band, bounded sums) from the same ranks, its true labels, its scores and its key.
4. The clients secret-share their noisy (localSum'_k, localP'_k), then their report
   vectors (:class:`.primitives.inputs.SourceSharing`); the shares are summed and only the
   sum is opened, to the server only, point-to-point (:func:`.primitives.opening.open_to`).
5. The server runs :meth:`secure_auc.protocol.Server.estimate` on that aggregate (and, with
   a report, derives the metrics from the summed vector).

Steps 3 to 5 are :mod:`.finish`, as in every other layout.

What each party receives is listed in ``docs/mpc.md`` and checked by
``tests/mpc/test_leakage.py`` with :mod:`secure_auc.mpc.audit`.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ..data.io import ClientData
from ..protocol.messages import Aggregate
from . import RANK_METHODS
from .comm.roster import describe_rank

log = logging.getLogger(__name__)

__all__ = ["PartyConfig", "PartyResult", "ProtocolError", "run_party", "role_name", "agree_public", "progress_reporter", "SERVER_RANK"]

SERVER_RANK = 0


role_name = describe_rank  # "server (rank 0)", "client 0 (rank 1)", "dealer (rank K + 1)"


@dataclass(frozen=True)
class PartyConfig:
    """Public parameters every party must agree on (checked at start).

    The mechanisms are bound to ``clients`` (:meth:`secure_auc.dp.base.Mechanism.for_clients`):
    one calibrated for another number of clients raises :class:`~secure_auc.validation.InputError`.
    """

    mechanisms: tuple  # the first is the evaluation's; more are evaluated on the same ranks
    clients: int
    provider: str = "ttp"
    sort: str = RANK_METHODS[0]
    progress: bool = True
    computing: int = 0  # helpers layout: the number w of computing parties (server + w - 1 helpers); 0: every client computes
    session: bool = False  # helpers layout: one evaluation per message of the hosts, until they stop (.session)
    report: object = None  # a secure_auc.report.release.ReportPlan (curves, KS, ... on the same ranks), or None

    def __post_init__(self):
        # every MPC path builds its configuration here: each mechanism is bound to the clients taking part
        # (a mechanism calibrated for another number of clients is refused before anything runs)
        object.__setattr__(self, "mechanisms", tuple(m.for_clients(self.clients) for m in self.mechanisms))

    def public(self) -> dict:
        """What every party must agree on, including the library versions that
        derive the radix sort's shared random streams (numpy's permutations)."""
        return {
            "mechanisms": [repr(m) for m in self.mechanisms],
            "clients": self.clients,
            "computing": self.computing,
            "session": self.session,
            "provider": self.provider,
            "sort": self.sort,
            "numpy": ".".join(np.__version__.split(".")[:2]),
            "torch": _torch_version(),
        } | ({} if self.report is None else {"report": repr(self.report)})


def _torch_version() -> str:
    """torch's major.minor version: the loaded module's (a computing party's), else the installed
    package's (a client host never loads torch: its import costs seconds of CPU).

    >>> _torch_version().count(".")
    1
    """
    torch = sys.modules.get("torch")
    version = str(torch.__version__) if torch is not None else _installed_torch()
    return ".".join(version.split(".")[:2])


@functools.lru_cache(maxsize=1)
def _installed_torch() -> str:
    from importlib.metadata import version  # reads the package's metadata: milliseconds, once

    return version("torch")


@dataclass
class PartyResult:
    rank: int
    role: str
    seconds: float
    bytes_sent: int
    rounds: int
    estimates: list = field(default_factory=list)  # server only, one per mechanism
    aggregates: list = field(default_factory=list)  # server only, one per mechanism
    rank_seconds: float = 0.0
    client_bytes: int = 0  # helpers layout: bytes sent and received over the links to client hosts
    sizes: list = field(default_factory=list)  # helpers layout: each client host's number of samples (public)
    report: list | None = None  # server only, with a report: the opened aggregate report vector

    @property
    def estimate(self):
        return self.estimates[0]

    @property
    def aggregate(self) -> Aggregate:
        return self.aggregates[0]


class ProtocolError(RuntimeError):
    """A party found the others inconsistent (parameters, sizes)."""


def progress_reporter(enabled: bool):
    if not enabled:
        return None
    last = [0.0]

    def report(stage: int, stages: int) -> None:
        now = time.perf_counter()
        if stage == stages or now - last[0] >= 0.5:
            last[0] = now
            log.info("[server] rank step: stage %d of %d", stage, stages)

    return report


def agree_public(config: PartyConfig, rank: int, describe) -> None:
    """Every computing party's :meth:`PartyConfig.public` is compared with the server's;
    a difference is named (``describe(rank)`` names a party)."""
    from .comm import backend  # in a party: the launcher itself never loads torch and CrypTen

    world = backend.world_size()
    publics = [backend.broadcast_obj(config.public() if r == rank else None, r) for r in range(world)]
    bad = {r: sorted(k for k in p if p[k] != publics[0].get(k)) for r, p in enumerate(publics) if p != publics[0]}
    if bad:
        what = "; ".join(f"{describe(r)}: {', '.join(f'{k}={publics[r][k]!r} (server: {publics[0].get(k)!r})' for k in keys)}"
                         for r, keys in bad.items())
        raise ProtocolError(f"parties were started with different parameters than the server: {what}")


def run_party(rank: int, config: PartyConfig, data: ClientData | None, noise_key: int | None = None, *,
              on_labels=None) -> PartyResult:
    """Run the whole protocol as party ``rank``; CrypTen must be initialised.

    ``noise_key``: a client's own 128-bit key for its noise and RR streams
    (:meth:`secure_auc.dp.rng.ClientRngs.from_key`), for reproducible runs; None
    draws a fresh one from :mod:`secrets`.  Only client processes may get one.
    ``on_labels``: called by a client just before its labels are first used (its statistics
    and noise, after the rank step): a run stopped before then released nothing of them.
    """
    if noise_key is not None and (rank == SERVER_RANK or rank > config.clients):
        raise ProtocolError(f"{role_name(rank, config.clients)} must not hold a client's noise key")
    return _run_party(rank, config, data, noise_key, on_labels)


def _run_party(rank: int, config: PartyConfig, data: ClientData | None, noise_key: int | None,
               on_labels=None) -> PartyResult:
    from . import finish
    from .comm import backend
    from .ranks import rank_step

    world = backend.world_size()
    if world != config.clients + 1:
        raise ProtocolError(
            f"world size is {world} but {config.clients} clients + 1 server were configured"
        )
    is_server = rank == SERVER_RANK
    role = "server" if is_server else f"client {rank - 1}"
    if not is_server and data is None:
        raise ProtocolError(f"{role} (rank {rank}) has no data")
    backend.reset_communication_stats()
    start = time.perf_counter()

    # 1. public parameters: configurations and sizes
    agree_public(config, rank, lambda r: role_name(r, config.clients))
    my_n = 0 if is_server else len(data)
    sizes = [backend.broadcast_obj(my_n if r == rank else None, r) for r in range(world)]
    client_sizes = sizes[1:]
    if any(n < 1 for n in client_sizes):
        empty = [k for k, n in enumerate(client_sizes) if n < 1]
        raise ProtocolError(f"client(s) {empty} have no samples")
    total = int(sum(client_sizes))
    if config.report is not None:  # now that M is known, at every party alike
        from ..report.release import check_report_range

        check_report_range(config.report.spec, config.report.eps, config.clients, total)

    # 2. the rank step: only this client's ranks come back to it
    rank_start = time.perf_counter()
    progress = progress_reporter(config.progress and is_server)
    twice = rank_step(
        None if is_server else data.scores,
        client_sizes,
        rank,
        method=config.sort,
        progress=progress,
    )
    rank_seconds = time.perf_counter() - rank_start

    # 3. local statistics and noise, with the plain protocol's client code (with a report: the
    #    client's report vector too); 4. summed in shares, opened to the server only; 5. the estimates
    width = 2 * len(config.mechanisms) + (0 if config.report is None else config.report.layout(total).width)
    if on_labels is not None and not is_server:
        on_labels()
    values = np.zeros(width, dtype=np.int64) if is_server else finish.client_statistics(
        [data], rank - 1, [noise_key], config.mechanisms, twice, total, config.report)
    aggregate_fixed = finish.sum_and_open(values, width, list(range(1, world)), dst=SERVER_RANK)

    result = PartyResult(rank=rank, role=role, seconds=0.0, bytes_sent=0, rounds=0, rank_seconds=rank_seconds)
    if is_server:
        if config.report is not None:
            result.report = finish.report_part(aggregate_fixed, config.mechanisms)
        result.estimates, result.aggregates = finish.server_estimates(aggregate_fixed, config.mechanisms, total)
    stats = backend.communication_stats()
    result.seconds = time.perf_counter() - start
    result.bytes_sent = int(stats["bytes"])
    result.rounds = int(stats["rounds"])
    return result
