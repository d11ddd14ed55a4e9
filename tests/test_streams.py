"""Many clients served at once draw exactly what each draws alone, from its own stream only."""

from __future__ import annotations

import functools
import hashlib
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chisquare
from sklearn.metrics import roc_auc_score

from secure_auc import make_mechanism
from secure_auc.data.io import ClientData
from secure_auc.dp.discrete import bernoulli_exp, discrete_gaussian, discrete_laplace, negative_binomial
from secure_auc.dp.randomized_response import randomized_response
from secure_auc.dp.rng import ClientRngs, client_key
from secure_auc.dp.streams import KeyStreams
from secure_auc.metrics import midranks
from secure_auc.protocol import Server
from secure_auc.protocol.client import Client, ClientGroup
from secure_auc.protocol.plain import run_plain

KEYS = [client_key(11, k) for k in range(40)]


@pytest.mark.parametrize("n", [9, 300, 5000])
def test_the_stream_is_shake128_of_the_key_and_name(n):
    # within the first words, beyond them (the longer rows) and beyond those (read to length)
    s = KeyStreams([KEYS[0], KEYS[1]], "noise|0", words=4)
    got = s._take(np.repeat([1, 0], n))
    for k, part in ((1, got[:n]), (0, got[n:])):
        want = hashlib.shake_128(int(KEYS[k]).to_bytes(16, "little") + b"secure-auc stream|noise|0").digest(8 * n)
        assert part.tolist() == np.frombuffer(want, dtype="<u8").tolist()


def test_one_stream_reads_the_same_words_as_one_of_several():
    """A client's own stream (one key) is read as a slice of its words; one of several keys'
    streams through the per-owner path: the same words for any sequence of draws, past
    the first 32 and 256 words included."""
    rng = np.random.default_rng(0)
    alone, among = KeyStreams([7], "x"), KeyStreams([7, 8], "x")
    total = 0
    for _ in range(200):
        n, high = int(rng.integers(0, 50)), int(rng.integers(1, 1 << 40))
        owner = np.zeros(n, dtype=np.int64)
        assert np.array_equal(alone.below(owner, high), among.below(owner, high))
        total += n
    assert total > 8 * 32 * 2  # beyond the general path's first reads
    one = KeyStreams([KEYS[0]], "noise|0")
    got = np.concatenate([one._take(np.zeros(n, dtype=np.int64)) for n in (3, 300, 5000)])
    want = hashlib.shake_128(int(KEYS[0]).to_bytes(16, "little") + b"secure-auc stream|noise|0").digest(8 * got.size)
    assert got.tolist() == np.frombuffer(want, dtype="<u8").tolist()


def test_several_streams_read_far_give_each_owner_its_own_words_in_order():
    """Draws of several owners, mixed in one call and of very different lengths (some owners
    thousands of words past their first reads, which are read again longer), give each
    owner the words of its own SHAKE-128 stream, consecutively, in the order of its entries."""
    rng = np.random.default_rng(1)
    keys = [int(k) for k in KEYS[:6]]
    s = KeyStreams(keys, "noise|far")
    got = [[] for _ in keys]
    for _ in range(60):
        owner = rng.choice(6, size=int(rng.integers(0, 400)), p=[0.5, 0.3, 0.1, 0.05, 0.04, 0.01])
        words = s._take(owner)
        for k in range(6):
            got[k].extend(words[owner == k].tolist())
    assert len(got[0]) > 8 * 256 and len(got[5]) < 256  # one owner far past its reads, one not past the first
    for k, key in enumerate(keys):
        want = hashlib.shake_128(key.to_bytes(16, "little") + b"secure-auc stream|noise|far").digest(8 * len(got[k]))
        assert got[k] == np.frombuffer(want, dtype="<u8").tolist(), k


def test_below_is_uniform_and_in_range():
    s = KeyStreams(KEYS[:8], "t")
    owner = np.tile(np.arange(8), 6_000)
    x = s.below(owner, 7)
    assert x.min() == 0 and x.max() == 6
    assert chisquare(np.bincount(x, minlength=7)).pvalue > 1e-3
    with pytest.raises(ValueError):
        s.below(owner[:3], 0)


def test_below_is_exactly_uniform_for_highs_beyond_32_bits():
    # h = 3 * 2^61: a word w mod h without the rejection of w < 2^64 mod h = 2^62 would put
    # 3/8, 3/8, 2/8 of the mass on the thirds of [0, h); table sizes and scales reach such bounds
    s = KeyStreams(KEYS[:8], "t")
    h = 3 << 61
    x = s.below(np.tile(np.arange(8), 6_000), np.full(48_000, h, dtype=np.int64))
    assert x.min() >= 0 and x.max() < h
    assert chisquare(np.bincount(x // (1 << 61), minlength=3)).pvalue > 1e-3


def _alone_vs_together(draw, params):
    together = draw(KeyStreams(KEYS, "noise|0"), params)
    alone = np.array([draw(KeyStreams([k], "noise|0"), params[i : i + 1])[0] for i, k in enumerate(KEYS)])
    return together, alone


@pytest.mark.parametrize("scale", [0.7, 3.0, 250.0, 1e9])
def test_discrete_laplace_of_many_clients_equals_each_alone(scale):
    scales = np.linspace(0.5, 2.0, len(KEYS)) * scale  # a different parameter per client, too
    together, alone = _alone_vs_together(lambda src, p: discrete_laplace(src, p, p.shape), scales)
    assert together.tolist() == alone.tolist()


@pytest.mark.parametrize("sigma", [0.4, 2.2, 5e4, 3e9])
def test_discrete_gaussian_of_many_clients_equals_each_alone(sigma):
    sigmas = np.linspace(0.5, 2.0, len(KEYS)) * sigma
    together, alone = _alone_vs_together(lambda src, p: discrete_gaussian(src, p, p.shape), sigmas)
    assert together.tolist() == alone.tolist()


@pytest.mark.parametrize("r", [Fraction(1, 7), Fraction(1, 458_407), Fraction(23, 7)])
@pytest.mark.parametrize("scale", [0.7, 250.0, 6.4e5, 1e9])
def test_negative_binomial_of_many_clients_equals_each_alone(r, scale):
    scales = np.linspace(0.5, 2.0, len(KEYS)) * scale
    together, alone = _alone_vs_together(lambda src, p: negative_binomial(src, r, p, p.shape), scales)
    assert together.tolist() == alone.tolist()
    # several entries per client (repetitions): still each client's own draws
    reps = np.tile(scales, (3, 1))
    both = negative_binomial(KeyStreams(KEYS, "noise|1"), r, reps, reps.shape)
    each = [negative_binomial(KeyStreams([k], "noise|1"), r, reps[:, i : i + 1], (3, 1)).ravel()
            for i, k in enumerate(KEYS)]
    assert both.T.tolist() == [e.tolist() for e in each]


def test_big_integer_bernoulli_per_entry_choice():
    # one client with a ratio beyond int64 next to clients with small ones: each draws what it draws alone
    num = np.array([3 * 10**30] + [1] * (len(KEYS) - 1), dtype=object)
    den = np.array([2 * 10**30] + [2] * (len(KEYS) - 1), dtype=object)
    together = bernoulli_exp(KeyStreams(KEYS, "noise|0"), num, den)
    alone = [bool(bernoulli_exp(KeyStreams([k], "noise|0"), num[i : i + 1], den[i : i + 1])[0])
             for i, k in enumerate(KEYS)]
    assert together.tolist() == alone


def test_many_clients_laplace_draws_have_the_geometric_pmf():
    keys = [client_key(5, k) for k in range(30_000)]
    t = 2.5
    q = np.exp(-1 / t)
    x = discrete_laplace(KeyStreams(keys, "noise|0"), t, (len(keys),))
    ks = np.arange(-8, 9)
    counts = np.array([(x == k).sum() for k in ks] + [(np.abs(x) > 8).sum()])
    probs = (1 - q) / (1 + q) * q ** np.abs(ks)
    assert chisquare(counts, np.append(probs, 1 - probs.sum()) * len(x)).pvalue > 1e-3


def _clients(sizes, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        y = rng.integers(0, 2, n)
        s = np.round(rng.random(n) + 0.3 * y, 2)  # ties within and across clients
        out.append(ClientData(s, y))
    return out


MECHANISMS = [
    ("rr", dict(epsilon=1.0)),
    ("laplace", dict(epsilon=1.0, allocation="adaptive")),
    ("laplace", dict(epsilon=0.5, allocation="split", sensitivity="global")),
    ("gaussian", dict(epsilon=1.0, delta=1e-6, allocation="orthogonal")),
    ("distributed", dict(epsilon=1.0, clients=25)),
    ("distributed", dict(epsilon=1.0, clients=25, delta=1e-6)),
    ("distributed", dict(epsilon=1.0, clients=25, noise="gaussian", delta=1e-6)),
]


@pytest.mark.parametrize("name, kwargs", MECHANISMS, ids=lambda v: str(v))
def test_a_group_releases_what_each_client_releases_alone(name, kwargs):
    datas = _clients([1, 3, 1, 7, 2] * 5)
    mech = make_mechanism(name, **kwargs)
    ranks = midranks(np.concatenate([d.scores for d in datas]))
    total = len(ranks)
    keys = KEYS[: len(datas)]
    group = ClientGroup(0, datas, mech, keys)
    group.set_ranks(ranks, total)
    together = group.statistics_messages()
    alone, at = [], 0
    for k, d in enumerate(datas):
        c = Client(k, d, mech, ClientRngs.from_key(keys[k]))
        c.set_ranks(ranks[at : at + len(d)], total)
        at += len(d)
        alone.append(c.statistics_message())
    assert together == alone
    # a mechanism with other parameters draws from other streams
    other_kwargs = dict(kwargs, epsilon=kwargs["epsilon"] * (1 + 1e-12))
    other = ClientGroup(0, datas, make_mechanism(name, **other_kwargs), keys)
    other.set_ranks(ranks, total)
    assert other.statistics_messages() != together


def test_rr_flips_depend_on_the_clients_own_stream_only():
    labels = np.ones(40, dtype=np.int8)
    owner = np.repeat(np.arange(20), 2)
    together = randomized_response(labels, 0.3, KeyStreams(KEYS[:20], "labels|0"), owner)
    alone = np.concatenate([randomized_response(labels[:2], 0.3, KeyStreams([k], "labels|0")) for k in KEYS[:20]])
    assert together.tolist() == alone.tolist()


def test_plain_protocol_with_groups_equals_one_client_per_role():
    datas = _clients([4, 1, 6, 2, 3, 1], seed=3)
    keys = KEYS[:6]
    y = np.concatenate([d.labels for d in datas])
    s = np.concatenate([d.scores for d in datas])
    none = make_mechanism("none")
    est, _, _ = run_plain([ClientGroup(0, datas[:4], none, keys[:4]), ClientGroup(4, datas[4:], none, keys[4:])],
                          Server(none))
    assert float(est.auc) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    mech = make_mechanism("laplace", 1.0)
    _, grouped, inbox = run_plain([ClientGroup(0, datas[:4], mech, keys[:4]), ClientGroup(4, datas[4:], mech, keys[4:])],
                                  Server(mech))
    _, single, _ = run_plain([Client(k, d, mech, ClientRngs.from_key(keys[k])) for k, d in enumerate(datas)],
                             Server(mech))
    assert grouped == single
    # each client's scores reach the server as a permutation of its own, in its own message
    sent = [m for m in inbox.messages if hasattr(m, "scores")]
    assert [m.client for m in sent] == list(range(6))
    for m, d in zip(sent, datas):
        assert sorted(m.scores.tolist()) == sorted(d.scores.tolist())


def test_skellam_noise_is_refused_in_every_release():
    """Skellam's Poisson shares cannot be drawn exactly at the means a release needs: drawing
    them from the clients' streams, an evaluation and a session refuse it before any party
    starts; from a numpy Generator (analysis, simulation) they are still drawn."""
    from secure_auc import evaluate
    from secure_auc.data import ClientData
    from secure_auc.session import MPCSession
    from secure_auc.validation import InputError

    mech = make_mechanism("distributed", 1.0, clients=3, delta=1e-6, noise="skellam")
    cal = mech.calibration(3000, 3)
    with pytest.raises(InputError, match="Skellam noise is for analysis only"):
        cal.draw(KeyStreams(KEYS[:3], "noise|b"), (3,))
    e_c, e_p = cal.draw(np.random.default_rng(0), (3,))
    assert e_c.shape == e_p.shape == (3,)
    clients = [ClientData(np.linspace(0, 1, 10), np.arange(10) % 2, f"client {k}") for k in range(3)]
    with pytest.raises(InputError, match="noise='gaussian'"):
        evaluate(clients, mechanism=mech, protocol="mpc")
    with pytest.raises(InputError, match="Skellam noise is for analysis only"):
        MPCSession([c.labels for c in clients], mech)
    make_mechanism("distributed", 1.0, clients=3, delta=1e-6).check_release()  # the exact Gaussian shares pass


@functools.lru_cache(maxsize=1)
def _many_client_keys(count: int) -> list:
    """The keys of ``count`` clients (made once for both cases below)."""
    return [client_key(9, k) for k in range(count)]


@pytest.mark.parametrize("delta", [None, 1e-6])
def test_distributed_shares_of_many_clients_sum_to_the_curators_variance(delta):
    mech = make_mechanism("distributed", 1.0, clients=4000, delta=delta)
    cal = mech.calibration(50_000, 4000)
    # 60 runs of 4000 clients' shares drawn at once: 240,000 clients' keys, one share each (independent
    # streams as 60 separate draws of 4000 would be; one vectorised draw is 2 to 3 times faster)
    keys = _many_client_keys(60 * 4000)
    sums = np.stack([v.reshape(60, 4000).sum(axis=1) for v in cal.draw(KeyStreams(keys, "noise|0"), (60 * 4000,))],
                    axis=1)
    # 60 totals of 4000 shares each: their variance is the curator's (K = h), within sampling error
    for got, want in zip(sums.var(axis=0, ddof=1), (cal.var_c, cal.var_p)):
        assert 0.55 < got / want < 1.6
