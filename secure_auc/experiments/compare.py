"""Compare the plain-sort protocol with the MPC protocol on the same data.

For every number of samples M and number of computing parties (the server plus
parties - 1 clients holding an IID split of the built-in data):

* the AUC of each protocol with no noise (must be equal, and equal to sklearn's
  ``roc_auc_score``), and the DP estimate of each with the same seed (equal);
* wall seconds, bytes sent+received and communication rounds per party, and the
  slowdown of MPC over plain;
* the label-guessing attack of the paper's appendix (:mod:`secure_auc.experiments.attack`)
  run against the server's *recorded* view in each protocol.

Costs of the plain protocol are counted from its messages: a client sends its
scores (8 bytes each) and two 8-byte statistics plus its size, the server
sends each client its ranks (8 bytes each); three sequential messages; each party counts what it sends
and what it receives, as the MPC counters do.  MPC
costs are CrypTen's own counters per party.  The MPC run evaluates the exact
and the DP statistics on the same rank step (both aggregates are opened to
the server, which a real run would not do for the exact one).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .attack import precision_at_k, rank_values_from_received, top_k_guess_from_scores
from ..data import make_ctr_dataset, partition_indices, write_client_csv
from ..data.io import ClientData
from ..dp import NoNoise, client_rngs
from ..dp.rng import client_key
from ..protocol import Client, ScoresMessage, Server
from ..protocol.plain import run_plain

log = logging.getLogger(__name__)

__all__ = ["ComparisonRow", "compare", "ATTACK_K", "write_outputs"]

ATTACK_K = (10, 100, 1000, 10000)


@dataclass
class ComparisonRow:
    samples: int
    parties: int
    launcher: str
    sort: str
    sklearn_auc: float
    plain_auc: float
    mpc_auc: float
    plain_dp_auc: float
    mpc_dp_auc: float
    plain_seconds: float
    mpc_seconds: float
    mpc_rank_step_seconds: float
    slowdown: float
    plain_bytes_per_party: list
    mpc_bytes_per_party: list
    plain_rounds_per_party: list
    mpc_rounds_per_party: list
    base_rate: float
    attack_precision_plain: dict = field(default_factory=dict)
    attack_precision_mpc: dict = field(default_factory=dict)
    torchrun_dp_auc: float | None = None

    @property
    def exact_equal(self) -> bool:
        return self.plain_auc == self.mpc_auc and abs(self.plain_auc - self.sklearn_auc) <= 1e-12

    @property
    def dp_equal(self) -> bool:
        return self.plain_dp_auc == self.mpc_dp_auc


def _plain(clients, mechanism, seed):
    roles = [Client(k, c, mechanism, client_rngs(seed, k)) for k, c in enumerate(clients)]
    start = time.perf_counter()
    est, _, inbox = run_plain(roles, Server(mechanism))
    return float(est.auc), time.perf_counter() - start, inbox, roles


def _plain_costs(clients):
    # per party (server first): bytes sent+received (as the MPC counters) and sequential messages; a
    # client sends its scores (8 bytes each) and three 8-byte numbers, and receives its ranks (8 bytes each)
    client_bytes = [16 * len(c) + 3 * 8 for c in clients]
    server_bytes = sum(client_bytes)
    return [server_bytes] + client_bytes, [1] + [2] * len(clients)


def _attack_plain(inbox, roles, labels_by_client, ks, rng):
    """Top-k on the scores the server received; evaluated against the true labels."""
    values, truth = [], []
    for msg in inbox.messages:
        if isinstance(msg, ScoresMessage):
            role = roles[msg.client]
            values.append(msg.scores)
            truth.append(labels_by_client[msg.client][role.sent_order])  # harness-only mapping
    values, truth = np.concatenate(values), np.concatenate(truth)
    return {k: precision_at_k(top_k_guess_from_scores(values, k, len(values), rng), truth) for k in ks if k <= len(values)}


def _attack_mpc(server_received, sizes, truth, ks, rng):
    """Top-k on whatever per-sample values the server's process actually received
    (:func:`.attack.rank_values_from_received`); evaluated against the
    true labels by the harness."""
    values = rank_values_from_received(server_received, sizes)
    return {k: precision_at_k(top_k_guess_from_scores(values, k, len(truth), rng), truth)
            for k in ks if k <= len(truth)}


def _torchrun(clients, mechanism_args, seed, provider, sort, timeout):
    """Run the same evaluation with torchrun-launched parties; return its JSON report."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for k, c in enumerate(clients):
            p = Path(tmp) / f"client{k}.csv"
            write_client_csv(p, c.scores, c.labels)
            paths.append(str(p))
            fd = os.open(Path(tmp) / f"client{k}.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"{client_key(seed, k):032x}\n")
        from ..mpc.launch import free_port

        nproc = len(clients) + 1 + (provider == "ttp")
        cmd = [str(Path(sys.executable).parent / "torchrun"), "--nproc-per-node", str(nproc),
               "--master-port", str(free_port()), "-m", "secure_auc.cli.party", *paths,
               *mechanism_args, "--noise-key-file", str(Path(tmp) / "client{client}.key"),
               "--provider", provider, "--sort", sort, "--json",
               "--timeout", str(timeout)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate()
        finally:
            if proc.poll() is None:  # Ctrl-C: stop the whole torchrun process group
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
        if proc.returncode != 0:
            raise RuntimeError(f"torchrun run failed: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}")
        return json.loads(out.strip().splitlines()[-1])


def compare(sizes, parties_list, mechanism, mechanism_args, *, seed=0, provider="ttp", sort=None,
            launcher="local", timeout=600.0, ks=ATTACK_K, progress=None, point_done=None) -> list[ComparisonRow]:
    from sklearn.metrics import roc_auc_score

    from ..mpc import RANK_METHODS
    from ..mpc.launch import launch_local
    from ..mpc.party import PartyConfig

    sort = sort or RANK_METHODS[0]
    progress = progress or log.info

    rows = []
    total = len(sizes) * len(parties_list)
    i = 0
    for parties in parties_list:
        for m in sizes:
            i += 1
            scores, labels = make_ctr_dataset(m, seed=m)
            parts = partition_indices(scores, parties - 1, "iid", seed=0)
            clients = [ClientData(scores[idx], labels[idx], f"client {k}") for k, idx in enumerate(parts)]
            sk = float(roc_auc_score(labels, scores))
            progress(f"[{i}/{total}] M={m} parties={parties}: plain protocol")
            plain_auc, _, _, _ = _plain(clients, NoNoise(), seed)
            plain_dp, plain_seconds, inbox, roles = _plain(clients, mechanism, seed)
            progress(f"[{i}/{total}] M={m} parties={parties}: MPC protocol ({launcher})")
            config = PartyConfig(mechanisms=(NoNoise(), mechanism), clients=len(clients),
                                 provider=provider, sort=sort, progress=False)
            keys = [client_key(seed, k) for k in range(len(clients))]
            received: dict = {}
            start = time.perf_counter()
            res = launch_local(clients, config, timeout=timeout, noise_keys=keys, received=received,
                               record_ranks={0})
            mpc_seconds = time.perf_counter() - start
            server = res[0]
            pb, pr = _plain_costs(clients)
            rng = np.random.default_rng(seed)
            truth = np.concatenate([c.labels for c in clients])
            row = ComparisonRow(
                samples=m, parties=parties, launcher=launcher, sort=sort, sklearn_auc=sk,
                plain_auc=plain_auc, mpc_auc=float(server.estimates[0].auc),
                plain_dp_auc=plain_dp, mpc_dp_auc=float(server.estimates[1].auc),
                plain_seconds=plain_seconds, mpc_seconds=mpc_seconds, mpc_rank_step_seconds=server.rank_seconds,
                slowdown=mpc_seconds / plain_seconds,
                plain_bytes_per_party=pb, mpc_bytes_per_party=[res[r].bytes_sent for r in sorted(res)],
                plain_rounds_per_party=pr, mpc_rounds_per_party=[res[r].rounds for r in sorted(res)],
                base_rate=float(truth.mean()),
                attack_precision_plain=_attack_plain(inbox, roles, [c.labels for c in clients], ks, rng),
                attack_precision_mpc=_attack_mpc(received[0], [len(c) for c in clients], truth, ks, rng),
            )
            if launcher in ("torchrun", "both"):
                progress(f"[{i}/{total}] M={m} parties={parties}: MPC protocol (torchrun)")
                report = _torchrun(clients, mechanism_args, seed, provider, sort, timeout)
                row.torchrun_dp_auc = report["auc"]
            rows.append(row)
            if point_done is not None:
                point_done()
    return rows


def format_table(rows: list[ComparisonRow]) -> str:
    head = (f"{'M':>7} {'parties':>7} {'AUC plain':>10} {'AUC mpc':>10} {'=sklearn':>8} {'DP plain':>10} {'DP mpc':>10} "
            f"{'equal':>5} {'plain s':>8} {'mpc s':>8} {'slowdown':>9} {'MB sent+recv':>13} {'rounds mpc':>10}")
    lines = [head]
    for r in rows:
        lines.append(
            f"{r.samples:>7} {r.parties:>7} {r.plain_auc:>10.6f} {r.mpc_auc:>10.6f} {str(r.exact_equal):>8} "
            f"{r.plain_dp_auc:>10.6f} {r.mpc_dp_auc:>10.6f} {str(r.dp_equal):>5} {r.plain_seconds:>8.4f} "
            f"{r.mpc_seconds:>8.2f} {r.slowdown:>8.0f}x {max(r.mpc_bytes_per_party) / 1e6:>13.1f} {max(r.mpc_rounds_per_party):>10}"
        )
    lines.append("MB sent+recv: megabytes (10^6) sent plus received by the busiest party of the MPC run")
    lines.append("")
    lines.append("Label-guessing attack (server marks its top-k scores positive): precision")
    ks = sorted({k for r in rows for k in r.attack_precision_plain})
    lines.append(f"{'M':>7} {'parties':>7} {'base rate':>9} " + " ".join(f"{'plain@' + str(k):>12} {'mpc@' + str(k):>10}" for k in ks))
    for r in rows:
        cells = " ".join(
            f"{r.attack_precision_plain.get(k, float('nan')):>12.3f} {r.attack_precision_mpc.get(k, float('nan')):>10.3f}" for k in ks)
        lines.append(f"{r.samples:>7} {r.parties:>7} {r.base_rate:>9.3f} {cells}")
    if any(r.torchrun_dp_auc is not None for r in rows):
        lines.append("")
        lines.append("torchrun vs local launcher (DP estimate, same seed): " + ", ".join(
            f"M={r.samples}/p={r.parties}: {'equal' if r.torchrun_dp_auc == r.mpc_dp_auc else 'DIFFERENT'}" for r in rows))
    return "\n".join(lines)


def write_outputs(rows: list[ComparisonRow], out: Path) -> dict:
    import csv

    out.mkdir(parents=True, exist_ok=True)
    dicts = [asdict(r) | {"exact_equal": r.exact_equal, "dp_equal": r.dp_equal} for r in rows]
    (out / "compare.json").write_text(json.dumps(dicts, indent=1))
    with open(out / "compare.csv", "w", newline="") as f:
        w = csv.writer(f)
        keys = [k for k in dicts[0] if not isinstance(dicts[0][k], (list, dict))]
        w.writerow(keys + ["mpc_bytes_max_party", "mpc_rounds_max_party"]
                   + [f"attack_plain_at_{k}" for k in ATTACK_K] + [f"attack_mpc_at_{k}" for k in ATTACK_K])
        for d, r in zip(dicts, rows):
            w.writerow([d[k] for k in keys] + [max(r.mpc_bytes_per_party), max(r.mpc_rounds_per_party)]
                       + [r.attack_precision_plain.get(k, "") for k in ATTACK_K]
                       + [r.attack_precision_mpc.get(k, "") for k in ATTACK_K])
    figure = out / "compare.png"
    _plot(rows, figure)
    return {"json": out / "compare.json", "csv": out / "compare.csv", "png": figure}


def _series(rows, value, rtol=0.05):
    """One series per number of parties, as (parties, M, values); series equal within ``rtol``
    are merged (their party counts joined), so that identical lines are drawn once."""
    out = []
    for parties in sorted({r.parties for r in rows}):
        rs = sorted((r for r in rows if r.parties == parties), key=lambda r: r.samples)
        m, y = [r.samples for r in rs], np.array([value(r) for r in rs], dtype=float)
        for i, (ps, m0, y0) in enumerate(out):
            if m0 == m and np.allclose(y0, y, rtol=rtol, equal_nan=True):
                out[i] = (ps + [parties], m0, y0)
                break
        else:
            out.append(([parties], m, y))
    return out


def _plot(rows, path):
    """Three panels over M: what the server's top-k attack achieves in each protocol, the
    seconds of the rank step (MPC) next to the whole plain protocol, and the data each party
    sends and receives.  Colour = number of parties (black: the same for every number),
    marker and line style = protocol."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(15, 4.6))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    all_parties = sorted({r.parties for r in rows})
    colour = {p: colours[i % len(colours)] for i, p in enumerate(all_parties)}
    ks = sorted({k for r in rows for k in r.attack_precision_plain})
    k = 100 if 100 in ks else (ks[-1] if ks else None)

    def draw(ax, value, style, name):
        for ps, m, y in _series(rows, value):
            who = ("any number of parties" if len(ps) == len(all_parties) > 1
                   else ", ".join(map(str, ps)) + " parties")
            c = "black" if len(ps) > 1 else colour[ps[0]]
            ax.plot(m, y, style, color=c, label=f"{name}, {who}")

    if k is not None:
        draw(ax0, lambda r: r.attack_precision_plain.get(k, np.nan), "s--", "plain")
        draw(ax0, lambda r: r.attack_precision_mpc.get(k, np.nan), "o-", "MPC")
    draw(ax1, lambda r: r.mpc_rank_step_seconds, "o-", "MPC rank step")
    draw(ax1, lambda r: r.plain_seconds, "s--", "plain (whole run)")
    draw(ax2, lambda r: max(r.mpc_bytes_per_party), "o-", "MPC")
    draw(ax2, lambda r: max(r.plain_bytes_per_party), "s--", "plain")
    base = sorted({(r.samples, r.base_rate) for r in rows})
    ax0.plot([b[0] for b in base], [b[1] for b in base], ":", color="grey", label="base rate (random guess)")
    ax0.set_ylim(0, 1.02)
    ax0.set_ylabel(f"precision of the server's top-{k} guess")
    ax0.set_title("label-guessing attack on the server's view")
    ax1.set_ylabel("seconds")
    ax1.set_title("rank step (MPC) vs whole plain protocol")
    ax2.set_ylabel("bytes sent+received, busiest party")
    ax2.set_title("communication")
    for ax in (ax0, ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("samples M")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    ax1.set_yscale("log")
    ax2.set_yscale("log")
    sorts = ", ".join(sorted({r.sort for r in rows}))
    fig.suptitle(f"secure-auc: MPC (CrypTen, --sort {sorts}) vs plain-sort protocol")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
