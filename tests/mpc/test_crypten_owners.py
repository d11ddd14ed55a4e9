"""Scores held as a CrypTen MPCTensor by 2 or 3 computing parties, labels held by input
parties (:mod:`secure_auc.mpc.crypten.owners`): real processes, each label owner its own,
linked to every computing party.

Exactness (ranks against scipy's rankdata on the decoded scores, the AUC without noise
against scikit-learn's, RR and Laplace bit for bit against the plain protocol with the
same noise keys), what every process received and opened (the audit of
``test_leakage.py``, with a canary that opens every owner all the ranks), and bad input
named.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from secure_auc.data import ClientData
from secure_auc.dp import NoNoise, RandomizedResponse, StatisticsMechanism
from secure_auc.dp.rng import ClientRngs, client_key
from secure_auc.mpc.audit import OPENINGS
from secure_auc.mpc.launch import MPCError, spawn_parties
from secure_auc.protocol import Client, Server
from secure_auc.protocol.plain import run_plain

from .test_leakage import Secret, _opened_values, client_secrets, dependence, leaks, mechanisms_for, true_ranks

SEED = 23
SCALE = 1 << 16  # CrypTen's fixed point


def mechanisms():
    return (NoNoise(), RandomizedResponse(1.0), StatisticsMechanism(1.0, allocation="adaptive"))


# ----------------------------------------------------------------- jobs (run inside each process)


def _computing(rank, parts, sizes, mechs, endpoint, identity_raw, owner_keys, timeout, method):
    """x = the sum of every party's part (each shared by its party with ``src``: no party
    knows x), evaluated with the labels at the input parties."""
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.comm.roster import identity_from_bytes
    from secure_auc.mpc.crypten import evaluate_mpctensor_for_owners, install, owner_links

    crypten = backend.crypten
    with install(), owner_links(tuple(endpoint), identity_from_bytes(identity_raw), owner_keys,
                                timeout=timeout) as links:
        if parts[rank].dtype == np.int64:  # int64 shares of 64-bit fixed-point values (test data)
            from crypten.mpc import MPCTensor

            x = MPCTensor.from_shares(torch.from_numpy(parts[rank]), precision=16)
            return evaluate_mpctensor_for_owners(x, links, sizes=sizes, mechanisms=mechs, method=method)
        x = None
        for r in range(backend.world_size()):
            t = crypten.cryptensor(torch.from_numpy(parts[r]) if r == rank else torch.empty(len(parts[r]),
                                                                                           dtype=torch.float64),
                                   src=r)
            x = t if x is None else x + t
        return evaluate_mpctensor_for_owners(x, links, sizes=sizes, mechanisms=mechs, method=method)


def _owner_never_connects(h, *args, **kwargs):
    from secure_auc.mpc.crypten.owners import label_owner_job

    if h == 1:
        time.sleep(600)
    return label_owner_job(h, *args, **kwargs)


def _leaky_computing(rank, *args):
    """Canary: every owner is sent the shares of every row's rank."""
    import secure_auc.mpc.crypten.owners as owners
    from secure_auc.mpc.input_parties import CH_RANKS

    def send_everything(links, twice, rows):
        everything = twice.numpy().astype(np.int32)
        for h in range(len(links)):
            links[h].send_array(CH_RANKS, everything, np.int32)

    owners.send_ranks = send_everything
    return _computing(rank, *args)


def _leaky_owner(h, labels, owners_count, mechs, key, parties, identity_raw, timeout, method, sizes):
    """Canary's other end: the owner opens every row's rank, then keeps its own rows'."""
    import secure_auc.mpc.crypten.owners as owners
    from secure_auc.mpc.input_parties import receive_ranks

    start = sum(sizes[:h])
    owners.receive_ranks = lambda links, n: receive_ranks(links, sum(sizes))[start : start + n]
    return owners.label_owner_job(h, labels, owners_count, mechs, key, parties, identity_raw, timeout, method)


# ----------------------------------------------------------------- the launcher


def split_parts(scores, world, rng):
    """Additive parts of the scores, one per computing party, each exact in fixed point."""
    parts = [rng.integers(-200, 200, len(scores)) / 64.0 for _ in range(world - 1)]
    return [scores - sum(parts)] + parts


def decoded(parts) -> np.ndarray:
    """The MPCTensor's value: CrypTen encodes each part as trunc(part x 2^16)."""
    return sum(np.trunc(p * SCALE).astype(np.int64) for p in parts) / SCALE


def run(w, parts, sizes, labels, keys, mechs, *, provider, method="radix", timeout=60.0, received=None,
        computing_job=_computing, owner_job=None, owner_extra=()):
    """Every computing party (``computing_job``) and every label owner (``owner_job``) in its
    own process; returns the results: the computing parties' by rank, owner h's under -(h+1)."""
    from secure_auc.mpc.comm.inlinks import PortBoard
    from secure_auc.mpc.comm.roster import describe_helpers_rank, ephemeral_helpers_roster, identity_bytes
    from secure_auc.mpc.crypten.owners import describe_owner, label_owner_job

    k = len(labels)
    roster, world_keys, owner_keys = ephemeral_helpers_roster(w - 1, provider == "ttp", k)
    board = PortBoard(w)
    parties = [("127.0.0.1", board, roster.key(r)) for r in range(w)]
    per_rank = {r: (parts, sizes, mechs, ("127.0.0.1", board), identity_bytes(world_keys[r]), list(roster.clients),
                    timeout, method) for r in range(w)}
    per_host = [(labels[h], k, mechs, keys[h], parties, identity_bytes(owner_keys[h]), timeout, method) + owner_extra
                for h in range(k)]

    def describe(r):
        return describe_owner(-r - 1) if r < 0 else describe_helpers_rank(r, w - 1)

    return spawn_parties(computing_job, per_rank, w, provider=provider, timeout=timeout, deadline=240,
                         received=received, identities=(roster, world_keys), describe=describe,
                         host_job=owner_job or label_owner_job, per_host=per_host)


def _plain(scores, labels, sizes, mechanism, keys):
    parts = np.split(scores, np.cumsum(sizes)[:-1])
    roles = [Client(k, ClientData(p, y), mechanism, ClientRngs.from_key(keys[k])) for k, (p, y) in
             enumerate(zip(parts, labels))]
    estimate, aggregate, _ = run_plain(roles, Server(mechanism))
    return estimate, aggregate


# ----------------------------------------------------------------- exactness


@pytest.mark.parametrize("w, sizes, provider, method, wide", [
    (2, [170, 130], "tfp", "radix", False),  # 2 computing parties, 2 owners
    (3, [150, 1, 209], "ttp", "radix", False),  # 3 computing parties and the dealer, 3 owners (one with one row)
    (2, [60, 90], "tfp", "network", False),  # the bitonic network on the converted keys
    (3, [140, 161], "ttp", "radix", True),  # the whole 64-bit fixed-point range: two-limb keys
])
def test_owners_as_input_parties_match_sklearn_and_the_plain_protocol(w, sizes, provider, method, wide):
    from .test_crypten_bridge import int_parts, wide_values

    rng = np.random.default_rng(len(sizes) + w)
    m = sum(sizes)
    if wide:
        v = wide_values(m, rng)
        scores = v.astype(np.float64) / SCALE  # order and ties kept (test_crypten_bridge.wide_values)
        parts = int_parts(v, w, rng)
    else:
        scores = rng.integers(-24, 24, m) / 8.0  # many ties (across owners too), negative scores
        scores[:4] = [-(2.0**14) + 2.0**-16, 2.0**14 - 2.0**-16, 2.0**-16, -(2.0**-16)]  # the 1-limb range's ends
        parts = split_parts(scores, w, rng)
        assert np.array_equal(decoded(parts), scores)
    labels = [(rng.random(n) < 0.4).astype(np.int8) for n in sizes]
    labels[0][:2] = [0, 1]
    keys = [client_key(SEED, k) for k in range(len(sizes))]
    done = run(w, parts, sizes, labels, keys, mechanisms(), provider=provider, method=method)
    assert all(done[r] is None for r in range(1, w))
    estimates, aggregates = done[0]
    # each owner got exactly its own rows' 2 x mid-ranks, ties included
    want = (2 * (rankdata(scores) - 1)).astype(np.int64)
    offsets = np.cumsum([0] + sizes)
    for h in range(len(sizes)):
        assert np.array_equal(done[-(h + 1)]["ranks"], want[offsets[h] : offsets[h + 1]]), h
        assert done[-(h + 1)]["bytes"] < 8192 + 64 * sizes[h]  # proportional to its own rows
    y = np.concatenate(labels)
    assert float(estimates[0].auc) == pytest.approx(roc_auc_score(y, scores), abs=1e-12)
    for mechanism, estimate, aggregate in zip(mechanisms(), estimates, aggregates):
        plain_estimate, plain_aggregate = _plain(scores, labels, sizes, mechanism, keys)
        assert aggregate == plain_aggregate, mechanism
        assert np.array_equal(estimate.auc, plain_estimate.auc, equal_nan=True), mechanism
        assert np.array_equal(estimate.raw_auc, plain_estimate.raw_auc, equal_nan=True), mechanism


# ----------------------------------------------------------------- what each process receives and opens


def recognisable(sizes, seed, scale=16.0):
    """Distinct scores k / 2^20 x ``scale`` (16: in [0, 16), exact in CrypTen's fixed point),
    the one- and two-row owners holding the highest; each owner's labels."""
    from .test_leakage import recognisable_clients

    clients = recognisable_clients(sizes, seed=seed)
    return [ClientData(c.scores * scale, c.labels, f"client {k}") for k, c in enumerate(clients)]


def label_forms(labels: np.ndarray) -> dict:
    """Byte patterns (any offset) of an owner's labels: 32 consecutive labels as bytes, 64 as
    packed bits (at every bit offset); none for fewer rows."""
    labels = np.asarray(labels, dtype=np.int8)
    pats = {}
    for i in range(len(labels) - 31):
        pats[labels[i : i + 32].tobytes()] = 1
    for i in range(len(labels) - 63):
        pats[np.packbits(labels[i : i + 64].astype(np.uint8)).tobytes()] = 1
    return pats


def _audited_run(sizes, w, provider, *, wide=False, computing_job=_computing, owner_job=None, owner_extra=()):
    from .test_crypten_bridge import int_parts

    clients = recognisable(sizes, seed=len(sizes) + w, scale=2.0**34 if wide else 16.0)
    k = len(clients)
    mechs = mechanisms_for(k)
    keys = [client_key(SEED, i) for i in range(k)]
    scores = np.concatenate([c.scores for c in clients])
    if wide:  # scores up to 2^34: two-limb keys
        parts = int_parts(np.round(scores * SCALE).astype(np.int64), w, np.random.default_rng(w))
    else:
        parts = split_parts(scores, w, np.random.default_rng(w))
        assert np.array_equal(decoded(parts), scores)
    received: dict = {}
    done = run(w, parts, sizes, [c.labels for c in clients], keys, mechs, provider=provider, received=received,
               computing_job=computing_job, owner_job=owner_job, owner_extra=owner_extra)
    secrets_by_client, aggregate, aggregates = client_secrets(clients, mechs, keys)
    for secret, c in zip(secrets_by_client, clients):
        secret.patterns |= label_forms(c.labels)
    return clients, done, received, secrets_by_client, aggregate, aggregates


def _owner(h):
    return -(h + 1)


@pytest.mark.parametrize("sizes, w, provider, wide", [
    ([1, 2, 300], 3, "ttp", False),
    ([200, 90], 2, "tfp", False),
    ([2, 250], 2, "tfp", True),  # beyond [-2^14, 2^14): two-limb keys, B2A of the high bits
])
def test_no_process_learns_another_partys_labels_ranks_or_noise(sizes, w, provider, wide):
    clients, done, received, secrets_by_client, aggregate, aggregates = _audited_run(sizes, w, provider, wide=wide)
    k = len(clients)
    computing = list(range(w)) + ([w] if provider == "ttp" else [])  # the dealer too
    assert sorted(received) == sorted([_owner(h) for h in range(k)] + computing)
    # the run is the one the secrets were computed for: the server opened exactly these aggregates
    assert done[0][1] == aggregates
    # each owner received only over its links, and opened its own rows' ranks and nothing else
    offsets = np.cumsum([0] + sizes)
    ranks = 2 * true_ranks(clients)
    for h in range(k):
        records = received[_owner(h)]
        assert {x.op for x in records} == {"input link", "rank shares"}, h
        (mine,) = [x for x in records if x.op in OPENINGS]
        assert np.array_equal(_opened_values(mine), ranks[offsets[h] : offsets[h + 1]]), h
    # no computing party (nor the dealer) opened any rank; only the server opened the aggregate
    assert not any(x.op in ("rank shares", "open_to_owners") for p in computing for x in received[p])
    assert [p for p in computing if any(x.op == "open_to" for x in received[p])] == [0]
    # nobody holds another's labels, scores, ranks, statistics, noise or key; the aggregate only at the server
    assert leaks(received, secrets_by_client, aggregate, owner=_owner) == []
    # the values opened to every computing party are independent of the scores
    found, tested = dependence(received, clients, list(range(w)))
    assert found == [] and tested > 0


def test_the_audit_catches_every_rank_opened_to_every_owner():
    """Canary: with every row's rank shares sent to every owner, the same search finds the
    other owners' ranks in each owner's openings."""
    sizes = [150, 120]
    clients, _, received, secrets_by_client, aggregate, _ = _audited_run(
        sizes, 2, "tfp", computing_job=_leaky_computing, owner_job=_leaky_owner, owner_extra=(sizes,))
    found = leaks(received, secrets_by_client, aggregate, owner=_owner)
    assert any(f.startswith("process -1 holds") and "client 1's" in f for f in found), found
    assert any(f.startswith("process -2 holds") and "client 0's" in f for f in found), found


# ----------------------------------------------------------------- bad input, named


@pytest.mark.parametrize("case, expected", [
    ("sizes", "sizes [20, 25] must be positive and add up to the 40 scores of the MPCTensor"),
    ("label count", "label owner 1 holds 19 labels but its block of the MPCTensor has 20 rows"),
    ("label value", "label owner 0 failed: label owner 0: labels[3] is 2: labels must be 0 or 1"),
    ("mechanisms", "label owner 1 was started with different parameters: mechanisms="),
    ("never connects", "label owner 1 never connected to "),  # the server or the helper, within 6 s
])
def test_bad_input_is_one_error_naming_the_party(case, expected):
    import multiprocessing

    rng = np.random.default_rng(1)
    scores = rng.integers(-8, 8, 40) / 4.0
    parts = split_parts(scores, 2, rng)
    sizes, counts = [20, 20], [20, 20]
    if case == "sizes":
        sizes, counts = [20, 25], [20, 25]
    if case == "label count":
        counts = [20, 19]
    labels = [(rng.random(n) < 0.5).astype(np.int8) for n in counts]
    if case == "label value":
        labels[0][3] = 2
    owner_job = {"never connects": _owner_never_connects, "mechanisms": _other_mechanisms_job}.get(case)
    # 6 s: the wait that expires for the owner that never connects; the others are named as soon as the
    # parties meet, and a loaded machine may take longer than 6 s to start the server
    timeout = 6 if case == "never connects" else 30
    start = time.monotonic()
    with pytest.raises(MPCError) as err:
        run(2, parts, sizes, labels, [None, None], [RandomizedResponse(1.0)], provider="tfp", timeout=timeout,
            owner_job=owner_job)
    took = time.monotonic() - start
    assert expected in str(err.value), str(err.value)
    if case == "never connects":
        assert "within 6 s" in str(err.value), str(err.value)
    assert "\n" not in str(err.value)
    assert took < timeout + 60, took  # start-up of the processes (slow on a loaded machine), then the timeout
    assert multiprocessing.active_children() == []


def _other_mechanisms_job(h, labels, owners, mechs, *args):
    """Owner 1 was given another epsilon."""
    from secure_auc.mpc.crypten.owners import label_owner_job

    return label_owner_job(h, labels, owners, [RandomizedResponse(2.0)] if h == 1 else mechs, *args)


def test_the_label_forms_are_found_where_they_are():
    """The search for labels finds an owner's labels sent as bytes or packed bits among
    other bytes, and nothing in random bytes."""
    rng = np.random.default_rng(3)
    labels = (rng.random(100) < 0.5).astype(np.int8)
    secret = Secret(label_forms(labels))
    noise = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
    assert secret.search(noise[:17] + labels[40:80].tobytes() + noise, aligned=False)
    assert secret.search(noise[:5] + np.packbits(labels[3:3 + 80].astype(np.uint8)).tobytes() + noise, aligned=False)
    assert not secret.search(noise, aligned=False)
