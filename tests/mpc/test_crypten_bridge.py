"""Scores held as a CrypTen MPCTensor, ranked and evaluated on shares
(:mod:`secure_auc.mpc.crypten.bridge`), against scipy's rankdata, scikit-learn's AUC and the
plain protocol on the decoded scores with the same noise keys.  The tests among the same parties
share one launch (:func:`launched`)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from secure_auc.data import ClientData
from secure_auc.dp import NoNoise, RandomizedResponse, StatisticsMechanism
from secure_auc.protocol import Client, Server
from secure_auc.protocol.plain import run_plain
from secure_auc.dp.rng import ClientRngs

from .test_ranks import in_turn, run_parties

KEYS = [0x1234_5678_9ABC_DEF0_1111_2222_3333_4444, 0xFEDC_BA98_7654_3210_5555_6666_7777_8888, 77]


def mechanisms():
    return [NoNoise(), RandomizedResponse(1.0), StatisticsMechanism(1.0, allocation="adaptive")]


def _bridge(rank, parts, labels, owners, sizes, methods):
    """x = the sum of every party's part (each shared by its party: no party knows x); its
    mid-ranks by each method (opened to party 0 only, as rank_mpctensor's docstring shows:
    None elsewhere) and the DP AUC of each mechanism."""
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.crypten import evaluate_mpctensor, install, rank_mpctensor
    from secure_auc.validation import InputError

    crypten = backend.crypten
    world = backend.world_size()
    out = {}
    with install():
        x = None
        for r in range(world):
            t = crypten.cryptensor(torch.from_numpy(parts[r]) if r == rank else torch.empty(len(parts[r])), src=r)
            x = t if x is None else x + t
        out["decoded"] = x.get_plain_text().numpy().astype(np.float64)  # test only: the reference's input
        for method in methods:
            try:
                ranks = rank_mpctensor(x, method=method).get_plain_text(dst=0)
                out[method] = None if ranks is None else ranks.numpy()
            except InputError as exc:
                out[method] = str(exc)
        if labels is not None:
            mine = labels[owners.index(rank)] if rank in owners else None
            key = KEYS[owners.index(rank)] if rank in owners else None
            out["evaluation"] = evaluate_mpctensor(x, mine, owners=owners, sizes=sizes, mechanisms=mechanisms(),
                                                   noise_key=key, method=methods[0])
    return out


def plain_estimates(scores, labels, sizes):
    """The plain protocol on the decoded scores, with the owners' noise keys."""
    parts = np.split(scores, np.cumsum(sizes)[:-1])
    out = []
    for mech in mechanisms():
        roles = [Client(k, ClientData(p, y), mech, ClientRngs.from_key(KEYS[k])) for k, (p, y) in
                 enumerate(zip(parts, labels))]
        out.append(run_plain(roles, Server(mech))[0])
    return out


def split_parts(scores, world, rng):
    """Additive parts of the scores, one per party (float64 sums; the tests read the decoded
    value back)."""
    parts = [rng.integers(-200, 200, len(scores)) / 64.0 for _ in range(world - 1)]
    return [scores - sum(parts)] + parts


def check(results, world, methods, labels=None, sizes=None):
    decoded = results[0]["decoded"]
    want = rankdata(decoded)
    for r in range(world):
        np.testing.assert_array_equal(results[r]["decoded"], decoded)
        for method in methods:
            if r == 0:
                np.testing.assert_array_equal(results[r][method], want, err_msg=method)
            else:
                assert results[r][method] is None, (method, r)
    if labels is None:
        return
    estimates, aggregates = results[0]["evaluation"]
    assert all(results[r]["evaluation"] is None for r in range(1, world))
    y = np.concatenate(labels)
    assert float(estimates[0].auc) == pytest.approx(roc_auc_score(y, decoded), abs=1e-12)
    for got, ref in zip(estimates, plain_estimates(decoded, labels, sizes)):
        assert float(got.auc) == float(ref.auc)
        assert float(got.raw_auc) == float(ref.raw_auc)


def two_party_case():
    """_bridge's arguments: many ties, negative scores, the range's ends 1 ulp apart; both methods."""
    rng = np.random.default_rng(5)
    m = 300
    scores = rng.integers(-6, 6, m) / 4.0  # many ties, negative scores
    scores[:4] = [-(2.0**14) + 2.0**-16, 2.0**14 - 2.0**-16, 2.0**-16, -(2.0**-16)]  # the range's ends, 1 ulp apart
    parts = split_parts(scores, 2, rng)
    sizes = [120, 180]
    labels = [(rng.random(n) < 0.4).astype(np.int8) for n in sizes]
    return parts, labels, [0, 1], sizes, ["radix", "network"]


def three_party_cases():
    """_bridge's arguments among 3 with the dealer: ties, then scores beyond the 1-limb range."""
    rng = np.random.default_rng(6)
    scores = rng.normal(size=257).astype(np.float32).astype(np.float64)
    scores[::7] = scores[1]  # ties
    parts = split_parts(scores, 3, rng)
    sizes = [100, 157]
    labels = [(rng.random(n) < 0.3).astype(np.int8) for n in sizes]
    too_big = split_parts(np.array([0.5, 2.0**14, -1.0, 2.0**14, -(2.0**14) - 2.0**-16]), 3, rng)
    return (parts, labels, [1, 2], sizes, ["radix"]), (too_big, None, None, None, ["radix", "network"])


@functools.lru_cache(maxsize=None)
def launched(world: int, provider: str) -> list:
    """Per test's call, the parties' results by rank, of one launch of ``world`` parties that runs
    every test's cases among such parties in turn: among 2 (tfp) the two-party case and the whole
    range; among 3 (ttp) the three-party case, the whole range, then the scores the network
    refuses."""
    if (world, provider) == (2, "tfp"):
        calls = [(_bridge, two_party_case()), (_wide, wide_case(2))]
    else:
        assert (world, provider) == (3, "ttp")
        ties, too_big = three_party_cases()
        calls = [(_bridge, ties), (_wide, wide_case(3)), (_bridge, too_big)]
    by_rank = run_parties(world, in_turn, calls, provider=provider)
    return [[got[i] for got in by_rank] for i in range(len(calls))]


def test_two_parties_ties_negatives_range_both_methods():
    parts, labels, _, sizes, methods = two_party_case()
    results = launched(2, "tfp")[0]
    check(results, 2, methods, labels, sizes)


def test_three_parties_dealer_and_out_of_range_refused():
    (_, labels, _, sizes, _), _ = three_party_cases()
    results = launched(3, "ttp")[0]
    check(results, 3, ["radix"], labels, sizes)
    wide = launched(3, "ttp")[2]
    np.testing.assert_array_equal(wide[0]["radix"], [3, 4.5, 2, 4.5, 1])  # two-limb keys
    for r in range(3):  # opened to party 0 only; the network refuses them at every party
        assert r == 0 or wide[r]["radix"] is None
        assert "outside the fixed-point range the sorting network ranks" in wide[r]["network"]


def _wide(rank, parts, labels, owners, sizes):
    """x given by its int64 shares (part ``rank`` at party ``rank``: test data, any 64-bit
    fixed-point values); its mid-ranks (opened here, test only) and the DP AUC."""
    import torch
    from crypten.mpc import MPCTensor

    from secure_auc.mpc.crypten import evaluate_mpctensor, install, rank_mpctensor
    from secure_auc.validation import InputError

    with install():
        x = MPCTensor.from_shares(torch.from_numpy(parts[rank]), precision=16)
        out = {"radix": rank_mpctensor(x).get_plain_text().numpy()}
        try:
            rank_mpctensor(x, method="network")
        except InputError as exc:
            out["network"] = str(exc)
        mine = labels[owners.index(rank)] if rank in owners else None
        key = KEYS[owners.index(rank)] if rank in owners else None
        out["evaluation"] = evaluate_mpctensor(x, mine, owners=owners, sizes=sizes, mechanisms=mechanisms(),
                                               noise_key=key)
    return out


def wide_values(m, rng):
    """64-bit fixed-point values over the whole range (both ends included), with ties; each
    exact as a float64 (multiples of 2^12 up to 2^62), so the references can use floats."""
    v = rng.integers(-(1 << 50), 1 << 50, m) << 12
    v[::5] = v[1]  # ties
    v[:8] = [-(1 << 63), (1 << 63) - 1, -(1 << 63) + (1 << 11), 0, -1, 1, 1 << 30, -(1 << 30) - 1]
    return v


def int_parts(v, world, rng):
    """Additive int64 shares of v (wrapping), one per party."""
    parts = [rng.integers(-(1 << 63), 1 << 63, len(v), dtype=np.int64) for _ in range(world - 1)]
    return [v - sum(parts, np.zeros_like(v))] + parts


def wide_case(world):
    """_wide's arguments among ``world`` parties: values over the whole range, and its values."""
    rng = np.random.default_rng(world)
    v = wide_values(301, rng)
    sizes = [140, 161]
    labels = [(rng.random(n) < 0.4).astype(np.int8) for n in sizes]
    return int_parts(v, world, rng), labels, [0, 1], sizes


@pytest.mark.parametrize("world, provider", [(2, "tfp"), (3, "ttp")])
def test_the_whole_fixed_point_range_is_ranked_exactly(world, provider):
    v = wide_values(301, np.random.default_rng(world))
    decoded = v.astype(np.float64) / 2.0**16
    assert len(np.unique(decoded)) == len(np.unique(v))  # the floats keep the order and the ties
    _, labels, _, sizes = wide_case(world)
    results = launched(world, provider)[1]
    for r in range(world):
        np.testing.assert_array_equal(results[r]["radix"], rankdata(v), err_msg=f"party {r}")
        assert "the radix sort ranks the whole range" in results[r]["network"]
    estimates, _ = results[0]["evaluation"]
    y = np.concatenate(labels)
    assert float(estimates[0].auc) == pytest.approx(roc_auc_score(y, decoded), abs=1e-12)
    for got, ref in zip(estimates, plain_estimates(decoded, labels, sizes)):
        assert float(got.auc) == float(ref.auc)
