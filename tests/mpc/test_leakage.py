"""What each party process receives and learns in the MPC protocol.

Every process (server, clients, dealer) records every buffer it receives at
the ``torch.distributed`` layer and every value it obtains by an opening
(:func:`secure_auc.mpc.audit.record_received`).  The data are chosen so that a
leak is recognisable: distinct scores, the one- and two-sample clients holding
the highest scores (their doubled ranks, >= M, cannot be mistaken for an
opened permutation's entries).  For every client we then search what every
*other* process received and opened for any form of that client's secrets
(:func:`client_secrets`):

* its scores (float64, float32, 16-bit fixed point), its sort keys (one limb,
  two limbs, each limb alone), its ranks (0- and 1-based, doubled, fixed
  point, as floats), as int64 or int32 words and packed in 2 or 3 bytes as the
  low-bits openings send them: in received bytes, a few consecutive values
  (the whole vector for clients with fewer samples); in opened values, enough
  consecutive values that chance cannot explain a match;
* any single one of its statistics, noise values or noise key, and the
  server's aggregate in every process but the server.

Independently of any encoding, :func:`dependence` tests that every value
opened to every party is independent of the scores (rank correlation of each
opened vector with the true ranks at chance level over the whole run).

The canary tests put leaks in (:mod:`.canaries`: identity shuffles, the ranks
opened to every party; CrypTen's ``get_plain_text(dst)`` as the opening to one
party; CrypTen's own randomness, a seed shared with the server, a broadcast
float32 bit) and check that the same checks catch them.
"""

import pickle
import functools
import struct
from dataclasses import dataclass, field

import numpy as np
import pytest
from scipy.stats import chi2, norm, rankdata, spearmanr

from secure_auc.data import ClientData
from secure_auc.dp import NoNoise, RandomizedResponse, StatisticsMechanism
from secure_auc.dp.distributed import DistributedNoise
from secure_auc.dp.rng import ClientRngs, client_key, client_rngs
from secure_auc.mpc.audit import OPENINGS
from secure_auc.mpc.encoding import encode_keys, is_float32_exact
from secure_auc.mpc.launch import MPCError, launch_local, spawn_parties
from secure_auc.mpc.party import PartyConfig, run_party
from secure_auc.mpc.ranks import midrank_bits
from secure_auc.mpc.sort import RadixSort
from secure_auc.protocol import Client, ScoresMessage, Server

SEED = 11


def recognisable_clients(sizes, seed=0, float64=False):
    """Distinct scores (float32, or float64 ones that need two key limbs); the clients
    with one or two samples get the highest ones."""
    rng = np.random.default_rng(seed)
    m = sum(sizes)
    scores = np.sort(rng.choice(np.arange(1, 1 << 20), size=m, replace=False) / (1 << 20)).astype(np.float32)
    scores = scores.astype(np.float64)[::-1]  # descending
    if float64:
        scores = scores + rng.random(m) * 2.0**-22  # still distinct and in the same order, not float32
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


# ----------------------------------------------------------------- what a secret looks like


@dataclass
class Secret:
    """One party's secrets in every form they take.

    ``patterns``: byte patterns (-> alignment in bytes, 1 = any offset) searched in the
    bytes a process received; ``vectors``: integer vectors (int64) whose windows of
    consecutive values are searched in the values a process opened; ``scalars``: single
    integers searched in opened values too."""

    patterns: dict = field(default_factory=dict)
    vectors: list = field(default_factory=list)
    scalars: list = field(default_factory=list)
    _heads: dict = field(default_factory=dict, repr=False)
    _windows: dict = field(default_factory=dict, repr=False)
    _hashes: dict = field(default_factory=dict, repr=False)

    def search(self, data: bytes, aligned: bool) -> set[bytes]:
        """The patterns present in ``data`` (each at an offset that is a multiple of its
        alignment if ``aligned``, else at any offset): the first 8 bytes of each are looked
        up among the 8-byte words at every offset (a table of their low 16 bits first, then
        the sorted heads), then its next 8 bytes, then the whole pattern."""
        hits = set()
        for o in range(8):
            if (aligned, o) not in self._heads:
                heads: dict = {}
                for p, align in self.patterns.items():
                    if not aligned or o % align == 0:
                        short, long = heads.setdefault(p[:8], ([], {}))
                        if len(p) < 16:
                            short.append(p)
                        else:
                            long.setdefault(p[8:16], []).append(p)
                keys = np.sort(np.frombuffer(b"".join(heads), dtype="<u8"))
                table = np.zeros(1 << 16, dtype=bool)
                table[keys.view("<u2")[::4]] = True
                self._heads[aligned, o] = heads, keys, table
            heads, keys, table = self._heads[aligned, o]
            if len(data) - o < 8 or not heads:
                continue
            words = np.frombuffer(data, dtype="<u8", count=(len(data) - o) // 8, offset=o)
            near = np.flatnonzero(table[words.view("<u2")[::4]])
            at = np.minimum(np.searchsorted(keys, words[near]), len(keys) - 1)
            for i in near[keys[at] == words[near]].tolist():
                start = o + 8 * i
                short, long = heads[data[start : start + 8]]
                hits |= {p for p in short + long.get(data[start + 8 : start + 16], []) if data.startswith(p, start)}
        return hits

    def windows(self, length: int) -> set[bytes]:
        """Every window of ``length`` consecutive values of the vectors (int64 bytes)."""
        if length not in self._windows:
            out = set()
            for v in self.vectors:
                if len(v) >= length:
                    out |= _windows(np.ascontiguousarray(v, dtype="<i8").tobytes(), 8, length)
            if length == 1:
                out |= {struct.pack("<q", x) for x in self.scalars}
            self._windows[length] = out
        return self._windows[length]

    def window_hashes(self, length: int) -> np.ndarray:
        """:func:`_window_hashes` of every window of :meth:`windows`, sorted."""
        if length not in self._hashes:
            windows = self.windows(length)
            rows = np.frombuffer(b"".join(windows), dtype="<i8").reshape(len(windows), length)
            self._hashes[length] = np.sort(_combined(rows[:, j] for j in range(length)))
        return self._hashes[length]


def _packed(values: np.ndarray, nbytes: int) -> np.ndarray:
    """The low ``nbytes`` bytes of each value, as the low-bits openings put shares on the wire."""
    return np.ascontiguousarray(values, dtype="<i8").view(np.uint8).reshape(-1, 8)[:, :nbytes]


def _vector_patterns(values: np.ndarray, kinds) -> dict[bytes, int]:
    """Byte patterns (-> alignment) of every window of consecutive values: 3 values of 4
    or 8 bytes (aligned to the item), 4 packed 3-byte or 6 packed 2-byte words (any
    offset); the whole vector if shorter.  Patterns of fewer than 8 (packed: 12) bytes or
    of fewer than 3 distinct bytes (zeros, one repeated byte), and vectors of one or two
    small numbers (below 2^16: a public size or counter may equal them), are left out."""
    pats = {}
    n = len(values)
    for kind in kinds:
        if kind in ("packed3", "packed2"):
            size = int(kind[-1])
            enc, align, w = _packed(np.asarray(values, dtype=np.int64), size), 1, 12 // size
        else:
            enc = {"int64": lambda v: np.asarray(v, dtype=np.int64),
                   "int32": lambda v: np.asarray(v, dtype=np.int64).astype(np.int32),
                   "float64": lambda v: np.asarray(v, dtype=np.float64),
                   "float32": lambda v: np.asarray(v, dtype=np.float32),
                   "fixed16": lambda v: np.round(np.asarray(v, dtype=np.float64) * (1 << 16)).astype(np.int64),
                   }[kind](values)
            size = align = enc.itemsize
            w = 3
        w = min(w, n)
        raw = np.ascontiguousarray(enc).tobytes()
        if size * w < (12 if align == 1 else 8):
            continue
        small = w < 3 and bool((np.abs(np.asarray(values, dtype=np.float64)) < 1 << 16).all())
        for i in range(n - w + 1):
            p = raw[i * size : (i + w) * size]
            if len(set(p)) >= 3 and not small:  # zeros, one repeated value, a size or counter could match
                pats[p] = align
    return pats


def _scalar_patterns(values) -> dict[bytes, int]:
    """int64 bytes of each value that is recognisable (not a small number)."""
    return {struct.pack("<q", int(v)): 8 for v in values if abs(int(v)) >= 1 << 16}


def true_ranks(clients) -> np.ndarray:
    """0-based mid-ranks of every row, clients in order (the protocol's input order)."""
    return rankdata(np.concatenate([c.scores for c in clients])) - 1


def _encodings(scores: np.ndarray, ranks: np.ndarray) -> tuple[dict, list]:
    """Every form a client's scores and ranks take: byte patterns and integer vectors."""
    f32 = is_float32_exact(scores)
    keys = [encode_keys(scores, 1)[:, 0]] if f32 else []
    two = encode_keys(scores, 2)
    keys += [two[:, 0], two[:, 1], two.reshape(-1)]  # the limbs alone and as (hi, lo) rows
    ints = [np.floor(ranks), np.floor(ranks) + 1, 2 * ranks, np.round(ranks * (1 << 16)),
            np.round(scores * (1 << 16))] + keys
    ints = [np.asarray(v, dtype=np.int64) for v in ints]
    pats = {}
    pats |= _vector_patterns(scores, ("float64", "float32", "fixed16"))
    pats |= _vector_patterns(ranks, ("float64", "float32", "fixed16"))
    pats |= _vector_patterns(ranks + 1, ("float64", "float32"))
    for v in ints:
        pats |= _vector_patterns(v, ("int64", "int32", "packed3", "packed2"))
    for v in keys[:-1]:  # each key alone too: a host's rows interleave keys and digits
        pats |= {p: a for p, a in _scalar_patterns(v).items() if len(set(p)) >= 3}
    floats = [scores.view(np.int64)] + ([scores.astype(np.float32).view(np.int32).astype(np.int64)] if f32 else [])
    return pats, ints + floats


def client_secrets(clients, mechanisms, keys):
    """Per client, every form of its secrets that must never reach another process
    (a :class:`Secret`); the server's aggregate (a :class:`Secret`); the aggregates."""
    ranks = true_ranks(clients)
    roles_by_mech = []
    for mech in (NoNoise(),) + tuple(mechanisms):
        roles = [Client(k, c, mech, ClientRngs.from_key(keys[k])) for k, c in enumerate(clients)]
        for role, msg in zip(roles, Server.rank([ScoresMessage(r.index, r.scores) for r in roles])):
            role.receive_ranks(msg)
        roles_by_mech.append([r.statistics_message() for r in roles])
    exact = roles_by_mech[0]
    aggregates = [Server.aggregate(msgs) for msgs in roles_by_mech[1:]]
    secrets_by_client, offset = [], 0
    for k, c in enumerate(clients):
        n = len(c)
        pats, vectors = _encodings(np.asarray(c.scores, dtype=np.float64), ranks[offset : offset + n])
        offset += n
        stats = []
        for mech_msgs, mech in zip(roles_by_mech[1:], mechanisms):
            msg = mech_msgs[k]
            stats += [msg.local_sum_fixed, msg.local_p_fixed]
            if not isinstance(mech, RandomizedResponse):  # noise = noisy - exact statistics
                stats += [msg.local_sum_fixed - exact[k].local_sum_fixed, msg.local_p_fixed - exact[k].local_p_fixed]
        stats += [exact[k].local_sum_fixed, exact[k].local_p_fixed]
        pats |= _scalar_patterns(stats)
        pats[int(keys[k]).to_bytes(16, "little")] = 1
        scalars = [int(v) for v in stats if abs(int(v)) >= 1 << 16]
        secrets_by_client.append(Secret(pats, vectors, scalars))
    values = [v for a in aggregates for v in (a.global_sum_fixed, a.positives_fixed)]
    aggregate = Secret(_scalar_patterns(values), [], [int(v) for v in values if abs(int(v)) >= 1 << 16])
    return secrets_by_client, aggregate, aggregates


# ----------------------------------------------------------------- searching a process's record


def _windows(data: bytes, item: int, count: int) -> set[bytes]:
    return {data[i : i + item * count] for i in range(0, len(data) - item * count + 1, item)}


_ITEM = {"int64": 8, "float64": 8, "int32": 4, "float32": 4, "uint8": 1, "int8": 1}


def _combined(columns) -> np.ndarray:
    """sum_j columns[j] x P^(j + 1) mod 2^64 (a fixed odd P): a hash of rows of int64 values."""
    out = None
    for j, col in enumerate(columns):
        term = np.ascontiguousarray(col, dtype="<i8").view(np.uint64) * np.uint64(pow(_HASH_P, j + 1, 1 << 64))
        out = term if out is None else out + term
    return out


_HASH_P = 0x9E3779B97F4A7C15


def _window_hashes(values: np.ndarray, length: int) -> np.ndarray:
    """:func:`_combined` of every window of ``length`` consecutive values (int64)."""
    n = values.size - length + 1
    return _combined(values[j : j + n] for j in range(length))


def _opened_values(r) -> np.ndarray:
    return np.frombuffer(r.data, dtype=np.dtype(r.dtype)).astype(np.int64)


def _opened_hits(values: np.ndarray, secret: Secret) -> set[bytes]:
    """Windows of a secret's integer vectors found among consecutive opened values.  The
    window is long enough that chance cannot explain a match: L values with L x (the
    bits the opened values span) >= 64."""
    if values.size == 0:
        return set()
    bits = max(1, int(np.abs(values).max()).bit_length())
    length = -(-64 // bits)
    keys = secret.window_hashes(length)
    if values.size < length or keys.size == 0:
        return set()
    v = np.ascontiguousarray(values, dtype="<i8")
    h = _window_hashes(v, length)  # candidates by hash, then compared byte for byte
    at = np.minimum(np.searchsorted(keys, h), keys.size - 1)
    raw = v.tobytes()
    return {raw[8 * i : 8 * (i + length)] for i in np.flatnonzero(keys[at] == h).tolist()} & secret.windows(length)


_SEPARATOR = bytes(range(0xA0, 0xB0))  # between records (each padded to whole words): no pattern spans it


def _joined(records) -> bytes:
    return b"".join(r.data + bytes(-len(r.data) % 8) + _SEPARATOR for r in records)


class _Masked:
    """An int32 record's words reduced mod 2^bits (the same record otherwise)."""

    def __init__(self, r, bits: int):
        self.op, self.dtype = r.op, r.dtype
        self.data = (np.frombuffer(r.data, dtype="<i4") & np.int32((1 << bits) - 1)).astype("<i4").tobytes()


def _found(records, secret: Secret, window: int | None = None) -> set[bytes]:
    """The forms of ``secret`` present in the records.  Received buffers: byte patterns, in
    numeric buffers at the offsets their alignment allows, in byte buffers (pickled
    objects, input-link messages, sealed frames) at every offset; with ``window``, also in
    int32 buffers reduced mod 2^window (sums right in their low bits only, as the rank
    step's 2 x mid-ranks are).  Opened values (:data:`secure_auc.mpc.audit.OPENINGS`):
    windows of the secret's integer vectors (:func:`_opened_hits`)."""
    hits = set()
    received = [r for r in records if r.op not in OPENINGS]
    hits |= secret.search(_joined(r for r in received if _ITEM.get(r.dtype, 1) > 1), aligned=True)
    if window is not None and window < 32:
        hits |= secret.search(_joined(_Masked(r, window) for r in received if r.dtype == "int32"), aligned=True)
    hits |= secret.search(_joined(r for r in received if _ITEM.get(r.dtype, 1) == 1), aligned=False)
    for r in records:
        if r.op in OPENINGS:
            hits |= _opened_hits(_opened_values(r), secret)
    return hits


def leaks(received: dict, secrets_by_client, aggregate, owner=lambda k: k + 1, server=0,
          window: int | None = None) -> list[str]:
    """Every (process, whose secret) pair where a form of the secret was found in what
    the process received or opened; ``owner(k)`` is the process allowed to hold client
    k's secrets; ``window``: :func:`_found`'s."""
    found = []
    for who, records in received.items():
        for k, secret in enumerate(secrets_by_client):
            if who == owner(k):
                continue  # a client may hold its own secrets
            hits = _found(records, secret, window)
            if hits:
                found.append(f"process {who} holds {len(hits)} form(s) of client {k}'s secrets")
        if who != server:
            hits = _found(records, aggregate)
            if hits:
                found.append(f"process {who} holds {len(hits)} value(s) of the server's aggregate")
    return found


def dependence(received: dict, clients, parties) -> tuple[list[str], int]:
    """What says that an opened value depends on the scores.  Every value opened to every
    party must be the same at every computing party (``parties``).  Each opened vector of
    M values (each row of M of a longer one: the radix rounds' permutations and masked
    digits) is compared, by Spearman's rank correlation rho, with the rows' true ranks and
    with the position; every other opened vector of 32 values or more (masked values in
    sorted order, the network's pairs) with the position: z = rho sqrt(n - 1) is about
    N(0, 1) for a vector independent of them.  Reported: any |z| beyond the 10^-6
    Bonferroni bound of the whole run, and a sum of z^2 against the ranks whose chi^2
    p-value is below 10^-6.  Returns the findings and the number of vectors tested."""
    ranks = true_ranks(clients)
    m = len(ranks)
    found = []
    opened = {p: [r for r in received[p] if r.op == "open_all"] for p in parties}
    first = opened[parties[0]]
    for p in parties[1:]:
        if [(r.dtype, r.data) for r in opened[p]] != [(r.dtype, r.data) for r in first]:
            found.append(f"party {p} opened other values than party {parties[0]}")
    zs = []  # (what, z)
    for r in first:
        v = _opened_values(r)
        if v.size and v.size % m == 0:
            rows = v.reshape(-1, m)
        elif v.size >= 32:
            rows = v.reshape(1, -1)
        else:
            continue
        for i, row in enumerate(rows):
            if np.ptp(row) == 0:
                continue
            n = row.size
            refs = [("ranks", ranks)] if n == m else []
            for name, ref in refs + [("position", np.arange(n))]:
                zs.append(((r.tag, i, name), spearmanr(row, ref).statistic * np.sqrt(n - 1)))
    if not zs:
        return found, 0
    bound = norm.isf(1e-6 / (2 * len(zs)))
    found += [f"opening {tag} row {i}: rank correlation z = {z:.1f} with the {name} (bound {bound:.1f})"
              for (tag, i, name), z in zs if abs(z) > bound]
    against_ranks = [z for (_, _, name), z in zs if name == "ranks"]
    total = sum(z * z for z in against_ranks)
    if against_ranks and chi2.sf(total, len(against_ranks)) < 1e-6:
        found.append(f"the opened vectors' correlations with the ranks: chi^2 = {total:.0f} on "
                     f"{len(against_ranks)} d.f.")
    return found, len(zs)


def _run(sizes, sort, job=None, *, float64=False, insecure=False):
    clients = recognisable_clients(sizes, seed=len(sizes), float64=float64)
    mechanisms = mechanisms_for(len(clients))
    keys = [client_key(SEED, k) for k in range(len(clients))]
    config = PartyConfig(mechanisms=mechanisms, clients=len(clients), provider="ttp", sort=sort, progress=False)
    received: dict = {}
    if job is None:
        results = launch_local(clients, config, timeout=60, noise_keys=keys, received=received)
    else:  # with ``insecure``, the old transport too: plain gloo, where a reduce is possible
        per_rank = {0: (config, None)} | {r: (config, clients[r - 1], keys[r - 1]) for r in range(1, len(clients) + 1)}
        results = spawn_parties(job, per_rank, len(clients) + 1, provider="ttp", timeout=60, received=received,
                                insecure_links=insecure)
    return clients, mechanisms, keys, results, received


@functools.lru_cache(maxsize=None)
def _run_once(sizes: tuple, sort: str, float64: bool):
    """One local run of :func:`_run` per layout for the file: the broadcasts' test checks the
    3-client radix run the secrecy test below searches."""
    return _run(list(sizes), sort, float64=float64)


@pytest.mark.parametrize("sizes, sort, float64", [
    ([1, 2, 300], "radix", False),  # 3 clients, one- and two-sample clients
    ([200, 1], "network", False),  # 2 clients, the bitonic network
    ([60, 2, 9, 250], "radix", False),  # 4 clients
    ([2, 150], "radix", True),  # float64 scores: keys in two limbs
])
def test_no_process_learns_another_partys_secrets(sizes, sort, float64):
    clients, mechanisms, keys, results, received = _run_once(tuple(sizes), sort, float64)
    world = len(clients) + 2  # server, clients, dealer
    assert sorted(received) == list(range(world))
    assert all(len(received[r]) > 0 for r in received)
    # the record is complete: every frame that reached a process was taken by a recorded receive
    assert [(r, x.src, x.tag) for r in received for x in received[r] if x.op == "unclaimed frame"] == []
    # every client opened its own ranks, and only those
    for k, c in enumerate(clients):
        mine = [x for x in received[k + 1] if x.op == "open_to_owners"]
        assert len(mine) == 1 and np.array_equal(_opened_values(mine[0]), 2 * true_ranks(clients)[
            sum(len(x) for x in clients[:k]) :][: len(c)])
    assert not any(x.op == "open_to_owners" for x in received[0] + received[world - 1])
    secrets_by_client, aggregate, aggregates = client_secrets(clients, mechanisms, keys)
    # the run is the one the secrets were computed for: the server opened exactly these aggregates
    assert results[0].aggregates == aggregates
    assert leaks(received, secrets_by_client, aggregate, window=midrank_bits(sum(len(c) for c in clients))) == []
    found, tested = dependence(received, clients, list(range(len(clients) + 1)))
    assert found == []
    # every radix round's permutation and masked digits were tested (against the ranks and the
    # position), and but among 3 computing parties its masked products; the network's masked values
    per_round = 2 if len(clients) + 1 == 3 else 4
    assert tested >= (per_round * RadixSort().rounds(32 * (2 if float64 else 1)) if sort == "radix" else 100)


def test_clients_never_broadcast_anything_but_public_parameters():
    """The clients' only broadcasts are the public configuration and their sample counts
    (the float32 bit is no longer one of them: only whether *any* client needs two limbs
    is opened)."""
    from secure_auc.mpc.comm.backend import decode_obj

    clients, mechanisms, keys, results, received = _run_once((1, 2, 300), "radix", False)
    config = PartyConfig(mechanisms=mechanisms, clients=len(clients), provider="ttp", sort="radix", progress=False)
    allowed = [config.public()] + [len(c) for c in clients]
    checked = 0
    for rank, records in received.items():
        for r in records:
            if r.op == "broadcast" and r.src is not None and 1 <= r.src <= len(clients) and r.dtype == "int8":
                assert decode_obj(r.data) in allowed, (rank, r.src, decode_obj(r.data))  # JSON, never a pickle
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

    def open_to_owners(share, sizes, owners, *, shape=None, bits=None):
        mine, offset = [], 0
        for n_k, owner in zip(sizes, owners):
            t = share[offset : offset + n_k].contiguous()
            offset += n_k
            out = backend.comm().reduce(t, owner)  # what get_plain_text(dst=owner) does
            if backend.rank() == owner:
                mine.append(out & ((1 << bits) - 1) if bits is not None else out)
        return None if not mine else (mine[0] if len(mine) == 1 else __import__("torch").cat(mine))

    ranks.open_to_owners = open_to_owners
    return run_party(rank, config, data, noise_key)


@pytest.mark.parametrize("canary", ["identity shuffles", "ranks opened to every party", "reduce opening"])
def test_the_secrecy_checks_catch_each_canary(canary):
    """Each canary (:mod:`.canaries`) makes the checks of
    :func:`test_no_process_learns_another_partys_secrets` fail: the server holds the
    clients' ranks, and the opened values depend on the scores."""
    from .canaries import identity_shuffle_job, ranks_to_everyone_job

    job = {"identity shuffles": identity_shuffle_job, "ranks opened to every party": ranks_to_everyone_job,
           "reduce opening": _reduce_opening_job}[canary]
    clients, mechanisms, keys, results, received = _run([120, 1, 50], "radix", job=job,
                                                        insecure=canary == "reduce opening")
    secrets_by_client, aggregate, _ = client_secrets(clients, mechanisms, keys)
    found = leaks(received, secrets_by_client, aggregate, window=midrank_bits(sum(len(c) for c in clients)))
    assert any(f.startswith("process 0 holds") for f in found), found
    dependent, _ = dependence(received, clients, list(range(len(clients) + 1)))
    if canary != "reduce opening":  # that one opens nothing to every party
        assert dependent != [], dependent


def _cryptensor_job(rank):
    import torch

    from secure_auc.mpc.comm.backend import crypten

    return crypten.cryptensor(torch.arange(4), src=1, precision=0).share  # CrypTen's PRZS sharing


def test_crypten_randomness_is_refused_in_every_party():
    with pytest.raises(MPCError, match="Mersenne Twister"):
        spawn_parties(_cryptensor_job, {}, 2, provider="ttp", timeout=30)
