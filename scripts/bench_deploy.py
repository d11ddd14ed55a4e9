#!/usr/bin/env python3
"""Cost of a deployed session: start-up, then each evaluation beyond the rank step.

Deploys the helpers layout as services on this machine (server, two helpers, the
dealer, three clients, each its own ``secure-auc serve`` process), each client
scoring its samples with the epoch's model file through its hook, connects a
session (:meth:`secure_auc.session.MPCSession.connect`) and evaluates
``--epochs`` epochs of ``--samples`` scores; then runs the local session
(every party a local process, the scores passed in) on the same scores.  Prints,
for each, the start-up (services up and connected, or local processes started
by the first evaluation) and per evaluation the seconds, the rank step, and the
overhead = seconds - rank step.

    .venv/bin/python scripts/bench_deploy.py --samples 12000 --epochs 5

The functions that write a deployment (keys, roster, configuration, data, models,
the hook) and start its services are used by ``tests/deploy/test_services.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROLES = ["server", "helper-1", "helper-2", "dealer", "client-0", "client-1", "client-2"]

HOOK = '''"""The clients' scoring hook: client k scores its own samples with the epoch's model."""
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FIXED_KEYS = {fixed}  # reproducible noise keys (tests only; a deployment draws fresh ones)


def score(epoch, *, client, evaluation):
    features = np.load(HERE / f"features-{{client}}.npy")
    weights = np.load(HERE / "models" / f"model-{{epoch}}.npy")
    scores = (features @ weights).astype(np.float32)
    if FIXED_KEYS:
        from secure_auc.dp.rng import client_key

        return scores, client_key(1000 + int(epoch), client)
    return scores
'''


def roles(computing: int = 3, clients: int = 3) -> list[str]:
    """The services of a deployment, in the order of :data:`ROLES` (the server, the helpers, the
    dealer, the clients).

    >>> roles(2, 2)
    ['server', 'helper-1', 'dealer', 'client-0', 'client-1']
    """
    return ["server", *[f"helper-{i}" for i in range(1, computing)], "dealer", *[f"client-{k}" for k in range(clients)]]


def model_scores(folder: Path, client: int, epoch: int) -> np.ndarray:
    """What client ``client``'s hook computes for ``epoch`` (the reference for tests)."""
    features = np.load(folder / f"features-{client}.npy")
    return (features @ np.load(folder / "models" / f"model-{epoch}.npy")).astype(np.float32).astype(np.float64)


def write_deployment(folder: Path, sizes, *, epochs: int, addresses: list[str] | None = None, ports=None,
                     mechanism: str = 'name = "laplace"\nepsilon = 1.0\nallocation = "adaptive"',
                     budgets=None, fixed_keys: bool = True, timeout: float = 20.0, seed: int = 0,
                     config_name: str = "deploy.toml", session_address: str | None = None,
                     computing: int = 3) -> dict:
    """Write a deployment of the helpers layout (``computing`` computing parties, 3 or 2, the
    dealer, one client per entry of ``sizes``) into ``folder``: identity keys (``secure-auc keygen``), the roster
    (``secure-auc roster``), ``deploy.toml``, each client's labels and features, a model file per
    epoch and the hook.  ``addresses[i]``: the host of role ``ROLES[i]`` (default 127.0.0.1);
    ``ports``: (rendezvous, first client port, session port); with ``computing = 2`` the roles are
    ``roles(2, clients)`` (no helper-2).  Returns the labels per client."""
    from secure_auc.cli import main as cli

    folder.mkdir(parents=True, exist_ok=True)
    keys = folder / "keys"
    rng = np.random.default_rng(seed)
    d = 8
    labels = []
    if not (folder / "roster.json").exists():
        keys.mkdir(exist_ok=True)
        for role in dict.fromkeys(roles(computing, len(sizes)) + (ROLES if computing == 3 else [])):
            _quiet(cli, ["keygen", str(keys / f"{role}.pem")])
        _quiet(cli, ["roster", str(folder / "roster.json"), "--server", str(keys / "server.pem"),
                     "--helpers", *[str(keys / f"helper-{i}.pem") for i in range(1, computing)],
                     "--dealer", str(keys / "dealer.pem"), "--clients",
                     *[str(keys / f"client-{k}.pem") for k in range(len(sizes))], "--quiet"])
        (folder / "models").mkdir(exist_ok=True)
        truth = rng.normal(size=d)
        for e in range(epochs):
            np.save(folder / "models" / f"model-{e}.npy", truth * (e + 1) / epochs + rng.normal(size=d) * 0.5)
        for k, n in enumerate(sizes):
            x = rng.normal(size=(n, d))
            y = (x @ truth + rng.logistic(size=n) > 1.0).astype(np.int8)
            y[0], y[-1] = 0, 1
            np.save(folder / f"features-{k}.npy", x)
            (folder / f"labels-{k}.csv").write_text("label\n" + "\n".join(map(str, y)) + "\n")
        (folder / "scoring.py").write_text(HOOK.format(fixed=fixed_keys))
    for k in range(len(sizes)):
        labels.append(np.loadtxt(folder / f"labels-{k}.csv", skiprows=1, dtype=np.int8).reshape(-1))
    names = roles(computing, len(sizes))
    addresses = addresses or ["127.0.0.1"] * len(names)
    rendezvous, client_port, session_port = ports
    budgets = budgets or {}
    helpers = "".join(f'[[helpers]]\nclients = "{addresses[i]}:{client_port + i}"\n\n' for i in range(1, computing))
    clients = "".join(
        f'\n[[clients]]\nlabels = "labels-{k}.csv"\nscores = "scoring:score"\nledger = "ledger-{k}.db"\n'
        + (f"budget = {budgets[k]}\n" if k in budgets else "") for k in range(len(sizes)))
    (folder / config_name).write_text(f"""[deployment]
computing_parties = {computing}
provider = "ttp"
sort = "radix"
timeout = {timeout}
join_timeout = {4 * timeout}
score_timeout = {timeout}
roster = "roster.json"

[mechanism]
{mechanism}

[server]
rendezvous = "{addresses[0]}:{rendezvous}"
clients = "{addresses[0]}:{client_port}"
session = "{session_address or addresses[0]}:{session_port}"

{helpers}{clients}""")
    return {"labels": labels}


def _quiet(cli, argv) -> None:
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        if cli(argv) != 0:
            raise RuntimeError(f"secure-auc {' '.join(argv)} failed")


def start_service(folder: Path, role: str, *, netns: str | None = None, config_name: str = "deploy.toml",
                  env: dict | None = None) -> subprocess.Popen:
    """``secure-auc serve --config deploy.toml --role ROLE --key keys/ROLE.pem`` (in ``netns``)."""
    cmd = [sys.executable, "-m", "secure_auc", "serve", "--config", str(folder / config_name), "--role", role,
           "--key", str(folder / "keys" / f"{role}.pem")]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    environment = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
                            start_new_session=True)


def stop(procs) -> None:
    import signal

    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
        p.wait()


def _cost(result) -> dict:
    """An evaluation's seconds and rank-step seconds (start-up reported apart, not included)."""
    return {"seconds": result.seconds, "rank_step_seconds": result.extra["rank_step_seconds"]}


def one_evaluation_per_start(folder: Path, labels, epoch: int) -> dict:
    """The deployment without services: the computing parties under torchrun
    (``python -m secure_auc.cli.compute``) and one ``secure-auc client`` per client, all
    started for one evaluation, as before the services existed.  Returns the wall seconds
    from the start to the report and the report's rank step."""
    from secure_auc.data.io import write_client_csv
    from secure_auc.mpc.launch import free_port

    for role in ("helper-1", "helper-2"):
        link = folder / "keys" / f"{role.replace('-', '')}.pem"
        if not link.exists():
            link.symlink_to(folder / "keys" / f"{role}.pem")
    files = []
    for k, y in enumerate(labels):
        files.append(folder / f"c{k}.csv")
        write_client_csv(files[-1], model_scores(folder, k, epoch), y)
    base, master = free_port(span=3), free_port()
    common = ["--clients", str(len(labels)), "--mechanism", "laplace", "--epsilon", "1", "--roster",
              str(folder / "roster.json"), "--timeout", "120"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    compute = subprocess.Popen(
        [str(Path(sys.executable).parent / "torchrun"), "--nnodes", "1", "--nproc-per-node", "4", "--master-addr",
         "127.0.0.1", "--master-port", str(master), "-m", "secure_auc.cli.compute", *common,
         "--identity-template", str(folder / "keys" / "{role}.pem"), "--client-port", str(base), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    clients = [subprocess.Popen(
        [sys.executable, "-m", "secure_auc", "client", str(files[k]), "--client", str(k), *common,
         "--parties", *[f"127.0.0.1:{base + r}" for r in range(3)], "--identity",
         str(folder / "keys" / f"client-{k}.pem")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env) for k in range(len(labels))]
    try:
        out, err = compute.communicate(timeout=600)
        for c in clients:
            c.wait(timeout=120)
    finally:
        stop([compute, *clients])
    if compute.returncode != 0:
        raise RuntimeError(f"the torchrun deployment failed: {err[-1500:]}")
    report = json.loads(out.strip().splitlines()[-1])
    return {"seconds": round(time.perf_counter() - start, 3), "rank_step_seconds": report["rank_step_seconds"]}


def main(argv=None) -> int:
    import tempfile

    from secure_auc.dp.registry import make_mechanism
    from secure_auc.mpc.launch import free_port
    from secure_auc.session import MPCSession

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=12_000, help="M, over three clients (default 12,000)")
    ap.add_argument("--epochs", type=int, default=5, help="evaluations after the first (default 5)")
    ap.add_argument("--before", action="store_true",
                    help="also one evaluation as before the services: torchrun and one client command each")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sizes = [args.samples // 3 + (1 if k < args.samples % 3 else 0) for k in range(3)]
    epochs = args.epochs + 1
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ports = (free_port(), free_port(span=3), free_port())
        data = write_deployment(folder, sizes, epochs=epochs, ports=ports, fixed_keys=False, timeout=60.0)
        t0 = time.perf_counter()
        procs = [start_service(folder, role) for role in ROLES]
        try:
            session = MPCSession.connect(folder / "deploy.toml", key=folder / "keys" / "server.pem")
            connected = time.perf_counter() - t0
            deployed = [_cost(session.evaluate(epoch=e)) for e in range(epochs)]
            session.shutdown()
            for p in procs:
                p.wait(timeout=60)
        finally:
            stop(procs)
        rows["deployed services"] = {"startup": connected, "evaluations": deployed}
        scores = [[model_scores(folder, k, e) for k in range(3)] for e in range(epochs)]
        with MPCSession(data["labels"], make_mechanism("laplace", 1.0, allocation="adaptive"), computing=3,
                        hosts=3) as session:
            local = [_cost(session.evaluate(scores[e])) for e in range(epochs)]
        rows["local session"] = {"startup": None, "evaluations": local}
        if args.before:
            rows["torchrun + clients"] = {"startup": None, "evaluations": [one_evaluation_per_start(
                folder, data["labels"], 0)]}
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"M = {args.samples:,} scores over 3 clients; 3 computing parties and the dealer; radix sort; seconds")
    print(f"{'':>20}  {'start-up':>9}  {'1st eval':>9}  {'per eval':>9}  {'rank step':>9}  {'overhead':>9}  {'max':>6}")
    for name, row in rows.items():
        later = row["evaluations"][1:] or row["evaluations"]
        over = [c["seconds"] - c["rank_step_seconds"] for c in later]
        startup = "-" if row["startup"] is None else f"{row['startup']:.2f}"
        print(f"{name:>20}  {startup:>9}  {row['evaluations'][0]['seconds']:>9.3f}  "
              f"{np.median([c['seconds'] for c in later]):>9.3f}  "
              f"{np.median([c['rank_step_seconds'] for c in later]):>9.3f}  {np.median(over):>9.3f}  {max(over):>6.3f}")
    print("start-up: the services started until the session connected (the local session starts its parties in "
          "its first evaluation; torchrun starts every party for each evaluation). per eval, rank step: medians "
          "after the first; overhead = per eval - rank step (median, max).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
