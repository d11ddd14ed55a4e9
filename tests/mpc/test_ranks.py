"""The secure rank step against scipy's rankdata, with real CrypTen parties.

Each launch starts one spawned process per party (plus the TTP dealer) with
the project's launcher (:func:`secure_auc.mpc.launch.spawn_parties`: bounded
waits), runs several cases in the same processes (start-up costs seconds, the
cases milliseconds: the tests among the same parties share one launch, :func:`launched`),
and fails the test naming the party, with its traceback, if any party raises, dies or hangs.
(``crypten.mpc.run_multiprocess`` is not used: when a party raises it logs
an error and returns None, and the other parties block until torch's
30-minute timeout.)
"""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest
from scipy.stats import rankdata

from secure_auc.mpc import RANK_METHODS
from secure_auc.mpc.encoding import is_float32_exact
from secure_auc.mpc.launch import MPCError, spawn_parties

TIMEOUT = 60.0


# ----------------------------------------------------------------- launching parties


def run_parties(world: int, job, *args, provider: str = "tfp", timeout: float = TIMEOUT):
    """Run ``job(rank, *args)`` in ``world`` computing parties; return their results by rank.

    Raises AssertionError naming the party, with its traceback, if one raises,
    exits abnormally or the run exceeds ``timeout`` seconds; every process is
    stopped in any case.
    """
    try:
        done = spawn_parties(job, {r: args for r in range(world)}, world, provider=provider, timeout=30,
                             deadline=timeout)
    except MPCError as exc:
        raise AssertionError(f"{exc}\n{exc.details}") from None
    return [done[r] for r in range(world)]


def in_turn(rank, calls):
    """Each ``(job, args)`` of ``calls`` in turn in this party: their results, in order."""
    return [job(rank, *args) for job, args in calls]


# ----------------------------------------------------------------- jobs (run inside each party)


def _rank_cases(rank, cases, methods):
    """Each case: {source rank: scores}, ranked by every method in ``methods``.
    Returns, per case and method, this party's revealed 2 x ranks (or None) and
    the progress reports."""
    from secure_auc.mpc.ranks import rank_step

    out = []
    for case in cases:
        sources = sorted(case)
        sizes = [len(case[s]) for s in sources]
        first = sources[0]
        assert sources == list(range(first, first + len(sources)))
        by_method = {}
        for method in methods:
            reports = []
            mine = rank_step(case.get(rank), sizes, rank, first_client=first, method=method,
                             progress=lambda i, n: reports.append((i, n)))
            by_method[method] = (mine, reports)
        out.append(by_method)
    return out


def _primitive_cases(rank, pairs):
    return [_primitives(rank, x, y) for x, y in pairs]


def _primitives(rank, x, y):
    """secure_less / secure_eq / sign_bits / the network and its inverse, all opened to everyone."""
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.encoding import share_keys
    from secure_auc.mpc.primitives.circuits import secure_eq, secure_less, sign_bits
    from secure_auc.mpc.primitives.opening import open_to_all
    from secure_auc.mpc.primitives.randomness import dealer_randomness
    from secure_auc.mpc.sort import BitonicSort

    def opened(share):
        return open_to_all(share).numpy()

    world = backend.world_size()
    limbs = x.shape[1]
    # x from the last party, y from party 0: shared exactly (integer encoding)
    X = share_keys(x if rank == world - 1 else None, [len(x)], [world - 1], limbs)
    Y = share_keys(y if rank == 0 else None, [len(y)], [0], limbs)
    out = {
        "x": opened(X),
        "lt": opened(secure_less(X, Y)),
        "eq": opened(secure_eq(X, Y)),
        "sign": opened(sign_bits(X[:, 0] - Y[:, 0])),
    }
    n = 1 << (len(x).bit_length() - 1)  # the network alone: a power of two, no padding
    keys = share_keys(x[:n] if rank == world - 1 else None, [n], [world - 1], limbs)
    sorter = BitonicSort()
    with dealer_randomness() as rnd:
        out["sorted"] = opened(sorter.sort(keys, rnd))
        payload = torch.arange(n) if rank == 0 else torch.zeros(n, dtype=torch.long)  # public, in rank 0's share
        out["perm"] = opened(sorter.unsort(payload, rnd))  # sorted position -> input row
    out["stages"] = len(sorter.swaps)
    return out


def _failing(rank):
    if rank == 1:
        raise ValueError("boom in party 1")
    from secure_auc.mpc.comm import backend

    backend.barrier()  # the others wait for party 1, which never comes


# ----------------------------------------------------------------- cases


def expected_twice(scores):
    return (2 * (rankdata(scores) - 1)).astype(np.int64)


def ulp_scores(rng, n):
    third = 1 / 3
    base = np.array([third, np.nextafter(third, 1), np.nextafter(third, 0), -0.0, 0.0, 1e-300, -1e-300,
                     -2.5, 5e-324, -5e-324, 1e300, -np.inf, np.inf])
    return base[rng.integers(0, len(base), n)]


def tie_scores(rng, n, levels=5):
    return (rng.integers(0, levels, n) / levels - 0.4).astype(np.float32).astype(np.float64)


def split(scores, sizes, first):
    parts = np.split(scores, np.cumsum(sizes)[:-1])
    return {first + k: p for k, p in enumerate(parts)}


def progress_total(method, m, limbs):
    if method == "radix":
        return 32 * limbs // 2 + 2  # 2-bit digit rounds, mid-ranks, unsort
    n = 1 << (m - 1).bit_length()
    p = n.bit_length() - 1
    return p * (p + 1) + 1  # sort stages, mid-ranks, unsort stages


def check_rank_cases(world, cases, provider="tfp", methods=RANK_METHODS, results=None):
    """Every method's ranks equal scipy's rankdata (so they also equal each other); ``results``:
    the parties' results of :func:`_rank_cases` for ``cases`` (else they are run here)."""
    if results is None:
        results = run_parties(world, _rank_cases, cases, methods, provider=provider)
    for c, case in enumerate(cases):
        sources = sorted(case)
        scores = np.concatenate([case[s] for s in sources])
        twice = expected_twice(scores)
        limbs = 1 if is_float32_exact(scores) else 2
        for method in methods:
            offset = 0
            for r in range(world):
                mine, reports = results[r][c][method]
                if r in case:
                    n_r = len(case[r])
                    np.testing.assert_array_equal(mine, twice[offset : offset + n_r],
                                                  err_msg=f"{method}, case {c}, party {r}")
                    offset += n_r
                else:
                    assert mine is None
                total = progress_total(method, len(scores), limbs)
                assert reports == [(i, total) for i in range(1, total + 1)], (method, c, r)


def two_party_cases():
    rng = np.random.default_rng(2)
    return [
        {1: tie_scores(rng, 13)},  # protocol layout: the server (rank 0) holds nothing
        {0: tie_scores(rng, 6), 1: tie_scores(rng, 9)},  # both hold scores, 15 (not a power of 2)
        {0: ulp_scores(rng, 7), 1: ulp_scores(rng, 10)},  # float64: two limbs, 1-ulp neighbours, +-0, +-inf
        {1: np.array([0.5])},  # a single score
        {0: np.array([-0.0]), 1: np.array([0.0, -1.0, 1.0])},
        {1: np.full(8, 0.25)},  # all tied, exactly a power of two
    ]


def three_party_cases():
    rng = np.random.default_rng(3)
    a = ulp_scores(rng, 12)
    return [
        {1: a[:1], 2: a[1:]},  # a client with one sample, float64 ulps
        {1: tie_scores(rng, 10), 2: np.array([0.2])},
        {0: -np.abs(tie_scores(rng, 3)), 1: tie_scores(rng, 4), 2: tie_scores(rng, 5)},  # negative scores
        {1: tie_scores(rng, 1500, levels=300), 2: rng.random(1700).astype(np.float32).astype(np.float64)},
    ]


NARROW_BITS = [None, 22, 12]  # the narrow shuffles' widths (None: whole words)
BUDGET = 4096  # words per request in the network batches' test; one stage needs 512 products


def budget_scores():
    return np.round(np.random.default_rng(5).random(1024), 2)


@functools.lru_cache(maxsize=None)
def launched(world: int, provider: str) -> list:
    """The results, by rank, of one launch of ``world`` parties (``provider``'s randomness) that
    runs every test's cases among such parties in turn: among 2 with tfp the ranks, the
    comparisons, the narrow shuffles and the network's batches (last: its job narrows the
    network's batches for the rest of the process); among 3 with ttp the ranks and the narrow
    shuffles."""
    if (world, provider) == (2, "tfp"):
        calls = [(_rank_cases, (two_party_cases(), RANK_METHODS)), (_primitive_cases, (comparison_pairs(2),)),
                 (_narrow_shuffle, (NARROW_BITS,)), (_network_requests, (budget_scores(), BUDGET))]
    else:
        assert (world, provider) == (3, "ttp")
        calls = [(_rank_cases, (three_party_cases(), RANK_METHODS)), (_narrow_shuffle, (NARROW_BITS,))]
    by_rank = run_parties(world, in_turn, calls, provider=provider)
    return [[got[i] for got in by_rank] for i in range(len(calls))]  # per call, the parties' results by rank


def test_two_parties_ties_float64_ulps_signed_zero():
    check_rank_cases(2, two_party_cases(), results=launched(2, "tfp")[0])


def test_three_parties_single_sample_client_float64_ttp():
    check_rank_cases(3, three_party_cases(), provider="ttp", results=launched(3, "ttp")[0])


def test_four_parties_not_power_of_two():
    rng = np.random.default_rng(4)
    s = tie_scores(rng, 17, levels=6)
    cases = [
        split(s, [5, 1, 11], 1),  # 17 scores among 3 clients, server holds none
        split(ulp_scores(rng, 21), [4, 9, 1, 7], 0),  # all four hold float64 scores
    ]
    check_rank_cases(4, cases)


def comparison_pairs(world):
    rng = np.random.default_rng(world)
    lo, hi = -(2**31), 2**31 - 1
    # one limb: the extremes of the 32-bit range, neighbours, equal values
    edge = np.array([lo, lo + 1, -1, 0, 1, hi - 1, hi])
    x1 = np.concatenate([np.repeat(edge, len(edge)), rng.integers(lo, hi + 1, 30)]).reshape(-1, 1)
    y1 = np.concatenate([np.tile(edge, len(edge)), rng.integers(lo, hi + 1, 30)]).reshape(-1, 1)
    # two limbs: hi signed 32-bit, lo unsigned 32-bit, equal hi with lo at the extremes
    lo_edge = np.array([0, 1, 2**32 - 2, 2**32 - 1])
    x2 = np.stack([np.repeat(edge[:4], 16), np.tile(np.repeat(lo_edge, 4), 4)], axis=1)
    y2 = np.stack([np.repeat(edge[:4], 16)[::-1].copy(), np.tile(lo_edge, 16)], axis=1)
    y2[::3, 0] = x2[::3, 0]
    return [(x1, y1), (x2, y2)]


@pytest.mark.parametrize("world", [2, 3])
def test_comparison_at_the_limb_limits_and_network(world):
    pairs = comparison_pairs(world)
    opened = launched(2, "tfp")[1][0] if world == 2 else run_parties(world, _primitive_cases, pairs)[0]
    for (x, y), out in zip(pairs, opened):
        tx, ty = [tuple(r) for r in x], [tuple(r) for r in y]
        np.testing.assert_array_equal(out["x"], x)  # precision 0: exact
        np.testing.assert_array_equal(out["lt"], [a < b for a, b in zip(tx, ty)])
        np.testing.assert_array_equal(out["eq"], [a == b for a, b in zip(tx, ty)])
        np.testing.assert_array_equal(out["sign"], x[:, 0] < y[:, 0])
        n = len(out["perm"])
        order = sorted(range(n), key=lambda i: tuple(x[i]))
        np.testing.assert_array_equal(out["sorted"], x[:n][order])
        # unsort maps the sorted positions back: row i of the input sits at sorted position perm[i]
        np.testing.assert_array_equal(out["sorted"][out["perm"]], x[:n])
        p = n.bit_length() - 1
        assert out["stages"] == p * (p + 1) // 2


def test_a_failing_party_fails_the_test_quickly():
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"\(rank 1\) failed: ValueError: boom in party 1"):
        run_parties(3, _failing)
    assert time.monotonic() - start < 30


def _network_requests(rank, scores, budget):
    """The network rank step with a small batch budget; every batch of randomness asked of the dealer."""
    import functools

    from secure_auc.mpc import ranks
    from secure_auc.mpc.primitives import dealer
    from secure_auc.mpc.sort import midranks

    asked = []
    shares = dealer.DealerChannel.shares

    def recording(self, kind, n):
        asked.append((kind, n))
        return shares(self, kind, n)

    dealer.DealerChannel.shares = recording
    midranks.BitonicSort = functools.partial(midranks.BitonicSort, batch_words=budget)
    twice = ranks.rank_step(scores if rank == 1 else None, [len(scores)], rank, method="network")
    return twice, asked


def test_network_batches_stay_within_the_budget_after_the_sort():
    # the unsort once sized its batches by everything the run had used so far (sort and
    # mid-ranks included): at 2^20 rows the dealer built 10 GB of triples at once
    scores = budget_scores()
    results = launched(2, "tfp")[3]
    np.testing.assert_array_equal(results[1][0], 2 * (rankdata(scores) - 1))
    for _, asked in results:
        assert asked and max(n for _, n in asked) <= BUDGET, sorted(asked, key=lambda a: -a[1])[:3]


def _narrow_shuffle(rank, bits_list):
    """Shuffle a known int32 column forward and back with each ``bits`` (None: whole words),
    then a known int64 column whole and with 40 bits, opening both results; returns, per
    case, the opened values and the bytes this party sent and received."""
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.primitives.dealer import DealerChannel
    from secure_auc.mpc.primitives.opening import open_all
    from secure_auc.mpc.primitives.shuffle import Shuffle

    m = 5000
    x = torch.arange(m, dtype=torch.int32) * 7919 + (1 << 30)  # high bits set: they must not matter
    x64 = torch.arange(m, dtype=torch.int64) * 1_000_003 + (3 << 50)
    cases = [(x, bits, bits or 32) for bits in bits_list] + [(x64, bits, None) for bits in (None, 40)]
    comm = backend.comm()
    out = []
    for values, bits, opened_bits in cases:
        share = (values if rank == 0 else torch.zeros_like(values)).unsqueeze(1)
        ch = DealerChannel()
        sh = Shuffle(ch)
        before = int(comm.get_communication_stats()["bytes"])
        y, inst = sh.forward(share, bits=bits)
        back = sh.inverse(y, inst, bits=bits)
        moved = int(comm.get_communication_stats()["bytes"]) - before
        opened, again = open_all([y[:, 0].contiguous(), back[:, 0].contiguous()], bits=opened_bits)
        ch.close()
        out.append((opened.numpy(), again.numpy(), moved))
    return out


@pytest.mark.parametrize("world, provider", [(2, "tfp"), (3, "ttp")])
def test_narrow_shuffles_are_exact_mod_2_to_the_bits_and_send_fewer_bytes(world, provider):
    """A shuffle with ``bits`` moves the values mod 2^bits (forward: a permutation of them;
    inverse: back in place), with the low ceil(bits / 8) bytes of each word on the wire:
    about half the bytes of whole words at 12 bits (2 bytes of 4); int64 words at 40 bits
    carry 5 bytes of 8."""
    bits_list = NARROW_BITS
    res = launched(world, provider)[2 if world == 2 else 1]
    x = (np.arange(5000, dtype=np.int64) * 7919 + (1 << 30)) & 0xFFFFFFFF
    for i, bits in enumerate(bits_list):
        mask = (1 << (bits or 32)) - 1
        opened, again = (r.astype(np.int64) & mask for r in res[0][i][:2])
        assert not np.array_equal(opened, x & mask)  # shuffled
        np.testing.assert_array_equal(np.sort(opened), np.sort(x & mask))
        np.testing.assert_array_equal(again, x & mask)
    for party in res:
        whole, b22, b12 = (moved for _, _, moved in party[:3])
        assert b12 < b22 < whole and b12 <= 0.6 * whole
    x64 = np.arange(5000, dtype=np.int64) * 1_000_003 + (3 << 50)
    for i, bits in ((3, None), (4, 40)):
        mask = (1 << bits) - 1 if bits else -1
        opened, again = (r & mask for r in res[0][i][:2])
        assert not np.array_equal(opened, x64 & mask)
        np.testing.assert_array_equal(np.sort(opened), np.sort(x64 & mask))
        np.testing.assert_array_equal(again, x64 & mask)
    for party in res:
        whole, b40 = party[3][2], party[4][2]
        assert b40 <= 0.65 * whole  # 5 bytes of 8 per word, and the messages' framing
