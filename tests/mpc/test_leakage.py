"""What each party process actually receives in the MPC protocol.

Every process (server, clients, dealer) records every buffer it receives at
the ``torch.distributed`` layer (:func:`secure_auc.mpc.audit.record_received`).
The data are chosen so that a leak is recognisable: distinct scores, the
one- and two-sample clients holding the highest scores (their doubled ranks,
>= M, cannot be mistaken for an opened permutation's entries).  For every
client we then search the bytes every *other* process received for any
fragment of that client's secrets -- three consecutive values of its scores
or ranks (the whole vector for clients with fewer samples), or any single one
of its statistics, noise values or noise key -- in several encodings (int64,
int32, float64, float32, 16-bit fixed point, the encoded sort keys), and the
server's aggregate in every process but the server.

The canary tests put the old leaks back (CrypTen's ``get_plain_text(dst)``
as the opening to one party, CrypTen's own randomness, a seed shared with the
server, a broadcast float32 bit) and check that the same searches catch them.
"""

import pickle
import struct

import numpy as np
import pytest
from scipy.stats import rankdata

from secure_auc.data import ClientData
from secure_auc.dp import NoNoise, RandomizedResponse, StatisticsMechanism
from secure_auc.dp.distributed import DistributedNoise
from secure_auc.dp.rng import ClientRngs, client_key, client_rngs
from secure_auc.mpc.encoding import encode_keys
from secure_auc.mpc.launch import MPCError, launch_local, spawn_parties
from secure_auc.mpc.party import PartyConfig, run_party
from secure_auc.protocol import Client, ScoresMessage, Server
from secure_auc.protocol.messages import FRACTION_BITS

SEED = 11


def recognisable_clients(sizes, seed=0):
    """Distinct float32 scores; the clients with one or two samples get the highest ones."""
    rng = np.random.default_rng(seed)
    m = sum(sizes)
    scores = np.sort(rng.choice(np.arange(1, 1 << 20), size=m, replace=False) / (1 << 20)).astype(np.float32)
    scores = scores.astype(np.float64)[::-1]  # descending
    order = sorted(range(len(sizes)), key=lambda k: sizes[k])  # smallest clients first
    out, start = [None] * len(sizes), 0
    for k in order:
        s = rng.permutation(scores[start : start + sizes[k]])
        y = (rng.random(sizes[k]) < 0.5).astype(np.int8)
        y[0] = k % 2
        out[k] = ClientData(s, y, f"client {k}")
        start += sizes[k]
    return out


def mechanisms_for(k):
    return (RandomizedResponse(1.0), StatisticsMechanism(1.0, allocation="adaptive"),
            DistributedNoise(1.0, k, honest_fraction=0.5))


def _vector_patterns(values: np.ndarray, kinds) -> dict[bytes, int]:
    """Byte patterns (-> item size) of every window of 3 consecutive values (or the whole
    vector if shorter)."""
    pats = {}
    n = len(values)
    w = min(3, n)
    for kind in kinds:
        if kind == "int64":
            enc = np.asarray(values, dtype=np.int64)
        elif kind == "int32":
            enc = np.asarray(values, dtype=np.int64).astype(np.int32)
        elif kind == "float64":
            enc = np.asarray(values, dtype=np.float64)
        elif kind == "float32":
            enc = np.asarray(values, dtype=np.float32)
        elif kind == "fixed16":
            enc = np.round(np.asarray(values, dtype=np.float64) * (1 << 16)).astype(np.int64)
        else:
            raise ValueError(kind)
        if enc.itemsize * w < 8:  # a 4-byte pattern could match random bytes by chance
            continue
        raw = enc.tobytes()
        size = enc.itemsize
        for i in range(n - w + 1):
            pats[raw[i * size : (i + w) * size]] = size
    return pats


def _scalar_patterns(values) -> dict[bytes, int]:
    """int64 bytes of each value that is recognisable (not a small number)."""
    return {struct.pack("<q", int(v)): 8 for v in values if abs(int(v)) >= 1 << 16}


def client_secrets(clients, mechanisms, keys):
    """Per client: every byte pattern that must never reach another process."""
    m = sum(len(c) for c in clients)
    all_scores = np.concatenate([c.scores for c in clients])
    twice = (2 * (rankdata(all_scores) - 1)).astype(np.int64)
    secrets_by_client, offset = [], 0
    exact = {}
    roles_by_mech = []
    for mech in (NoNoise(),) + tuple(mechanisms):
        roles = [Client(k, c, mech, ClientRngs.from_key(keys[k])) for k, c in enumerate(clients)]
        for role, msg in zip(roles, Server.rank([ScoresMessage(r.index, r.scores) for r in roles])):
            role.receive_ranks(msg)
        roles_by_mech.append([r.statistics_message() for r in roles])
    exact = roles_by_mech[0]
    aggregates = [Server.aggregate(msgs) for msgs in roles_by_mech[1:]]
    for k, c in enumerate(clients):
        n = len(c)
        tw = twice[offset : offset + n]
        offset += n
        pats = {}
        pats |= _vector_patterns(c.scores, ("float64", "float32", "fixed16"))
        pats |= _vector_patterns(encode_keys(c.scores, 1)[:, 0], ("int64", "int32"))
        pats |= _vector_patterns(tw, ("int64", "int32", "float64", "fixed16"))
        pats |= _vector_patterns(tw / 2.0, ("float64", "fixed16"))
        stats = []
        for mech_msgs, mech in zip(roles_by_mech[1:], mechanisms):
            msg = mech_msgs[k]
            stats += [msg.local_sum_fixed, msg.local_p_fixed]
            if not isinstance(mech, RandomizedResponse):  # noise = noisy - exact statistics
                stats += [msg.local_sum_fixed - exact[k].local_sum_fixed, msg.local_p_fixed - exact[k].local_p_fixed]
        stats += [exact[k].local_sum_fixed, exact[k].local_p_fixed]
        pats |= _scalar_patterns(stats)
        pats[int(keys[k]).to_bytes(16, "little")] = 8
        secrets_by_client.append(pats)
    aggregate = _scalar_patterns([v for a in aggregates for v in (a.global_sum_fixed, a.positives_fixed)])
    assert m > 0
    return secrets_by_client, aggregate, aggregates


def _windows(data: bytes, item: int, count: int) -> set[bytes]:
    return {data[i : i + item * count] for i in range(0, len(data) - item * count + 1, item)}


_ITEM = {"int64": 8, "float64": 8, "int32": 4, "float32": 4}


def _found(records, pats: dict[bytes, int]) -> set[bytes]:
    """The patterns (bytes -> item size) present in the records.  A numeric buffer is
    read as its own dtype: a pattern of that item size is looked for at every offset
    that is a multiple of it (so int64 patterns in int64 buffers, float32 and int32
    patterns in 4-byte buffers).  Byte buffers (pickled objects) are searched for every
    pattern at every offset."""
    hits = set()
    for r in records:
        if r.dtype in ("int8", "uint8"):
            hits |= {p for p in pats if p in r.data}
            continue
        item = _ITEM.get(r.dtype)
        group = {p for p, size in pats.items() if size == item}
        for length in {len(p) for p in group}:
            hits |= group & _windows(r.data, item, length // item)
    return hits


def leaks(received: dict, secrets_by_client, aggregate, server=0) -> list[str]:
    """Every (receiver, whose secret) pair where a fragment was found."""
    found = []
    for rank, records in received.items():
        for k, pats in enumerate(secrets_by_client):
            if rank == k + 1:
                continue  # a client may hold its own secrets
            hits = _found(records, pats)
            if hits:
                found.append(f"rank {rank} received {len(hits)} fragment(s) of client {k}'s secrets")
        if rank != server:
            hits = _found(records, aggregate)
            if hits:
                found.append(f"rank {rank} received {len(hits)} value(s) of the server's aggregate")
    return found


def _run(sizes, sort, job=None):
    clients = recognisable_clients(sizes, seed=len(sizes))
    mechanisms = mechanisms_for(len(clients))
    keys = [client_key(SEED, k) for k in range(len(clients))]
    config = PartyConfig(mechanisms=mechanisms, clients=len(clients), provider="ttp", sort=sort, progress=False)
    received: dict = {}
    if job is None:
        results = launch_local(clients, config, timeout=60, noise_keys=keys, received=received)
    else:
        per_rank = {0: (config, None)} | {r: (config, clients[r - 1], keys[r - 1]) for r in range(1, len(clients) + 1)}
        # the old transport too: plain gloo, where a reduce is possible
        results = spawn_parties(job, per_rank, len(clients) + 1, provider="ttp", timeout=60, received=received,
                                insecure_links=True)
    return clients, mechanisms, keys, results, received


@pytest.mark.parametrize("sizes, sort", [
    ([1, 2, 300], "radix"),  # 3 clients, one- and two-sample clients
    ([200, 1], "network"),  # 2 clients, the bitonic network
    ([60, 2, 9, 250], "radix"),  # 4 clients
])
def test_no_process_receives_another_partys_secrets(sizes, sort):
    clients, mechanisms, keys, results, received = _run(sizes, sort)
    world = len(clients) + 2  # server, clients, dealer
    assert sorted(received) == list(range(world))
    assert all(len(received[r]) > 0 for r in received)
    # the record is complete: every frame that reached a process was taken by a recorded receive
    assert [(r, x.src, x.tag) for r in received for x in received[r] if x.op == "unclaimed frame"] == []
    secrets_by_client, aggregate, aggregates = client_secrets(clients, mechanisms, keys)
    # the run is the one the secrets were computed for: the server opened exactly these aggregates
    assert results[0].aggregates == aggregates
    assert leaks(received, secrets_by_client, aggregate) == []


def test_clients_never_broadcast_anything_but_public_parameters():
    """The clients' only broadcasts are the public configuration and their sample counts
    (the float32 bit is no longer one of them: only whether *any* client needs two limbs
    is opened)."""
    clients, mechanisms, keys, results, received = _run([3, 4], "radix")
    config = PartyConfig(mechanisms=mechanisms, clients=len(clients), provider="ttp", sort="radix", progress=False)
    allowed = [config.public()] + [len(c) for c in clients]
    checked = 0
    for rank, records in received.items():
        for r in records:
            if r.op == "broadcast" and r.src is not None and 1 <= r.src <= len(clients) and r.dtype == "int8":
                assert pickle.loads(r.data) in allowed, (rank, r.src, pickle.loads(r.data))
                checked += 1
    assert checked == 2 * len(clients) * len(clients)  # config and size, from each client, at each other party


def test_the_server_cannot_recompute_a_clients_noise():
    """Everything the server process was given (its arguments, pickled as the launcher
    sends them) and everything it received holds neither a client's noise key nor a
    seed it could be derived from: trying every integer in the server's configuration as
    the seed does not give any client's noise."""
    clients, mechanisms, keys, results, received = _run([4, 5], "radix")
    config = PartyConfig(mechanisms=mechanisms, clients=len(clients), provider="ttp", sort="radix", progress=False)
    given = pickle.dumps((config, None))
    blob = given + b"".join(r.data for r in received[0])
    for key in keys:
        assert int(key).to_bytes(16, "little") not in blob
    candidates = {v for v in vars(config).values() if isinstance(v, int) and not isinstance(v, bool)}
    mech = mechanisms[1]
    for k, c in enumerate(clients):
        actual = Client(k, c, mech, ClientRngs.from_key(keys[k]))
        actual.set_ranks(np.zeros(len(c)), sum(len(x) for x in clients))
        truth = actual.statistics_message()
        for seed in candidates:
            guess = Client(k, c, mech, client_rngs(seed, k))
            guess.set_ranks(np.zeros(len(c)), sum(len(x) for x in clients))
            assert guess.statistics_message() != truth


# ----------------------------------------------------------------- canaries: the old leaks are caught


def _reduce_opening_job(rank, config, data, noise_key=None):
    """The protocol with the old opening to one party: CrypTen's get_plain_text(dst), a gloo reduce."""
    import secure_auc.mpc.ranks as ranks
    from secure_auc.mpc.comm import backend

    def open_to_owners(share, sizes, owners, *, shape=None):
        mine, offset = [], 0
        for n_k, owner in zip(sizes, owners):
            t = share[offset : offset + n_k].contiguous()
            offset += n_k
            out = backend.comm().reduce(t, owner)  # what get_plain_text(dst=owner) does
            if backend.rank() == owner:
                mine.append(out)
        return None if not mine else (mine[0] if len(mine) == 1 else __import__("torch").cat(mine))

    ranks.open_to_owners = open_to_owners
    return run_party(rank, config, data, noise_key)


def test_the_search_catches_the_old_reduce_opening():
    clients, mechanisms, keys, results, received = _run([40, 1, 25], "radix", job=_reduce_opening_job)
    secrets_by_client, aggregate, _ = client_secrets(clients, mechanisms, keys)
    found = leaks(received, secrets_by_client, aggregate)
    assert any("rank 0 received" in f for f in found), found  # the server holds clients' ranks


def _cryptensor_job(rank):
    import torch

    from secure_auc.mpc.comm.backend import crypten

    return crypten.cryptensor(torch.arange(4), src=1, precision=0).share  # CrypTen's PRZS sharing


def test_crypten_randomness_is_refused_in_every_party():
    with pytest.raises(MPCError, match="Mersenne Twister"):
        spawn_parties(_cryptensor_job, {}, 2, provider="ttp", timeout=30)
