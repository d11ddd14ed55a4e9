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
   fixed-point rounding.
4. The clients secret-share their noisy (localSum'_k, localP'_k); the shares
   are summed inside the MPC and only the sum is opened, to the server only.
5. The server runs :meth:`secure_auc.protocol.Server.estimate` on that aggregate.

What is opened, to whom, is listed in ``docs/mpc.md`` and checked by
``tests/mpc/test_protocol.py`` with :mod:`secure_auc.mpc.audit`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ..data.io import ClientData
from ..dp.rng import client_rngs
from ..protocol.client import Client
from ..protocol.messages import Aggregate
from ..protocol.server import Server
from . import RANK_METHODS

__all__ = ["PartyConfig", "PartyResult", "run_party", "role_name", "SERVER_RANK"]

SERVER_RANK = 0


def role_name(rank: int, clients: int) -> str:
    if rank == 0:
        return "server (rank 0)"
    if rank <= clients:
        return f"client {rank - 1} (rank {rank})"
    return f"dealer (rank {rank})"


@dataclass(frozen=True)
class PartyConfig:
    """Public parameters every party must agree on (checked at start)."""

    mechanisms: tuple  # the first is the evaluation's; more are evaluated on the same ranks
    clients: int
    seed: int | None = None
    provider: str = "ttp"
    sort: str = RANK_METHODS[0]
    progress: bool = True
    audit: bool = False  # record every opening (tests, comparisons)

    def public(self) -> dict:
        """What every party must agree on, including the library versions that
        derive the radix sort's shared random streams (numpy's permutations)."""
        import torch

        return {
            "mechanisms": [repr(m) for m in self.mechanisms],
            "clients": self.clients,
            "provider": self.provider,
            "sort": self.sort,
            "seeded": self.seed is not None,
            "numpy": ".".join(np.__version__.split(".")[:2]),
            "torch": ".".join(torch.__version__.split(".")[:2]),
        }


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
    openings: list = field(default_factory=list)  # with config.audit

    @property
    def estimate(self):
        return self.estimates[0]

    @property
    def aggregate(self) -> Aggregate:
        return self.aggregates[0]


class ProtocolError(RuntimeError):
    """A party found the others inconsistent (parameters, sizes)."""


def _progress_printer(enabled: bool):
    if not enabled:
        return None
    last = [0.0]

    def report(stage: int, stages: int) -> None:
        now = time.perf_counter()
        if stage == stages or now - last[0] >= 0.5:
            last[0] = now
            print(f"[server] rank step: stage {stage} of {stages}", file=sys.stderr, flush=True)

    return report


def sum_and_open(values: np.ndarray, world: int, *, dst: int, name: str) -> np.ndarray | None:
    """Every client secret-shares ``values`` (int64); open the sum to ``dst`` only.

    Integer encoding (precision 0): the sum is exact in Z_2^64.  Parties other
    than ``dst`` get None.
    """
    import torch

    from ._crypten import crypten
    from .audit import open_to

    local = torch.as_tensor(np.asarray(values, dtype=np.int64))
    total = None
    for src in range(1, world):
        shared = crypten.cryptensor(local, src=src, precision=0)
        total = shared if total is None else total + shared
    opened = open_to(total, dst, name)
    return None if opened is None else opened.numpy().astype(np.int64)


def run_party(rank: int, config: PartyConfig, data: ClientData | None) -> PartyResult:
    """Run the whole protocol as party ``rank``; CrypTen must be initialised."""
    if not config.audit:
        return _run_party(rank, config, data)
    from .audit import record_openings

    log: list = []
    with record_openings(log):
        result = _run_party(rank, config, data)
    result.openings = log
    return result


def _run_party(rank: int, config: PartyConfig, data: ClientData | None) -> PartyResult:
    from . import ranks as mpc_ranks
    from ._crypten import crypten
    from .runtime import communication_stats, reset_communication_stats

    comm = crypten.comm.get()
    world = comm.get_world_size()
    if world != config.clients + 1:
        raise ProtocolError(
            f"world size is {world} but {config.clients} clients + 1 server were configured"
        )
    is_server = rank == SERVER_RANK
    role = "server" if is_server else f"client {rank - 1}"
    if not is_server and data is None:
        raise ProtocolError(f"{role} (rank {rank}) has no data")
    reset_communication_stats()
    start = time.perf_counter()

    # 1. public parameters: configurations and sizes
    publics = [comm.broadcast_obj(config.public() if r == rank else None, r) for r in range(world)]
    bad = {r: sorted(k for k in p if p[k] != publics[0].get(k)) for r, p in enumerate(publics) if p != publics[0]}
    if bad:
        what = "; ".join(f"{role_name(r, config.clients)}: {', '.join(f'{k}={publics[r][k]!r} (server: {publics[0].get(k)!r})' for k in keys)}"
                         for r, keys in bad.items())
        raise ProtocolError(f"parties were started with different parameters than the server: {what}")
    my_n = 0 if is_server else len(data)
    sizes = [comm.broadcast_obj(my_n if r == rank else None, r) for r in range(world)]
    client_sizes = sizes[1:]
    if any(n < 1 for n in client_sizes):
        empty = [k for k, n in enumerate(client_sizes) if n < 1]
        raise ProtocolError(f"client(s) {empty} have no samples")
    total = int(sum(client_sizes))

    # 2. the rank step: only this client's ranks come back to it
    rank_start = time.perf_counter()
    progress = _progress_printer(config.progress and is_server)
    twice = mpc_ranks.rank_step(
        None if is_server else data.scores,
        client_sizes,
        rank,
        method=config.sort,
        progress=progress,
    )
    rank_seconds = time.perf_counter() - rank_start

    # 3. local statistics and noise, with the plain protocol's client code
    #    (a fresh client role per mechanism: the same random streams as a plain run)
    stats_fixed = np.zeros(2 * len(config.mechanisms), dtype=np.int64)
    if not is_server:
        for i, mechanism in enumerate(config.mechanisms):
            client = Client(rank - 1, data, mechanism, client_rngs(config.seed, rank - 1))
            client.set_ranks(np.asarray(twice, dtype=np.float64) / 2.0, total)
            msg = client.statistics_message()
            stats_fixed[2 * i : 2 * i + 2] = (msg.local_sum_fixed, msg.local_p_fixed)

    # 4. sum the clients' secret-shared statistics; open the sums to the server only
    aggregate_fixed = sum_and_open(stats_fixed, world, dst=SERVER_RANK, name="aggregate")

    result = PartyResult(rank=rank, role=role, seconds=0.0, bytes_sent=0, rounds=0, rank_seconds=rank_seconds)
    if is_server:
        for i, mechanism in enumerate(config.mechanisms):
            aggregate = Aggregate(int(aggregate_fixed[2 * i]), int(aggregate_fixed[2 * i + 1]), total)
            result.aggregates.append(aggregate)
            result.estimates.append(Server(mechanism).estimate(aggregate))
    stats = communication_stats()
    result.seconds = time.perf_counter() - start
    result.bytes_sent = int(stats["bytes"])
    result.rounds = int(stats["rounds"])
    return result
