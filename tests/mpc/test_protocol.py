"""The MPC protocol end to end, against sklearn and the plain-sort protocol.

Each test runs real CrypTen parties as separate local processes (spawned, so
each client process receives only its own data).
"""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from secure_auc.data import ClientData
from secure_auc.dp import NoNoise, RandomizedResponse, StatisticsMechanism
from secure_auc.evaluate import evaluate
from secure_auc.mpc.launch import launch_local
from secure_auc.dp import client_rngs
from secure_auc.dp.rng import client_key
from secure_auc.dp.distributed import DistributedNoise
from secure_auc.mpc.party import PartyConfig
from secure_auc.protocol import Client, ScoresMessage, Server

MECHANISMS = (
    NoNoise(),
    StatisticsMechanism(1.0, allocation="adaptive"),
    RandomizedResponse(1.0),
    StatisticsMechanism(2.0, noise="gaussian", delta=1e-5, allocation="split", sensitivity="global"),
)


def clients_with_ties(sizes, seed, dtype):
    rng = np.random.default_rng(seed)
    out = []
    for k, n in enumerate(sizes):
        if dtype == "float64-ulp":
            # float64 scores 1 ulp apart (not float32-exact: two key limbs), plus exact ties
            base = np.array([1 / 3, np.nextafter(1 / 3, 1), np.nextafter(1 / 3, 0), -0.0, 0.0, 1e-300])
            s = base[rng.integers(0, len(base), n)]
        else:
            s = (rng.integers(0, 6, n) / 6).astype(np.float32).astype(np.float64)  # many ties
        y = (rng.random(n) < 0.5).astype(np.int8)
        out.append(ClientData(s, y, f"client {k}"))
    return out


# the radix sort (default) on every layout; the network on one
@pytest.mark.parametrize(
    "sizes, dtype, sort",
    [
        ([13], "float32", "radix"),  # 2 parties: server + 1 client
        ([1, 6], "float64-ulp", "radix"),  # 3 parties, a client with a single sample, two limbs
        ([5, 1, 11], "float32", "radix"),  # 4 parties, 17 samples (not a power of two)
        ([1, 6], "float64-ulp", "network"),
    ],
)
def test_mpc_equals_sklearn_and_plain(sizes, dtype, sort):
    clients = clients_with_ties(sizes, seed=len(sizes), dtype=dtype)
    y = np.concatenate([c.labels for c in clients])
    s = np.concatenate([c.scores for c in clients])
    assert 0 < y.sum() < len(y)
    seed = 7
    mechanisms = MECHANISMS + (DistributedNoise(1.0, len(clients), honest_fraction=0.5),)
    config = PartyConfig(mechanisms=mechanisms, clients=len(clients), provider="ttp", sort=sort, progress=False)
    keys = [client_key(seed, k) for k in range(len(clients))]
    results = launch_local(clients, config, timeout=60, noise_keys=keys)
    server = results[0]

    # no noise: exactly sklearn's AUC, ties included
    assert abs(float(server.estimates[0].auc) - roc_auc_score(y, s)) <= 1e-12
    assert server.aggregates[0].total == len(y)
    # every mechanism: bit-identical to the plain protocol with the same seed
    for mech, est in zip(MECHANISMS, server.estimates):
        plain = evaluate(clients, mech, protocol="plain", seed=seed)
        assert float(est.auc) == plain.auc, mech
    # distributed noise (MPC only): the opened aggregate is exactly the sum of the clients' noisy shares
    dist = mechanisms[-1]
    roles = [Client(k, c, dist, client_rngs(seed, k)) for k, c in enumerate(clients)]
    for role, twice in zip(roles, Server.rank([ScoresMessage(r.index, r.scores) for r in roles])):
        role.receive_ranks(twice)
    expected = Server.aggregate([r.statistics_message() for r in roles])
    assert server.aggregates[-1] == expected
    assert float(server.estimates[-1].auc) == float(Server(dist).estimate(expected).auc)



def test_cli_mpc_report(capfd):
    from secure_auc.cli import main

    code = main(["evaluate", "--protocol", "mpc", "--samples", "24", "--clients", "2", "--mechanism", "none",
                 "--provider", "tfp", "--json"])
    out = capfd.readouterr()
    assert code == 0, out.err
    import json

    r = json.loads(out.out)
    assert r["protocol"] == "mpc" and r["auc"] == pytest.approx(r["reference_auc"], abs=1e-12)
    assert len(r["bytes_sent_per_party"]) == 3 and all(b > 0 for b in r["bytes_sent_per_party"])
    assert len(r["rounds_per_party"]) == 3 and r["mpc_seconds"] > 0
    assert "rank step: stage" in out.err
    assert "INFO:" not in out.err  # each progress line once, in the CLI's format
