"""Opening shared values to every party (:func:`secure_auc.mpc.primitives.opening.open_all`)
among real parties: the all-gather of shares and, for large openings among 3 or more
parties, the reduce-scatter then all-gather, against the plain values and their bytes.

The parties of one world run every case of this file in one launch (:func:`launched`: a
start of the parties costs seconds, a case milliseconds); each test checks its own cases'
results."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from secure_auc.mpc.primitives.opening import SCATTER_MIN_BYTES

from .test_ranks import run_parties

SIZES = [5, 1_000, SCATTER_MIN_BYTES // 4 + 7]  # the last one goes by reduce-scatter among 3


def _plain(n: int, kind: int):
    """Plain values of one kind (0: XOR-shared int64 pairs, 1: additively shared int32, 2: uint8), from
    their own seed, and the generator that then draws their shares."""
    rng = np.random.default_rng([n, kind])
    if kind == 0:
        return rng.integers(-2**63, 2**63 - 1, (n, 2), dtype=np.int64), rng
    if kind == 1:
        return rng.integers(-2**31, 2**31, n, dtype=np.int32), rng
    return rng.integers(0, 256, n, dtype=np.uint8), rng


@functools.lru_cache(maxsize=2)
def values(n: int) -> list:
    """Plain values (XOR-shared int64, additively shared int32 and uint8) of size ``n`` (cached: the
    test process checks every party's openings against the same values)."""
    return [_plain(n, kind)[0] for kind in range(3)]


def shares_of(n: int, world: int, kinds=(0, 1, 2)):
    """Every party's shares of :func:`values` ``(n)``, by party, then by kind (None for a kind not in
    ``kinds``: a party that opens only the int32 values draws only theirs)."""
    out = [[None] * 3 for _ in range(world)]
    for i in kinds:
        x, rng = _plain(n, i)
        info = np.iinfo(x.dtype)
        parts = [rng.integers(info.min, info.max, x.shape, dtype=x.dtype, endpoint=True) for _ in range(world - 1)]
        if i == 0:
            last = x ^ np.bitwise_xor.reduce(parts + [np.zeros_like(x)])
        else:
            with np.errstate(over="ignore"):
                last = x - sum(parts, np.zeros_like(x))
        for p, s in enumerate(parts + [last]):
            out[p][i] = s
    return out


def _open_job(rank, sizes):
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.primitives.opening import open_all

    world = backend.world_size()
    out = []
    for n in sizes:
        mine = [torch.from_numpy(s) for s in shares_of(n, world)[rank]]
        backend.reset_communication_stats()
        opened = open_all(mine, xor=1)
        out.append(([t.numpy() for t in opened], backend.communication_stats()["bytes"]))
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_open_all_opens_every_ring_and_large_openings_cost_less_among_three(world):
    results = [got["open_all"] for got in launched(world)]
    for got in results:
        for (opened, _), n in zip(got, SIZES):
            for o, x in zip(opened, values(n)):
                np.testing.assert_array_equal(o, x)
    n = SIZES[-1]
    share_bytes = n * (16 + 4 + 1)
    busiest = max(got[-1][1] for got in results)
    all_gather = 2 * (world - 1) * share_bytes  # sent and received, every other party's whole share
    if world == 2:
        assert busiest >= all_gather
    else:  # each party sends and receives 2 (w - 1) / w of a share: a third less among 3
        assert busiest <= 0.70 * all_gather


def _low_bits_job(rank, sizes, bits):
    import torch

    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.primitives.opening import open_all

    world = backend.world_size()
    out = []
    for n in sizes:
        mine = torch.from_numpy(shares_of(n, world, kinds=(1,))[rank][1])  # the int32 values' shares
        backend.reset_communication_stats()
        (opened,) = open_all([mine], bits=bits)
        out.append((opened.numpy(), backend.communication_stats()["bytes"]))
    return out


LOW_BITS = {2: (22, 2), 3: (22, 9, 32, 2, 1, 4)}  # the widths opened among 2 and among 3


def low_bits_sizes(world, bits):
    """The sizes opened with ``bits`` among ``world`` parties (see the test below)."""
    last = SCATTER_MIN_BYTES * 8 // bits + 3 if bits in (1, 2, 4) else SCATTER_MIN_BYTES // 3 + 1
    if world == 2:
        last = 10_003
    return [5, 1_000, last]


@pytest.mark.parametrize("world, bits", [(w, b) for w, widths in LOW_BITS.items() for b in widths])
def test_low_bits_openings_give_the_values_mod_2_to_the_bits_from_fewer_bytes(world, bits):
    """1, 2 or 4 bits go 8 / bits to a byte; the last size then goes by reduce-scatter among 3
    (among 2 every opening is an all-gather: a smaller last size checks the same)."""
    sizes = low_bits_sizes(world, bits)
    results = [got["low_bits", bits] for got in launched(world)]
    wants = [values(n)[1].astype(np.int64) % (1 << bits) for n in sizes]  # the same for every party
    for got in results:
        for (opened, _), want in zip(got, wants):
            np.testing.assert_array_equal(opened.astype(np.int64) % (1 << 32), want)
    n, nbytes = sizes[-1], (bits / 8 if bits in (1, 2, 4) else -(-bits // 8))
    busiest = max(got[-1][1] for got in results)
    # at most an all-gather of nbytes per value (4 bytes per value would exceed it below 25 bits)
    assert busiest <= 2 * (world - 1) * n * nbytes * 1.01 + 4096


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("itemsize, nbytes", [(4, 1), (4, 2), (4, 3), (4, 4), (8, 5), (8, 6), (8, 7), (8, 8)])
def test_low_byte_codec_round_trips_any_length_and_stride(itemsize, nbytes, ordered, monkeypatch):
    """The wire form of int32 (int64) shares is their low bytes, read back exactly (short
    vectors, whose last values are read from a padded copy, and a strided column included),
    by the overlapping strided writes and by the byte-wise fallback."""
    import torch

    from secure_auc.mpc.primitives import words
    from secure_auc.mpc.primitives.words import LowBytes, _ordered_strided_writes

    assert _ordered_strided_writes(itemsize)  # this numpy writes in order: the fast path is the one used
    if not ordered:
        monkeypatch.setattr(words, "_ordered_strided_writes", lambda *_: False)
    codec = LowBytes(nbytes, itemsize)
    dtype, top = (torch.int32, 2**31 - 1) if itemsize == 4 else (torch.int64, 2**63 - 1)
    mask = (1 << (8 * nbytes)) - 1
    g = torch.Generator().manual_seed(nbytes)
    for n in (0, 1, 2, 3, 4, 5, 1001):
        for x in (torch.randint(-top - 1, top, (n,), dtype=dtype, generator=g),
                  torch.randint(-top - 1, top, (n, 3), dtype=dtype, generator=g)[:, 1]):
            w = codec.wire(x)
            assert w.dtype == (dtype if nbytes == itemsize else torch.uint8)
            assert w.numel() * w.element_size() == n * nbytes
            got = [int(v) & mask for v in codec.summed(w).tolist()]
            assert got == [int(v) & mask for v in x.tolist()]


def _recorded_openings_job(rank):
    import torch

    from secure_auc.mpc.audit import OPENINGS, record_received
    from secure_auc.mpc.comm import backend
    from secure_auc.mpc.primitives.opening import open_all, open_to, open_to_owners, reconstruct

    world = backend.world_size()
    mine = [torch.from_numpy(s) for s in shares_of(6, world)[rank]]
    log: list = []
    with record_received(log):
        open_all(mine[1:2])
        open_all(mine[1:2], bits=9)
        open_to(mine[1], world - 1)
        open_to_owners(mine[1], [2, 4], [0, world - 1])
        reconstruct([s[1] for s in shares_of(6, world)])
    return [(r.op, r.src, r.tag, r.dtype, r.data) for r in log if r.op in OPENINGS]


@pytest.mark.parametrize("world", [2, 3])
def test_the_audit_records_every_value_a_party_opens(world):
    """Every opened value reaches the record of exactly the parties that obtain it, with
    its kind, in order, in its own dtype: the secrecy tests search what parties learn."""
    x = values(6)[1]  # the int32 values
    results = [got["recorded"] for got in launched(world)]
    last = world - 1
    for rank, got in enumerate(results):
        want = [("open_all", x), ("open_all", (x.astype(np.int64) % 512).astype(np.int32))]
        want += [("open_to", x)] if rank == last else []
        want += [("open_to_owners", x[:2])] if rank == 0 else []
        want += [("open_to_owners", x[2:])] if rank == last else []
        want += [("rank shares", x)]
        assert [(op, src, tag) for op, src, tag, _, _ in got] == [(op, None, i) for i, (op, _) in enumerate(want)]
        for (_, _, _, dtype, data), (_, v) in zip(got, want):
            assert dtype == "int32"
            np.testing.assert_array_equal(np.frombuffer(data, dtype=np.int32), v)


def _every_case_job(rank):
    """Every case of this file among this world's parties (each case as its own test ran it)."""
    from secure_auc.mpc.comm import backend

    world = backend.world_size()
    out = {"recorded": _recorded_openings_job(rank), "open_all": _open_job(rank, SIZES)}
    for bits in LOW_BITS[world]:
        out["low_bits", bits] = _low_bits_job(rank, low_bits_sizes(world, bits), bits)
    return out


@functools.lru_cache(maxsize=None)
def launched(world: int) -> list:
    """Every party's results of :func:`_every_case_job` among ``world`` parties, by rank: one
    launch per world for the whole file."""
    return run_parties(world, _every_case_job)
