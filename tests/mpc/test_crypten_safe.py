"""CrypTen made safe (:mod:`secure_auc.mpc.crypten.safe`): its operations still compute the
right values, take no randomness from torch's generators, open nothing by a reduce, pass the
received-buffer audit, and defeat the generator-recovery attack that breaks stock CrypTen."""

from __future__ import annotations

import numpy as np
import pytest

import functools

from .test_ranks import in_turn, run_parties

TIMEOUT = 90.0

# ----------------------------------------------------------------- a small model's operations


def model_inputs(world: int, n: int = 40, seed: int = 7):
    """Party r's feature columns, and party 0's weights of a 2-layer model."""
    rng = np.random.default_rng(seed)
    cols = [rng.normal(size=(n, 2)).astype(np.float32) for _ in range(world)]
    w1 = rng.normal(size=(2 * world, 4)).astype(np.float32) / 2
    w2 = rng.normal(size=(4, 1)).astype(np.float32) / 2
    return cols, w1, w2


def plain_model(cols, w1, w2):
    x = np.concatenate(cols, axis=1)
    h = np.maximum(x @ w1, 0)
    z = h @ w2
    return {"hidden": h, "logit": z[:, 0], "score": 1 / (1 + np.exp(-z[:, 0])), "positive": (z[:, 0] > 0)}


def _model_ops(rank, cols, w1, w2, safe=True):
    """Each party shares its feature columns (src=rank), party 0 its weights; a matmul,
    ReLU, a second matmul, sigmoid and a comparison; everything opened at the end (test
    only).  Returns the opened values and which CrypTen draws happened."""
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.crypten import install

    crypten = backend.crypten
    world = backend.world_size()
    guard = install() if safe else None
    try:
        xs = [crypten.cryptensor(torch.from_numpy(cols[r]) if r == rank else torch.empty(cols[r].shape), src=r)
              for r in range(world)]
        x = crypten.cat(xs, dim=1)
        W1 = crypten.cryptensor(torch.from_numpy(w1) if rank == 0 else torch.empty(w1.shape), src=0)
        W2 = crypten.cryptensor(torch.from_numpy(w2) if rank == 0 else torch.empty(w2.shape), src=0)
        h = x.matmul(W1).relu()
        z = h.matmul(W2)[:, 0]
        s = z.sigmoid()
        pos = z > 0
        out = {"hidden": h.get_plain_text().numpy(), "logit": z.get_plain_text().numpy(),
               "score": s.get_plain_text().numpy(), "positive": pos.get_plain_text().numpy() > 0.5}
    finally:
        if guard is not None:
            guard.uninstall()
    return out


@pytest.mark.parametrize("world,provider", [(2, "tfp"), (3, "ttp")])
def test_crypten_ops_are_right_with_the_dealer_and_aes_streams(world, provider):
    """The parties run inside forbid_crypten_randomness (the launcher's guard): any draw
    from CrypTen's torch generators would fail the run; with install() the model's
    operations run on the links and give the plaintext values."""
    cols, w1, w2 = model_inputs(world)
    if world == 2:  # among 2 (tfp) in the launch the generator-recovery test's safe run shares
        results = [got[0] for got in two_parties_safe()]
    else:
        results = run_parties(world, _model_ops, cols, w1, w2, provider=provider)
    want = plain_model(cols, w1, w2)
    for r in range(world):
        got = results[r]
        np.testing.assert_allclose(got["hidden"], want["hidden"], atol=2e-3)
        np.testing.assert_allclose(got["logit"], want["logit"], atol=2e-3)
        np.testing.assert_allclose(got["score"], want["score"], atol=2e-2)  # CrypTen's sigmoid approximation
        clear = np.abs(want["logit"]) > 1e-2
        np.testing.assert_array_equal(got["positive"][clear], want["positive"][clear])


# ----------------------------------------------------------------- stock CrypTen, for the "before" runs


def _stock_crypten():
    """Undo the launcher's guard in this process: CrypTen's own generator functions again
    (a test that shows what stock CrypTen gives away)."""
    import importlib

    import crypten.common.rng as rng

    from secure_auc.mpc.comm import backend

    fresh = importlib.reload(rng)
    for _, mod in backend.random_generator_modules():
        for name in ("generate_random_ring_element", "generate_kbit_random_tensor"):
            if hasattr(mod, name):
                setattr(mod, name, getattr(fresh, name))


def _untemper(y: int) -> int:
    """The MT19937 state word behind one 32-bit output (the tempering inverted)."""
    y ^= y >> 18
    y ^= (y << 15) & 0xEFC60000
    t = y
    for _ in range(5):
        t = y ^ ((t << 7) & 0x9D2C5680)
    y = t & 0xFFFFFFFF
    t = y
    for _ in range(3):
        t = y ^ (t >> 11)
    return t & 0xFFFFFFFF


def predict_ring_elements(observed: np.ndarray, count: int) -> np.ndarray:
    """Given at least 312 consecutive int64 outputs of CrypTen's
    ``generate_random_ring_element`` (torch's MT19937: each is 2^63 + two 32-bit outputs,
    high word first), the ``count`` outputs that follow the first 312."""
    import random

    words = []
    for v in (observed[:312].astype(np.uint64) + np.uint64(1 << 63)).tolist():
        words += [v >> 32, v & 0xFFFFFFFF]
    mt = random.Random()
    mt.setstate((3, tuple(_untemper(w) for w in words) + (624,), None))
    out = [((mt.getrandbits(32) << 32) | mt.getrandbits(32)) for _ in range(count)]
    return (np.array(out, dtype=np.uint64) - np.uint64(1 << 63)).astype(np.int64)


def _attack(rank, secret1, secret2, known, safe):
    """Party 0 multiplies two secret vectors, one after the other, by party 1's vector
    ``known``; party 1 (the attacker) keeps the values opened in each Beaver product.
    From the first product's delta = known - b it reads b, raw outputs of the triple
    generator (stock TFP: party 0's torch generator), recovers the generator's state and
    predicts the next triple's a; the second product's epsilon = x - a then gives x."""
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.crypten import install

    crypten = backend.crypten
    from crypten.mpc.primitives.arithmetic import ArithmeticSharedTensor

    if not safe:
        _stock_crypten()
    guard = install() if safe else None
    n = len(known)
    opened = []
    reveal = ArithmeticSharedTensor.__dict__["reveal_batch"]

    def spy(tensors, dst=None):
        out = reveal.__func__(tensors, dst)
        opened.append([t.clone() for t in out])
        return out

    ArithmeticSharedTensor.reveal_batch = staticmethod(spy)
    try:
        mine = [torch.tensor(secret1), torch.tensor(secret2)] if rank == 0 else [torch.empty(n)] * 2
        y = crypten.cryptensor(torch.tensor(known) if rank == 1 else torch.empty(n), src=1)
        for x in mine:
            crypten.cryptensor(x, src=0) * y
    finally:
        ArithmeticSharedTensor.reveal_batch = reveal
        if guard is not None:
            guard.uninstall()
    if rank != 1:
        return None
    known_enc = (torch.tensor(known) * (1 << 16)).long().numpy()
    b1 = known_enc - opened[0][1].numpy()  # the first triple's b
    predicted = predict_ring_elements(b1, (n - 312) + n)
    consistent = bool((predicted[: n - 312] == b1[312:]).all())  # the state explains the rest of b
    a2 = predicted[n - 312 :]
    guess = (opened[1][0].numpy() + a2) / (1 << 16)
    return {"consistent": consistent, "guess": guess}


def attack_inputs(n=400, seed=11):
    rng = np.random.default_rng(seed)
    known = rng.integers(-1000, 1000, n) / 256.0  # exact in 16-bit fixed point
    secret1 = rng.integers(-1000, 1000, n) / 256.0
    secret2 = rng.integers(-1000, 1000, n) / 256.0
    return secret1, secret2, known


@functools.lru_cache(maxsize=None)
def two_parties_safe() -> list:
    """One launch of 2 parties (tfp, secure links) for this file: by rank, the model's operations
    (:func:`_model_ops`), then the generator-recovery attack with install() (:func:`_attack`; it reads
    the Beaver products of its own multiplications, so the model's draws before it do not matter)."""
    cols, w1, w2 = model_inputs(2)
    return run_parties(2, in_turn, [(_model_ops, (cols, w1, w2)), (_attack, (*attack_inputs(), True))])


def test_generator_recovery_breaks_stock_crypten_and_fails_once_installed():
    from secure_auc.mpc.launch import spawn_parties

    secret1, secret2, known = attack_inputs()
    stock = spawn_parties(_attack, {r: (secret1, secret2, known, False) for r in range(2)}, 2, provider="tfp",
                          timeout=30, deadline=TIMEOUT, insecure_links=True)[1]
    assert stock["consistent"]
    np.testing.assert_array_equal(stock["guess"], secret2)  # party 0's second input, read exactly
    safe = two_parties_safe()[1][1]  # party 1's result of the attack
    assert not safe["consistent"]
    assert np.mean(np.abs(safe["guess"] - secret2) < 1) < 0.01  # no better than chance


# ----------------------------------------------------------------- the received-buffer audit


def _model_unopened(rank, cols, w1, w2, safe=True):
    """The model's operations without opening anything (what a deployment would run before
    the rank step); with ``safe=False`` stock CrypTen, whose output is opened to party 0 by
    ``get_plain_text(dst=0)`` (a reduce), as a canary for the search."""
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.crypten import install

    crypten = backend.crypten
    world = backend.world_size()
    if not safe:
        _stock_crypten()
    guard = install() if safe else None
    try:
        x = crypten.cat([crypten.cryptensor(torch.from_numpy(cols[r]) if r == rank else torch.empty(cols[r].shape),
                                            src=r) for r in range(world)], dim=1)
        W1 = crypten.cryptensor(torch.from_numpy(w1) if rank == 0 else torch.empty(w1.shape), src=0)
        W2 = crypten.cryptensor(torch.from_numpy(w2) if rank == 0 else torch.empty(w2.shape), src=0)
        z = x.matmul(W1).relu().matmul(W2)[:, 0]
        s = z.sigmoid()
        _ = z > 0
        opened = None if safe else s._tensor.reveal(dst=0)  # CrypTen's opening to party 0: a reduce
    finally:
        if guard is not None:
            guard.uninstall()
    return None if opened is None else opened.numpy()


def audit_patterns(*arrays):
    """The values of ``arrays`` in every form the search knows: byte patterns (float64, float32,
    CrypTen's 16-bit fixed point) in received buffers, fixed-point windows in opened values."""
    from .test_leakage import Secret, _vector_patterns

    patterns, vectors = {}, []
    for values in arrays:
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        patterns |= _vector_patterns(v, ("float64", "float32", "fixed16"))
        vectors.append(np.round(v * (1 << 16)).astype(np.int64))
    return Secret(patterns=patterns, vectors=vectors)


def _received(job, world, args, provider, insecure=False):
    from secure_auc.mpc.launch import spawn_parties

    received: dict = {}
    spawn_parties(job, {r: args for r in range(world)}, world, provider=provider, timeout=30, deadline=TIMEOUT,
                  received=received, insecure_links=insecure)
    return received


def test_crypten_model_passes_the_received_buffer_audit_once_installed():
    """Three parties (and the dealer) run the model's matmul, ReLU, sigmoid and comparison
    with install(); no process receives a fragment of another party's features, of party
    0's weights or of the model's scores or logits, and no collective combines shares (no
    reduce, all_reduce, gather or scatter record).  The same search finds stock CrypTen's
    output opened to party 0 by a reduce at party 1."""
    from .test_leakage import _found

    world = 3
    cols, w1, w2 = model_inputs(world, n=64)
    want = plain_model(cols, w1, w2)
    outputs = audit_patterns(want["score"], want["logit"])
    received = _received(_model_unopened, world, (cols, w1, w2, True), "ttp")
    assert sorted(received) == list(range(world + 1))
    for rank, records in received.items():
        assert not {r.op for r in records} & {"reduce", "all_reduce", "gather", "scatter", "unclaimed frame"}, rank
        for owner in range(world):
            if owner != rank:
                assert not _found(records, audit_patterns(cols[owner].reshape(-1))), (rank, owner)
        if rank != 0:
            assert not _found(records, audit_patterns(w1, w2)), rank
        assert not _found(records, outputs), rank
    from secure_auc.mpc.launch import spawn_parties

    cols2, w1_2, w2_2 = model_inputs(2, n=4096)
    stock: dict = {}
    done = spawn_parties(_model_unopened, {r: (cols2, w1_2, w2_2, False) for r in range(2)}, 2, provider="tfp",
                         timeout=30, deadline=TIMEOUT, received=stock, insecure_links=True)
    from .test_leakage import Secret, _vector_patterns

    opened = Secret(patterns=_vector_patterns(done[0], ("int64",)))  # the scores as party 0 got them (fixed point)
    assert any(r.op == "reduce" for r in stock[1])
    assert _found(stock[1], opened)  # party 1 holds part of them too


# ----------------------------------------------------------------- the dealer's wrap randomness


@pytest.mark.parametrize("world,party", [(2, 1), (3, 0), (4, 2)])
def test_wrap_randomness_counts_the_wraps_of_the_shares(world, party):
    """The dealer's "wraps" kind: shares theta_p add up to (sum of the r_p as integers - their
    sum in Z_2^64) / 2^64, computed here with Python's unbounded integers."""
    from secure_auc.mpc.primitives.dealer import CORRECTED, triple_correction, triple_shares
    from secure_auc.mpc.primitives.prg import new_seed

    seeds = [new_seed() for _ in range(world)]
    n = 2000
    shares = [triple_shares(s, 3, n, "wraps").copy() for s in seeds]
    shares[party][CORRECTED["wraps"]] = triple_correction(seeds, 3, n, "wraps", party)
    r = [s[0].tolist() for s in shares]
    exact = [sum(col) for col in zip(*r)]
    wrapped = [((v + (1 << 63)) % (1 << 64)) - (1 << 63) for v in exact]
    want = np.array([(e - w) >> 64 for e, w in zip(exact, wrapped)], dtype=np.int64)
    np.testing.assert_array_equal(sum(s[1] for s in shares), want)
    assert len(set(want.tolist())) > 1  # the shares do wrap, both ways
