"""One evaluation, from client data to the reported AUC.

    client files / built-in data  ->  ClientData per client
    -> Client roles (labels flipped here for RR) and a Server role
    -> a transport runs the protocol (plain: in-process; mpc: CrypTen parties)
    -> the server's Estimate  ->  EvaluationResult (what the CLI prints)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .data.io import ClientData, read_client_csv
from .data.partition import partition_indices
from .data.synthetic import make_ctr_dataset
from .dp.mechanisms import NoNoise
from .dp.rng import client_key, client_rngs
from .metrics import rank_auc
from .protocol.client import Client
from .protocol.server import Server
from .protocol.plain import run_plain
from .validation import InputError

__all__ = ["EvaluationResult", "builtin_clients", "load_clients", "check_clients", "evaluate", "describe"]


@dataclass
class EvaluationResult:
    auc: float
    reference_auc: float | None
    abs_error: float | None
    raw_auc: float
    estimated_positives: float
    epsilon: float | None
    delta: float | None
    mechanism: str
    allocation: str | None
    sensitivity: str | None
    protocol: str
    clients: int
    samples: int
    seconds: float
    seed: int | None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        return d


def builtin_clients(
    clients: int = 10,
    partition: str = "iid",
    *,
    samples: int | None = None,
    auc: float | None = None,
    base_rate: float | None = None,
    data_seed: int = 0,
) -> list[ClientData]:
    kwargs = {"seed": data_seed, "base_rate": base_rate}
    if samples is not None:
        kwargs["samples"] = samples
    if auc is not None:
        kwargs["auc"] = auc
    scores, labels = make_ctr_dataset(**kwargs)
    parts = partition_indices(scores, clients, partition, seed=data_seed)
    return [ClientData(scores[i], labels[i], f"built-in client {k}") for k, i in enumerate(parts)]


def load_clients(paths: list[str | Path]) -> list[ClientData]:
    return [read_client_csv(p) for p in paths]


def check_clients(clients: list[ClientData]) -> None:
    """Refuse inputs whose AUC is undefined (checked where all data is at hand)."""
    if not clients:
        raise InputError("no clients")
    positives = sum(int(c.labels.sum()) for c in clients)
    total = sum(len(c) for c in clients)
    if positives == 0 or positives == total:
        kind = "negative (0)" if positives == 0 else "positive (1)"
        raise InputError(
            f"all {total} labels across all {len(clients)} clients are {kind}: AUC is undefined"
        )


def describe(mechanism) -> dict:
    """The mechanism's parameters as a report shows them."""
    return mechanism.describe()


def _reference_auc(clients: list[ClientData]) -> float:
    return rank_auc(
        np.concatenate([c.labels for c in clients]), np.concatenate([c.scores for c in clients])
    )


def evaluate(
    clients: list[ClientData],
    mechanism=None,
    *,
    protocol: str = "plain",
    seed: int | None = None,
    reference: bool = True,
    mpc_options: dict | None = None,
) -> EvaluationResult:
    """Run one evaluation; ``reference`` adds the non-private AUC (local runs only).

    ``seed`` fixes every client's noise key (:func:`secure_auc.dp.rng.client_key`)
    for reproducibility.  With ``protocol="mpc"`` client k's key reaches only
    client k's process, and the result does not repeat the seed."""
    mechanism = mechanism if mechanism is not None else NoNoise()
    check_clients(clients)
    start = time.perf_counter()
    extra: dict = {}
    if protocol == "plain" and mechanism.needs_secure_sum:
        raise InputError(
            "distributed noise protects only the aggregate: in the plain protocol the server would see each "
            "client's statistics with only a share of the noise; use --protocol mpc"
        )
    if protocol == "plain":
        roles = [Client(k, c, mechanism, client_rngs(seed, k)) for k, c in enumerate(clients)]
        estimate, aggregate, _ = run_plain(roles, Server(mechanism))
    elif protocol == "mpc":
        from .mpc.launch import run_mpc_local  # imports CrypTen only when needed

        keys = None if seed is None else [client_key(seed, k) for k in range(len(clients))]
        estimate, aggregate, extra = run_mpc_local(clients, mechanism, noise_keys=keys, **(mpc_options or {}))
        if seed is not None:
            extra["noise_keys"] = "per client from --seed, each given to its client's process only"
    else:
        raise InputError(f"protocol must be 'plain' or 'mpc', got {protocol!r}")
    seconds = time.perf_counter() - start
    ref = _reference_auc(clients) if reference else None
    auc = float(estimate.auc)
    desc = describe(mechanism)
    return EvaluationResult(
        auc=auc,
        reference_auc=ref,
        abs_error=None if ref is None else abs(auc - ref),
        raw_auc=float(estimate.raw_auc),
        estimated_positives=float(aggregate.positives),
        protocol=protocol,
        clients=len(clients),
        samples=aggregate.total,
        seconds=seconds,
        seed=seed if protocol == "plain" else None,  # an MPC report keeps nothing to recompute noise from
        extra=extra,
        **desc,
    )
