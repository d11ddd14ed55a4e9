"""The radix sort's local parts, checked in one process against their maths:
the shuffle passes and the dealer's corrections (shuffle docstring), the keyed
streams, the digit indicators and the triple correction.  The parts that need
several parties are checked end to end in test_ranks.py."""

from __future__ import annotations

import numpy as np
import pytest

from secure_auc.mpc.primitives.dealer import CORRECTED, triple_correction, triple_shares
from secure_auc.mpc.encoding import encode_keys
from secure_auc.mpc.primitives.prg import new_seed, ring, seed_to_tensor, stream, tensor_to_seed
from secure_auc.mpc.ranks import key_digits
from secure_auc.mpc.primitives.shuffle import deltas, pads, pass_order, permutation


def share(rng, x, world):
    """Additive shares of int64 x mod 2^64."""
    parts = [rng.integers(-(2**63), 2**63 - 1, size=x.shape, dtype=np.int64, endpoint=True) for _ in range(world - 1)]
    return parts + [x - sum(parts)] if parts else [x.copy()]


def run_passes(shares, seeds, instance, inverse):
    """Every party's side of the passes, as the shuffle docstring writes them, with
    the dealer's corrections from :func:`deltas`."""
    world = len(shares)
    rows, cols = shares[0].shape
    x = [s.copy() for s in shares]
    corrections = deltas(seeds, instance, rows, cols, inverse)
    for step, i in enumerate(pass_order(world, inverse)):
        sid = world + step if inverse else step
        perm_i = permutation(seeds[i], instance, rows)
        if inverse:
            inv = np.empty_like(perm_i)
            inv[perm_i] = np.arange(rows)
            perm_i = inv
        received = np.zeros_like(x[i])
        for j in range(world):
            if j != i:
                a, b = pads(seeds[j], instance, sid, (rows, cols))
                received += x[j] - a  # m_j, sent to the permuter
                x[j] = b
        who, delta = next(corrections)
        assert who == i
        x[i] = (x[i] + received)[perm_i] + delta
    return x


@pytest.mark.parametrize("world", [2, 3, 4])
def test_shuffle_passes_permute_the_secret_and_the_inverse_undoes_it(world):
    rng = np.random.default_rng(world)
    seeds = [new_seed() for _ in range(world)]
    x = rng.integers(-(2**63), 2**63 - 1, size=(50, 3), dtype=np.int64, endpoint=True)
    shares = share(rng, x, world)
    out = run_passes(shares, seeds, instance=7, inverse=False)
    p = np.arange(50)
    for i in reversed(range(world)):  # p = p_0[p_1[... p_{w-1}]]
        p = permutation(seeds[i], 7, 50)[p]
    np.testing.assert_array_equal(sum(out), x[p])
    assert not np.array_equal(p, np.arange(50))
    back = run_passes(out, seeds, instance=7, inverse=True)
    np.testing.assert_array_equal(sum(back), x)
    # what a permuter receives is masked: it is not the other party's share
    a, _ = pads(seeds[1], 7, 0, (50, 3))
    assert not np.array_equal(shares[1] - a, shares[1])


def test_streams_are_keyed_by_seed_and_tags():
    s, t = new_seed(), new_seed()
    assert len(s) == 16 and s != t
    np.testing.assert_array_equal(ring(s, ("pad", 1, 2), (4, 5)), ring(s, ("pad", 1, 2), (4, 5)))
    assert not np.array_equal(ring(s, ("pad", 1, 2), (20,)), ring(s, ("pad", 1, 3), (20,)))
    assert not np.array_equal(ring(s, ("pad", 1, 2), (20,)), ring(t, ("pad", 1, 2), (20,)))
    # a prefix of a longer stream is the shorter stream (CTR keystream)
    np.testing.assert_array_equal(ring(s, ("x",), (10,)), ring(s, ("x",), (1000,))[:10])
    big = ring(s, ("u",), (1 << 16,))
    bits = np.unpackbits(big.view(np.uint8))
    assert abs(bits.mean() - 0.5) < 0.005  # uniform bits
    np.testing.assert_array_equal(stream(s, "perm", 3).permutation(100), stream(s, "perm", 3).permutation(100))
    assert tensor_to_seed(seed_to_tensor(s)) == s


@pytest.mark.parametrize("world", [2, 3])
def test_dealer_corrections_make_every_kind_of_randomness_consistent(world):
    seeds = [new_seed() for _ in range(world)]
    n = 1000

    def shares(kind):
        out = [triple_shares(s, 5, n, kind).copy() for s in seeds]
        out[0][CORRECTED[kind]] = triple_correction(seeds, 5, n, kind)
        return out

    a, b, c = (sum(s[k] for s in shares("mul")) for k in range(3))
    np.testing.assert_array_equal(c, a * b)  # int64 arithmetic wraps mod 2^64
    xa, xb, xc = (np.bitwise_xor.reduce([s[k] for s in shares("binary")]) for k in range(3))
    np.testing.assert_array_equal(xc, xa & xb)  # bitwise AND triples, XOR-shared
    b2a = shares("b2a")
    bit = np.bitwise_xor.reduce([s[1] & 1 for s in b2a])
    np.testing.assert_array_equal(sum(s[0] for s in b2a), bit)  # the same bit, additively shared
    assert 0.4 < bit.mean() < 0.6
    # a party's own stream is uniform: its share of c is not the product
    assert not np.array_equal(shares("mul")[1][2], a * b)


@pytest.mark.parametrize("bits", [1, 2])
def test_key_digits_are_the_one_hot_digits_of_the_unsigned_key(bits):
    rng = np.random.default_rng(bits)
    third = 1 / 3
    scores = np.concatenate([rng.normal(size=40), [0.0, -0.0, np.inf, -np.inf, third, np.nextafter(third, 1)]])
    for limbs in (1, 2):
        s = scores.astype(np.float32).astype(np.float64) if limbs == 1 else scores
        keys = encode_keys(s, limbs)
        unsigned = [int(k[0]) + 2**31 for k in keys] if limbs == 1 else \
            [((int(k[0]) + 2**31) << 32) + int(k[1]) for k in keys]
        order_by_key = np.argsort(np.array(unsigned, dtype=object), kind="stable")
        assert np.all(np.diff(s[order_by_key]) >= 0)  # the unsigned key orders the scores
        digits = -(-32 * limbs // bits)
        for d in range(digits):
            ind = key_digits(keys, d, bits)
            assert ind.shape == (len(s), (1 << bits) - 1)
            assert set(np.unique(ind.sum(axis=1))) <= {0, 1}
            value = ind @ np.arange(1, 1 << bits)  # one-hot -> digit value (0 when no indicator)
            want = [(u >> (d * bits)) & ((1 << bits) - 1) for u in unsigned]
            np.testing.assert_array_equal(value, want)
