import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTY = ROOT / "parties" / "mpc_party.py"
BIN = Path(sys.executable).parent


def write_clients(tmp_path, sizes, seed=0, distinct=None):
    from secure_auc.data import write_client_csv

    rng = np.random.default_rng(seed)
    paths = []
    for k, n in enumerate(sizes):
        s = rng.random(n).astype(np.float32) if distinct is None else rng.integers(0, distinct, n) / distinct
        y = (rng.random(n) < 0.4).astype(int)
        y[0] = k % 2
        p = tmp_path / f"client{k}.csv"
        write_client_csv(p, s, y)
        paths.append(str(p))
    return paths


def party_env(rank, world, port, addr="127.0.0.1"):
    env = dict(os.environ)
    env.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                "MASTER_ADDR": addr, "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1"})
    return env


@pytest.fixture
def free_port():
    from secure_auc.mpc.launch import free_port as fp

    return fp()
