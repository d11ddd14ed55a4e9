"""The helpers layout: clients as input parties of 2 or 3 computing parties.

Exactness against sklearn and the plain protocol, what every process receives
and opens (computing parties, dealer, client hosts; the same checks as
``test_leakage.py``, with each client in its own host, and their canaries: a
host that sends its statistics or keys unmasked, identity shuffles), and
faults: a client host or helper that dies, a client that never connects.
"""

import os
import signal
import time

import numpy as np
import pytest
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from secure_auc.data import ClientData
from secure_auc.dp import NoNoise
from secure_auc.dp.rng import ClientRngs, client_key
from secure_auc.mpc.launch import MPCError, launch_local
from secure_auc.mpc.party import PartyConfig
from secure_auc.protocol import Client, Server
from secure_auc.protocol.plain import run_plain

from .test_leakage import (_opened_values, client_secrets, dependence, leaks, mechanisms_for, recognisable_clients,
                           true_ranks)

SEED = 5


def tied_clients(sizes, seed=0):
    """Scores on a coarse grid (many ties, across clients too), one float64 client if asked."""
    rng = np.random.default_rng(seed)
    out = []
    for k, n in enumerate(sizes):
        s = np.round(rng.random(n), 2)
        y = (rng.random(n) < 0.4).astype(np.int8)
        y[0] = k % 2
        out.append(ClientData(s, y, f"client {k}"))
    return out


def _plain(clients, mechanism, keys):
    roles = [Client(k, c, mechanism, ClientRngs.from_key(keys[k])) for k, c in enumerate(clients)]
    estimate, aggregate, _ = run_plain(roles, Server(mechanism))
    return estimate, aggregate


@pytest.mark.parametrize("sizes, w, hosts, sort", [
    ([1], 2, 1, "radix"),  # one client, one sample
    ([40, 1, 7, 1, 30], 3, 3, "radix"),  # 5 clients in 3 hosts, one-sample clients
    ([3] * 50, 2, 3, "radix"),  # 50 clients in 3 hosts
    ([25, 2], 3, 2, "network"),  # the bitonic network on the outsourced shares
])
def test_helpers_layout_is_exact(sizes, w, hosts, sort):
    clients = tied_clients(sizes, seed=len(sizes))
    keys = [client_key(SEED, k) for k in range(len(clients))]
    mechanisms = (NoNoise(),) + mechanisms_for(len(clients))[:2]  # none, RR, adaptive Laplace
    config = PartyConfig(mechanisms=mechanisms, clients=len(clients), sort=sort, progress=False, computing=w)
    done = launch_local(clients, config, timeout=60, noise_keys=keys, hosts=hosts, keep_ranks=True)
    assert sorted(done) == sorted([-(h + 1) for h in range(min(hosts, len(clients)))] + list(range(w)))
    scores = np.concatenate([c.scores for c in clients])
    labels = np.concatenate([c.labels for c in clients])
    # every client got exactly its own rows' 2 x mid-ranks (ties included)
    ranks = [r for h in sorted((r for r in done if r < 0), reverse=True) for r in done[h]["ranks"]]
    assert len(ranks) == len(clients)
    assert np.array_equal(np.concatenate(ranks), (2 * (rankdata(scores) - 1)).astype(np.int64))
    server = done[0]
    if len(set(labels)) == 2:
        assert server.estimates[0].auc == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    # the DP estimates are the plain protocol's, bit for bit, with the same client keys
    for mechanism, estimate, aggregate in zip(mechanisms, server.estimates, server.aggregates):
        plain_estimate, plain_aggregate = _plain(clients, mechanism, keys)
        assert aggregate == plain_aggregate
        assert np.array_equal(estimate.auc, plain_estimate.auc, equal_nan=True)
    # every client host's traffic is proportional to its own rows: nothing about the others
    for h in (r for r in done if r < 0):
        assert done[h]["bytes"] < 4096 + 2000 * sum(len(x) for x in done[h]["ranks"])


def _host_of(i):
    return -(i + 1)  # one client per host


def _secrecy_run(sizes, w, *, computing_job=None, host_job=None, monkeypatch=None, seed=None):
    from secure_auc.mpc import input_parties

    clients = recognisable_clients(sizes, seed=len(sizes) + w if seed is None else seed)
    k = len(clients)
    mechanisms = mechanisms_for(k)
    keys = [client_key(SEED, i) for i in range(k)]
    config = PartyConfig(mechanisms=mechanisms, clients=k, progress=False, computing=w)
    if computing_job is not None:
        monkeypatch.setattr(input_parties, "computing_job", computing_job)
    if host_job is not None:
        monkeypatch.setattr(input_parties, "host_job", host_job)
    received: dict = {}
    done = launch_local(clients, config, timeout=60, noise_keys=keys, hosts=k, received=received)
    return clients, mechanisms, keys, done, received


@pytest.mark.parametrize("sizes, w", [([1, 2, 120], 3), ([90, 1], 2)])
def test_no_process_learns_another_partys_secrets(sizes, w):
    clients, mechanisms, keys, done, received = _secrecy_run(sizes, w)
    k = len(clients)
    assert sorted(received) == sorted([-(i + 1) for i in range(k)] + list(range(w + 1)))  # hosts, parties, dealer
    assert all(any(r.op == "input link" for r in received[h]) for h in list(range(w)) + [-(i + 1) for i in range(k)])
    # each host reconstructed its own client's ranks, and no computing party opened any
    offsets = np.cumsum([0] + sizes)
    for i in range(k):
        (mine,) = [x for x in received[_host_of(i)] if x.op == "rank shares"]
        assert np.array_equal(_opened_values(mine), 2 * true_ranks(clients)[offsets[i] : offsets[i + 1]])
    assert not any(x.op in ("rank shares", "open_to_owners") for p in range(w + 1) for x in received[p])
    secrets_by_client, aggregate, aggregates = client_secrets(clients, mechanisms, keys)
    assert done[0].aggregates == aggregates
    assert leaks(received, secrets_by_client, aggregate, owner=_host_of) == []
    found, tested = dependence(received, clients, list(range(w)))
    assert found == [] and tested > 0


def _unmasked_statistics_host_job(*args, **kwargs):
    """A client host that forgets to mask its statistics: the correction party gets them in the clear."""
    import secure_auc.mpc.input_parties as ip
    from secure_auc.mpc.primitives.outside import HostSharing

    original = HostSharing.correction

    def correction(self, x, block):
        return np.array(x, dtype=np.int64) if block == "statistics" else original(self, x, block)

    HostSharing.correction = correction
    return ip.host_job(*args, **kwargs)


@pytest.mark.parametrize("canary", ["statistics", "keys"])
def test_the_search_catches_a_host_that_does_not_mask(monkeypatch, canary):
    """Canary: the same search, on what the input links deliver, finds statistics or keys
    a host sends unmasked (each host's corrections go to party h mod w: host 0's to the
    server)."""
    from .canaries import unmasked_keys_host_job

    job = {"statistics": _unmasked_statistics_host_job, "keys": unmasked_keys_host_job}[canary]
    # statistics large enough to be recognisable
    clients, mechanisms, keys, _, received = _secrecy_run([200, 2], 2, host_job=job, monkeypatch=monkeypatch, seed=9)
    secrets_by_client, aggregate, _ = client_secrets(clients, mechanisms, keys)
    found = leaks(received, secrets_by_client, aggregate, owner=_host_of)
    assert any(f.startswith("process 0 holds") and "client 0's" in f for f in found), found
    assert not any("client 1's" in f and f.startswith("process 0") for f in found), found  # host 1's go to party 1


def test_the_checks_catch_identity_shuffles_among_helpers(monkeypatch):
    """Canary: with the radix sort's shuffles the identity, the computing parties open every
    row's rank: the opened values hold the clients' ranks and depend on the scores."""
    from .canaries import identity_shuffle_computing_job

    clients, mechanisms, keys, _, received = _secrecy_run([90, 1], 2, computing_job=identity_shuffle_computing_job,
                                                          monkeypatch=monkeypatch)
    secrets_by_client, aggregate, _ = client_secrets(clients, mechanisms, keys)
    found = leaks(received, secrets_by_client, aggregate, owner=_host_of)
    assert any(f.startswith("process 0 holds") and "client 0's" in f for f in found), found
    assert dependence(received, clients, [0, 1])[0] != []


# ----------------------------------------------------------------- faults


def _host_that_dies(h, *args, **kwargs):
    """Client host 1 is killed (SIGKILL) once it has the public parameters."""
    import secure_auc.mpc.input_parties as ip
    from secure_auc.mpc.comm.inlinks import InputLink

    original = InputLink.recv_obj

    def recv_obj(self, channel, **kw):
        out = original(self, channel, **kw)
        if h == 1 and channel == ip.CH_PUBLIC:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    InputLink.recv_obj = recv_obj
    return ip.host_job(h, *args, **kwargs)


def _host_that_never_connects(h, *args, **kwargs):
    import secure_auc.mpc.input_parties as ip

    if h == 1:
        time.sleep(600)
    return ip.host_job(h, *args, **kwargs)


def _helper_that_dies(rank, *args, **kwargs):
    """Helper 1 is killed once the client hosts are connected."""
    import secure_auc.mpc.input_parties as ip

    original = ip.compute_evaluation

    def compute(*a, **k):
        if rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*a, **k)

    ip.compute_evaluation = compute
    return ip.computing_job(rank, *args, **kwargs)


@pytest.mark.parametrize("fault, who", [
    ("host_job", "client 1"),  # a client host killed mid-run
    ("never", "client 1"),  # a client that never connects
    ("computing_job", "helper 1"),  # a helper killed mid-run
])
def test_faults_are_named_within_the_timeout(monkeypatch, fault, who):
    import multiprocessing

    from secure_auc.mpc import input_parties

    timeout = 20 if fault == "computing_job" else 10  # long enough for every process to start on a loaded
    # machine: the clients' wait for the server's port counts from their own start, and a slow start must not
    # be taken for the fault (the server opens it once the computing parties' links stand and their
    # rendezvous stores are closed)
    if fault == "host_job":
        monkeypatch.setattr(input_parties, "host_job", _host_that_dies)
    elif fault == "never":
        monkeypatch.setattr(input_parties, "host_job", _host_that_never_connects)
    else:
        monkeypatch.setattr(input_parties, "computing_job", _helper_that_dies)
    clients = tied_clients([20, 5, 9])
    config = PartyConfig(mechanisms=(NoNoise(),), clients=3, progress=False, computing=3)
    start = time.monotonic()
    with pytest.raises(MPCError) as err:
        launch_local(clients, config, timeout=timeout, hosts=3)
    took = time.monotonic() - start
    assert who in str(err.value), str(err.value)
    assert "\n" not in str(err.value)
    assert took < timeout + 60, took  # start-up of the processes (slow on a loaded machine), then the timeout
    assert multiprocessing.active_children() == []
