"""Fewer AES-CTR bytes drawn, the same values: parts of streams (:func:`.prg.ring`'s ``skip``,
:func:`.prg.ring_part`), the corrected rows neither the dealer nor their party draws, and
the 32-bit-key permutations (uniform, the same with the compiled passes and numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from secure_auc.mpc.primitives import prg
from secure_auc.mpc.primitives.dealer import (CORRECTED, REPLICATED, corrected_rows, rep_block, rep_component,
                                              rep_correction, rep_rows, triple_correction, triple_shares)
from secure_auc.mpc.primitives.prg import new_seed, ring, ring_part


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("n", [1, 3, 1000])  # rows of 4 to 8000 bytes: parts that start inside an AES block
def test_parts_of_a_stream_are_its_slices(dtype, n):
    s = new_seed()
    full = ring(s, ("t", 1), (7, n), dtype)
    for skip in ([0], [6], [1, 2, 5], list(range(1, 7)), list(range(7))):
        part = ring(s, ("t", 1), (7, n), dtype, skip=skip)
        keep = [r for r in range(7) if r not in skip]
        np.testing.assert_array_equal(part[keep], full[keep])
    flat = full.reshape(-1)
    for start in (0, 1, 3, 5, flat.size - 1):
        np.testing.assert_array_equal(ring_part(s, ("t", 1), start, np.empty(flat.size - start, dtype)), flat[start:])


def test_a_part_without_room_after_it_falls_back_to_update(monkeypatch):
    """An older ``cryptography`` wants 15 bytes of room after the data: the part is then
    encrypted by ``update`` and copied."""
    s = new_seed()
    full = ring(s, ("t",), (5, 9), np.int32)

    class Strict:
        def __init__(self, enc):
            self.enc = enc

        def update(self, data):
            return self.enc.update(data)

        def update_into(self, data, buf):
            if len(buf) < len(data) + 15:
                raise ValueError("buffer too small")
            return self.enc.update_into(data, buf)

    class Cipher(prg.Cipher):
        def encryptor(self):
            return Strict(super().encryptor())

    monkeypatch.setattr(prg, "Cipher", Cipher)
    np.testing.assert_array_equal(ring(s, ("t",), (5, 9), np.int32, skip=[1, 2])[[0, 3, 4]], full[[0, 3, 4]])


@pytest.mark.parametrize("world", [2, 3])
def test_the_corrected_rows_are_not_drawn_and_the_corrections_are_unchanged(world):
    """The dealer's corrections from streams that skip the corrected party's corrected rows
    equal those computed from the whole streams (numpy's arithmetic as the reference)."""
    seeds = [new_seed() for _ in range(world)]
    n = 513
    for kind in CORRECTED:
        for party in range(world):
            full = [triple_shares(s, 4, n, kind) for s in seeds]
            got = triple_correction(seeds, 4, n, kind, party)
            part = triple_shares(seeds[party], 4, n, kind, corrected_rows(kind))
            keep = [r for r in range(full[party].shape[0]) if r not in corrected_rows(kind)]
            np.testing.assert_array_equal(part[keep], full[party][keep])
            shares = [f.copy() for f in full]
            shares[party][corrected_rows(kind)] = got
            if kind in ("mul", "mul32"):
                a, b, c = (sum(x[k] for x in shares) for k in range(3))
                np.testing.assert_array_equal(c, a * b)
            elif kind.startswith("onehot"):
                v = 1 << int(kind[-1])
                t = sum(x[0] for x in shares) & (v - 1)
                e = sum(x[1:v] for x in shares)
                np.testing.assert_array_equal(e, (t[None] == np.arange(1, v)[:, None]).astype(np.int32))
                np.testing.assert_array_equal(sum(x[2 * v - 1] for x in shares),
                                              (e * sum(x[v : 2 * v - 1] for x in shares)).sum(0, dtype=np.int32))


def test_replicated_blocks_draw_each_row_where_it_goes():
    reps = [new_seed() for _ in range(3)]
    n = 301
    for kind in REPLICATED:
        v = 1 << REPLICATED[kind]
        for rank in range(3):
            mine = (reps[rank], reps[(rank + 1) % 3])
            own, nxt = (rep_component(s, 7, n, kind) for s in mine)
            whole = np.concatenate([own, nxt[1:]])
            np.testing.assert_array_equal(rep_block(mine, 7, n, kind), whole)
            for component in range(3):
                rows = rep_rows(kind, rank, component)
                if rows is None:
                    continue
                part = rep_block(mine, 7, n, kind, rows)
                keep = [r for r in range(2 * v - 1) if r not in rows]
                np.testing.assert_array_equal(part[keep], whole[keep])
        for component in range(3):  # the corrected component's E is not drawn: E still sums to the one-hot
            comps = [rep_component(s, 7, n, kind) for s in reps]
            comps[component][1:] = rep_correction(reps, 7, n, kind, component)
            t = sum(c[0] for c in comps) & (v - 1)
            np.testing.assert_array_equal(sum(c[1:] for c in comps),
                                          (t[None] == np.arange(1, v)[:, None]).astype(np.int32))


def test_sorted_key_permutations_compiled_and_numpy_are_the_same(monkeypatch):
    """32-bit keys: at 2^17 rows about 2 ties; with 10-bit keys, runs of ties everywhere."""
    from secure_auc.mpc.primitives.shuffle import sort_permutation

    for rows, bits in ((1 << 17, None), (5000, 10), (3, None)):
        monkeypatch.setenv("SECURE_AUC_KERNELS", "numba")
        got = sort_permutation(b"w" * 16, 2, rows, bits)
        monkeypatch.setenv("SECURE_AUC_KERNELS", "numpy")
        ref = sort_permutation(b"w" * 16, 2, rows, bits)
        assert got.dtype == ref.dtype == np.int64
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(np.sort(got), np.arange(rows))
