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
from secure_auc.mpc.primitives.shuffle import (carrier, deltas, first_delta, from_stream, holds_nothing, pad, pass_order,
                                               permutation, senders)


def share(rng, x, world):
    """Additive shares of x mod 2^64 (int64) or 2^32 (int32)."""
    info = np.iinfo(x.dtype)
    parts = [rng.integers(info.min, info.max, size=x.shape, dtype=x.dtype, endpoint=True) for _ in range(world - 1)]
    return parts + [x - sum(parts)] if parts else [x.copy()]


def run_passes(shares, seeds, instance, inverse, dtype=np.int64, keep=None, carried=None):
    """Every party's side of the passes, as the shuffle docstring writes them, with
    the dealer's corrections from :func:`deltas` (``keep``, ``carried``: passed on)."""
    world = len(shares)
    rows, cols = shares[0].shape
    x = [s.copy() for s in shares]
    carry = keep is not None
    corrections = deltas(seeds, instance, rows, cols, inverse, dtype=dtype, keep=keep, carried=carried)
    order = pass_order(world, inverse)
    for step, i in enumerate(order):
        sid = world + step if inverse else step
        perm_i = permutation(seeds[i], instance, rows)
        if inverse:
            inv = np.empty_like(perm_i)
            inv[perm_i] = np.arange(rows)
            perm_i = inv
        received = np.zeros_like(x[i])
        for j in range(world):
            if j != i:
                b = pad(seeds[j], instance, sid, "B", (rows, cols), dtype)
                if j in senders(world, step, inverse):
                    received += x[j] - pad(seeds[j], instance, sid, "A", (rows, cols), dtype)  # m_j, sent
                else:  # its share is its previous pass's B, which the dealer used as A
                    np.testing.assert_array_equal(x[j], pad(seeds[j], instance, sid - 1, "B", (rows, cols), dtype))
                # the next permuter keeps no share after the first pass (the dealer keeps it)
                x[j] = np.zeros_like(b) if holds_nothing(world, step, inverse, j, carry) else b
        if from_stream(world, step, carry):  # the first correction (and a carry's last): from the stream
            delta = first_delta(seeds[i], instance, sid, (rows, cols), dtype)
        else:
            who, delta = next(corrections)
            assert who == i
        x[i] = (x[i] + received)[perm_i] + delta
    assert next(corrections, None) is None  # one correction sent per pass but the first
    return x


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_shuffle_passes_permute_the_secret_and_the_inverse_undoes_it(world, dtype):
    rng = np.random.default_rng(world)
    seeds = [new_seed() for _ in range(world)]
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, size=(50, 3), dtype=dtype, endpoint=True)
    shares = share(rng, x, world)
    out = run_passes(shares, seeds, instance=7, inverse=False, dtype=dtype)
    p = np.arange(50)
    for i in reversed(range(world)):  # p = p_0[p_1[... p_{w-1}]]
        p = permutation(seeds[i], 7, 50)[p]
    np.testing.assert_array_equal(sum(out), x[p])
    assert not np.array_equal(p, np.arange(50))
    back = run_passes(out, seeds, instance=7, inverse=True, dtype=dtype)
    np.testing.assert_array_equal(sum(back), x)
    # what a permuter receives is masked: it is not the other party's share
    a = pad(seeds[1], 7, 0, "A", (50, 3))
    assert not np.array_equal(shares[1] - a, shares[1])


@pytest.mark.parametrize("world", [2, 3, 4])
def test_a_carried_inverse_leaves_the_carrier_nothing_and_the_next_forward_adds_its_share(world):
    """An inverse shuffle with ``keep`` takes its last correction from the stream too: the
    carrier holds nothing and the dealer keeps its share H (the shares and H add up to
    the secret); a forward shuffle of Y + Z with ``carried=H``, the carrier holding only
    its share of Z, gives (Y + Z)[p].  Among 2 the inverse sends no correction at all."""
    rng = np.random.default_rng(10 + world)
    seeds = [new_seed() for _ in range(world)]
    x = rng.integers(-(1 << 31), 1 << 31, size=(30, 1), dtype=np.int32)
    z = rng.integers(-(1 << 31), 1 << 31, size=(30, 1), dtype=np.int32)
    out = run_passes(share(rng, x, world), seeds, instance=3, inverse=False, dtype=np.int32)
    kept = []
    sent = [i for i, _ in deltas(seeds, 3, 30, 1, True, dtype=np.int32, keep=lambda h: None)]
    assert len(sent) == world - 2  # two passes' corrections from the streams
    back = run_passes(out, seeds, instance=3, inverse=True, dtype=np.int32, keep=kept.append)
    c = carrier(world)
    assert c == 1 and not back[c].any()  # the carrier holds nothing
    np.testing.assert_array_equal(sum(back) + kept[0], x)
    shares = [b + zj for b, zj in zip(back, share(rng, z, world))]
    fwd = run_passes(shares, seeds, instance=4, inverse=False, dtype=np.int32, carried=kept[0])
    p = np.arange(30)
    for i in reversed(range(world)):
        p = permutation(seeds[i], 4, 30)[p]
    np.testing.assert_array_equal(sum(fwd), (x + z)[p])
    wrong = run_passes(shares, seeds, instance=4, inverse=False, dtype=np.int32)  # without the carried share
    assert not np.array_equal(sum(wrong), (x + z)[p])


@pytest.mark.parametrize("world", [2, 3, 4])
def test_a_shuffle_opened_by_its_last_permuter_gives_it_the_masked_value(world):
    """deltas(..., others_mask=): the last pass leaves the other parties without a share and
    the last permuter with X[p] - sum_{j != l} R_j (shuffle docstring), R_j = 2^k r_j from
    each party's one-hot batch (dealer.others_mask); what it receives is masked by pads."""
    from secure_auc.mpc.primitives.dealer import digit_kind, others_mask, rep_block

    rng = np.random.default_rng(world)
    seeds = [new_seed() for _ in range(world)]
    reps = [new_seed() for _ in range(world)] if world == 3 else None  # among 3: replicated randomness
    rows, k, batch = 40, 6, 3
    x = rng.integers(0, 1 << 8, size=(rows, 1), dtype=np.int32)
    shares = share(rng, x, world)
    kind = digit_kind(2, world)
    # r_j, as the parties draw it (row 0 of their block)
    r_shares = [rep_block((reps[j], reps[(j + 1) % 3]), batch, rows, kind)[0] if reps else
                triple_shares(seeds[j], batch, rows, kind)[0] for j in range(world)]
    mask_shares = [r << np.int32(k) for r in r_shares]
    last = pass_order(world, False)[-1]
    corrections = list(deltas(seeds, 5, rows, 1, False, dtype=np.int32,
                              others_mask=others_mask(seeds, rows, 2, batch, k, reps=reps)))
    plain = list(deltas(seeds, 5, rows, 1, False, dtype=np.int32))
    assert [i for i, _ in corrections] == [i for i, _ in plain] == pass_order(world, False)[1:]  # none for the first
    for (_, d), (_, e) in zip(corrections[:-1], plain[:-1]):  # the passes before the last are the same
        np.testing.assert_array_equal(d, e)
    corrections.insert(0, (0, first_delta(seeds[0], 5, 0, (rows, 1), np.int32)))
    cur = [s_.copy() for s_ in shares]
    for step, (i, delta) in enumerate(corrections):
        received = np.zeros_like(cur[i])
        for j in range(world):
            if j != i:
                if j in senders(world, step, False):
                    received += cur[j] - pad(seeds[j], 5, step, "A", (rows, 1), np.int32)
                cur[j] = np.zeros((rows, 1), np.int32) if holds_nothing(world, step, False, j) else \
                    pad(seeds[j], 5, step, "B", (rows, 1), np.int32)
        cur[i] = (cur[i] + received)[permutation(seeds[i], 5, rows)] + delta
    p = np.arange(rows)
    for i in reversed(range(world)):
        p = permutation(seeds[i], 5, rows)[p]
    value = cur[last][:, 0] - mask_shares[last]
    np.testing.assert_array_equal(value, x[p][:, 0] - sum(mask_shares))
    np.testing.assert_array_equal((value & ((1 << k) - 1)), x[p][:, 0] & ((1 << k) - 1))  # the window below 2^k


@pytest.mark.parametrize("inverse", [False, True])
def test_after_the_first_pass_only_the_previous_permuter_sends(inverse):
    assert senders(2, 0, inverse) == [1 - pass_order(2, inverse)[0]]
    assert senders(2, 1, inverse) == [pass_order(2, inverse)[0]]
    order = pass_order(3, inverse)
    assert sorted(senders(3, 0, inverse)) == sorted(set(range(3)) - {order[0]})
    assert [senders(3, k, inverse) for k in (1, 2)] == [[order[0]], [order[1]]]
    assert sum(len(senders(4, k, inverse)) for k in range(4)) == 3 + 3  # 2w - 2 messages


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


def test_sorted_key_permutations_are_uniform_and_are_permutations():
    """Every permutation of 4 rows equally often from 2-bit keys (ties in most draws,
    broken by shuffling; chi-square over the 24), and the permutations of many rows
    (the sorted-key path) are permutations, the same at both ends."""
    from scipy.stats import chisquare

    from secure_auc.mpc.primitives.shuffle import permutation, sort_permutation

    # 6,000 draws (250 per permutation): a uniform sampler fails the p-value bound with probability 1e-4
    # whatever the count; ties left in index order (no shuffle) give p = 0 at this count
    counts = {}
    for i in range(6_000):
        p = tuple(sort_permutation(b"u" * 16, i, 4, key_bits=2).tolist())
        counts[p] = counts.get(p, 0) + 1
    assert len(counts) == 24
    assert chisquare(list(counts.values())).pvalue > 1e-4
    rows = (1 << 16) + 3
    p = permutation(b"v" * 16, 5, rows)
    assert np.array_equal(np.sort(p), np.arange(rows)) and np.array_equal(p, permutation(b"v" * 16, 5, rows))
    assert not np.array_equal(p, permutation(b"v" * 16, 6, rows))


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("party", [0, 1])
def test_dealer_corrections_make_every_kind_of_randomness_consistent(world, party):
    seeds = [new_seed() for _ in range(world)]
    n = 1000

    def shares(kind):
        out = [triple_shares(s, 5, n, kind).copy() for s in seeds]
        out[party][CORRECTED[kind]] = triple_correction(seeds, 5, n, kind, party)
        return out

    for kind in ("mul", "mul32"):
        a, b, c = (sum(s[k] for s in shares(kind)) for k in range(3))
        assert c.dtype == (np.int32 if kind == "mul32" else np.int64)
        np.testing.assert_array_equal(c, a * b)  # numpy's integer arithmetic wraps mod 2^64 (2^32)
    for kind in ("pair", "pair32"):  # two products with one first factor
        a, b1, b2, c1, c2 = (sum(s[k] for s in shares(kind)) for k in range(5))
        assert c1.dtype == (np.int32 if kind == "pair32" else np.int64)
        np.testing.assert_array_equal(c1, a * b1)
        np.testing.assert_array_equal(c2, a * b2)
        assert not np.array_equal(b1, b2)
    xa, xb, xc = (np.bitwise_xor.reduce([s[k] for s in shares("binary")]) for k in range(3))
    np.testing.assert_array_equal(xc, xa & xb)  # bitwise AND triples, XOR-shared
    b2a = shares("b2a")
    bit = np.bitwise_xor.reduce([s[1] & 1 for s in b2a])
    np.testing.assert_array_equal(sum(s[0] for s in b2a), bit)  # the same bit, additively shared
    assert 0.4 < bit.mean() < 0.6
    # a party's own stream is uniform: its share of c is not the product
    assert not np.array_equal(shares("mul")[1 - party][2], a * b)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_onehot_randomness_is_the_one_hot_of_the_shared_r_and_its_products(d):
    world, n, v = 3, 4000, 1 << d
    seeds = [new_seed() for _ in range(world)]
    out = [triple_shares(s, 2, n, f"onehot{d}").copy() for s in seeds]
    out[1][CORRECTED[f"onehot{d}"]] = triple_correction(seeds, 2, n, f"onehot{d}", 1)
    total = sum(out)
    r = total[0] & (v - 1)
    assert total.shape == (2 * v, n)
    e, b, c = total[1:v], total[v : 2 * v - 1], total[2 * v - 1]
    np.testing.assert_array_equal(e, (r[None, :] == np.arange(1, v)[:, None]).astype(np.int32))
    np.testing.assert_array_equal(c, (e * b).sum(axis=0, dtype=np.int32))  # the products' sum, mod 2^32
    counts = np.bincount(r, minlength=v) / n  # r mod 2^d is uniform
    assert np.all(np.abs(counts - 1 / v) < 0.05)


@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_key_digits_are_the_digits_of_the_unsigned_key(bits):
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
            value = key_digits(keys, d, bits)
            assert value.shape == (len(s),)
            want = [(u >> (d * bits)) & ((1 << bits) - 1) for u in unsigned]
            np.testing.assert_array_equal(value, want)


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_one_radix_round_gives_the_stable_sort_destinations(world, d):
    """One round of :class:`RadixSort` as every party runs it locally (the two openings
    summed here): digits in shuffled order and the opened tau give sigma[tau], sigma
    the stable sort of the digits in tau's order (numpy's stable argsort)."""
    import torch

    from secure_auc.mpc.sort.radix import digit_permutation, onehot_rows, rotate_rows, shuffled_bases

    rng = np.random.default_rng(10 * world + d)
    m, v = 300, 1 << d
    digits = rng.integers(0, v, m).astype(np.int32)
    digits[:40] = 1  # many ties
    tau = rng.permutation(m)
    seeds = [new_seed() for _ in range(world)]
    kind = f"onehot{d}"
    rand = [triple_shares(s, 0, m, kind).copy() for s in seeds]
    rand[1][CORRECTED[kind]] = triple_correction(seeds, 0, m, kind, 1)
    dig = share(rng, digits, world)
    u = sum(((dig[p] - rand[p][0]) & (v - 1)).astype(np.uint8) for p in range(world)) & (v - 1)
    u, tau_t = torch.from_numpy(u.astype(np.int64)), torch.from_numpy(tau)
    d_rot, masked = [], []
    for p in range(world):
        e = torch.from_numpy(rand[p][1:v])
        d_rot.append(rotate_rows(shuffled_bases(onehot_rows(e, u, p), tau_t, p), u))
        masked.append(d_rot[p][1:] - d_rot[p][0] - torch.from_numpy(rand[p][v : 2 * v - 1]))
    f = sum(masked)
    w = sum(digit_permutation(d_rot[p], torch.from_numpy(rand[p][1:v]), torch.from_numpy(rand[p][2 * v - 1 :]), f, p)
            for p in range(world))
    in_order = np.empty(m, dtype=np.int32)
    in_order[tau] = digits  # the digits in the order sorted so far
    sigma = np.empty(m, dtype=np.int64)
    sigma[np.argsort(in_order, kind="stable")] = np.arange(m)
    np.testing.assert_array_equal(w.numpy(), sigma[tau])


def _replicated_blocks(reps, batch, n, kind, rotate=True):
    """Every party's block of replicated one-hot randomness, corrected as its channel does."""
    from secure_auc.mpc.primitives.dealer import rep_block, rep_correction, rep_corrected, rep_rows

    q = rep_corrected(batch, rotate)
    corr = rep_correction(reps, batch, n, kind, q)
    out = []
    for i in range(3):
        block = rep_block((reps[i], reps[(i + 1) % 3]), batch, n, kind).copy()
        rows = rep_rows(kind, i, q)
        if rows is not None:
            block[rows] = corr
        out.append(block)
    return out


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("rotate", [True, False])
def test_replicated_randomness_is_the_one_hot_of_the_shared_r(d, rotate):
    """Among three: party i's second component is party i+1's first (both corrected alike),
    the three first components' E add up to the one-hot of (sum r^(i)) mod 2^d, r mod 2^d is
    uniform, and each corrected component reaches exactly its two holders."""
    from secure_auc.mpc.primitives.dealer import rep_corrected, rep_holders, rep_rows

    n, v = 4000, 1 << d
    kind = f"rep{d}"
    reps = [new_seed() for _ in range(3)]
    for batch in range(3):
        blocks = _replicated_blocks(reps, batch, n, kind, rotate)
        for i in range(3):
            np.testing.assert_array_equal(blocks[i][v:], blocks[(i + 1) % 3][1:v])  # the shared component
        r = sum(b[0] for b in blocks) & (v - 1)
        e = sum(b[1:v] for b in blocks)
        np.testing.assert_array_equal(e, (r[None, :] == np.arange(1, v)[:, None]).astype(np.int32))
        counts = np.bincount(r, minlength=v) / n
        assert np.all(np.abs(counts - 1 / v) < 0.05)
        q = rep_corrected(batch, rotate)
        assert sorted(p for p in range(3) if rep_rows(kind, p, q) is not None) == sorted(rep_holders(q))


def test_replicated_products_and_zero_shares_add_up():
    """z_0 + z_1 + z_2 = sum of x*y from replicated x, y; the zero shares add up to 0 and differ."""
    from secure_auc.mpc.primitives.dealer import zero_share
    from secure_auc.mpc.sort.radix import replicated_sum_of_products
    import torch

    rng = np.random.default_rng(0)
    x = rng.integers(-2**31, 2**31, size=(3, 3, 50), dtype=np.int64).astype(np.int32)  # components x rows x cols
    y = rng.integers(-2**31, 2**31, size=(3, 3, 50), dtype=np.int64).astype(np.int32)
    t = [torch.from_numpy(a) for a in x], [torch.from_numpy(a) for a in y]
    z = sum(replicated_sum_of_products((t[0][i], t[0][(i + 1) % 3]), (t[1][i], t[1][(i + 1) % 3])) for i in range(3))
    want = (x.sum(axis=0, dtype=np.int32) * y.sum(axis=0, dtype=np.int32)).sum(axis=0, dtype=np.int32)
    np.testing.assert_array_equal(z.numpy(), want)
    reps = [new_seed() for _ in range(3)]
    zs = [zero_share((reps[i], reps[(i + 1) % 3]), 4, 50) for i in range(3)]
    np.testing.assert_array_equal(sum(zs), np.zeros(50, dtype=np.int32))
    assert not np.array_equal(zs[0], zs[1])


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("first", [True, False])
def test_one_replicated_radix_round_gives_the_stable_sort_destinations(d, first):
    """The three parties' replicated_digit_permutation (no message; only u opened) add up to
    sigma[tau], sigma the stable sort of the digits in tau's order (numpy's stable argsort);
    round 0 (tau the identity) too."""
    import torch

    from secure_auc.mpc.primitives.dealer import zero_share
    from secure_auc.mpc.sort.radix import replicated_digit_permutation

    rng = np.random.default_rng(d + 10 * first)
    m, v = 300, 1 << d
    digits = rng.integers(0, v, m).astype(np.int32)
    digits[:40] = 1  # many ties
    tau = np.arange(m) if first else rng.permutation(m)
    reps = [new_seed() for _ in range(3)]
    blocks = _replicated_blocks(reps, 1, m, f"rep{d}")
    dig = share(rng, digits, 3)
    u = sum(((dig[p] - blocks[p][0]) & (v - 1)).astype(np.uint8) for p in range(3)) & (v - 1)
    u = torch.from_numpy(u.astype(np.int64))
    w = sum(replicated_digit_permutation((torch.from_numpy(blocks[p][1:v]), torch.from_numpy(blocks[p][v:])), u,
                                         None if first else torch.from_numpy(tau), p,
                                         torch.from_numpy(zero_share((reps[p], reps[(p + 1) % 3]), 1, m)))
            for p in range(3))
    in_order = np.empty(m, dtype=np.int32)
    in_order[tau] = digits
    sigma = np.empty(m, dtype=np.int64)
    sigma[np.argsort(in_order, kind="stable")] = np.arange(m)
    np.testing.assert_array_equal(w.numpy(), sigma[tau])


def test_each_party_gets_the_replication_seeds_of_its_two_components_only():
    """Among three, party p's set-up message holds its own seed and the replication seeds of
    components p and p + 1, never component p + 2's (with it, it would know r, hence every
    digit from the opened u); among two there are no replication seeds."""
    from secure_auc.mpc.primitives.dealer import _DealerState

    state = _DealerState(3)
    for p in range(3):
        got = state.seed_message(p)
        seeds = [tensor_to_seed(got[k : k + 2]) for k in range(0, got.numel(), 2)]
        assert seeds == [state.seeds[p], state.reps[p], state.reps[(p + 1) % 3]]
        assert state.reps[(p + 2) % 3] not in seeds and not set(seeds) & set(state.seeds[:p] + state.seeds[p + 1:])
    two = _DealerState(2)
    assert two.reps == [] and tensor_to_seed(two.seed_message(1)) == two.seeds[1]


def test_the_dealer_refuses_a_carried_share_out_of_step():
    """A carried inverse's share waits for the next forward shuffle, which must say it takes
    it (and the reverse): requests out of step are an error, never a wrong sort."""
    from secure_auc.mpc.primitives.dealer import _DealerState
    from secure_auc.mpc.primitives.shuffle import CARRY, INVERSE

    state = _DealerState(2)
    list(state.messages("shuffle", (0, 20, 1, 0, 4, 0, 0, 0)))
    assert list(state.messages("shuffle", (0, 20, 1, INVERSE | CARRY, 4, 0, 0, 0))) == []  # among 2: none sent
    with pytest.raises(RuntimeError, match="out of step"):
        list(state.messages("shuffle", (1, 20, 1, 0, 4, 0, 0, 0)))  # a forward that does not take it
    with pytest.raises(RuntimeError, match="out of step"):
        list(state.messages("shuffle", (1, 20, 1, CARRY, 4, 0, 0, 0)))  # nothing is waiting


@pytest.mark.parametrize("d", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_the_rows_gathered_by_u_are_the_rotations_of_their_definition(d, dtype):
    """onehot_rows and rotate_rows (their indices built row by row in place) against a plain
    numpy reading of their definitions: I_v = E_{(v - u) mod V} (E_0 = [rank 0] - sum of
    the others) and D'_t = base_{(t + u) mod V}, column by column; u as int32 or int64."""
    import torch

    from secure_auc.mpc.sort.radix import onehot_index, onehot_rows, rotate_rows

    rng = np.random.default_rng(d)
    v, m = 1 << d, 1000
    u = rng.integers(0, v, m)
    e = rng.integers(-(1 << 31), 1 << 31, size=(v - 1, m), dtype=np.int64).astype(np.int32)
    base = rng.integers(-(1 << 31), 1 << 31, size=(v, m), dtype=np.int64).astype(np.int32)
    ut = torch.from_numpy(u.astype(dtype))
    cols = np.arange(m)
    for rank in (0, 1):
        full = np.concatenate([[(1 if rank == 0 else 0) - e.sum(axis=0, dtype=np.int32)], e]).astype(np.int32)
        want = np.stack([full[(t - u) % v, cols] for t in range(1, v)])
        np.testing.assert_array_equal(onehot_rows(torch.from_numpy(e), ut, rank).numpy(), want)
    np.testing.assert_array_equal(onehot_index(ut, v).numpy(), np.stack([(t - u) % v for t in range(1, v)]))
    want = np.stack([base[(t + u) % v, cols] for t in range(v)])
    np.testing.assert_array_equal(rotate_rows(torch.from_numpy(base), ut).numpy(), want)
