"""The local codecs of the wire and of the bit circuits against their definitions: the low
bytes of shares (:class:`secure_auc.mpc.primitives.words.LowBytes`), bit slicing
(:mod:`secure_auc.mpc.primitives.bits`) and the AES-CTR streams (:func:`.prg.ring`),
bit for bit, over random values, every width and lengths around every boundary."""

import numpy as np
import pytest
import torch

from secure_auc.mpc.primitives import bits as bitsmod
from secure_auc.mpc.primitives.words import LowBytes

_WIDTHS = [(4, nb) for nb in (1, 2, 3, 4)] + [(8, nb) for nb in range(1, 9)]


def _random(n, itemsize, seed, cols=1):
    g = torch.Generator().manual_seed(seed)
    dtype, top = (torch.int32, 2**31 - 1) if itemsize == 4 else (torch.int64, 2**63 - 1)
    x = torch.randint(-top - 1, top, (n, cols), dtype=dtype, generator=g)
    x[: min(n, 4), 0] = torch.tensor([0, -1, top, -top - 1][: min(n, 4)], dtype=dtype)
    return x[:, cols // 2]  # a strided column when cols > 1


@pytest.mark.parametrize("itemsize, nbytes", _WIDTHS)
def test_low_bytes_are_each_words_low_bytes_and_sum_back_exactly(itemsize, nbytes):
    """wire: the words' own little-endian low bytes, row by row; summed: those bytes' value;
    add_summed: a wrapping sum in place, equal to adding summed."""
    codec = LowBytes(nbytes, itemsize)
    mask = (1 << (8 * nbytes)) - 1
    for n in (0, 1, 2, 3, 7, 8, 9, 1000, 4099):
        for cols in (1, 3):
            x = _random(n, itemsize, 31 * n + cols, cols)
            w = codec.wire(x)
            raw = torch.from_numpy(np.ascontiguousarray(x.numpy()).view(np.uint8).reshape(-1, itemsize)[:, :nbytes])
            if nbytes < itemsize:
                assert w.dtype == torch.uint8 and tuple(w.shape) == (n, nbytes)
                assert torch.equal(w, raw)
                assert tuple(codec.like(n).shape) == (n, nbytes)
            else:
                assert np.array_equal(np.ascontiguousarray(w.numpy()).view(np.uint8).reshape(-1, itemsize), raw.numpy())
            got = codec.summed(w)
            assert got.dtype == x.dtype
            assert [int(v) for v in got.tolist()] == [int(v) & mask if nbytes < itemsize else int(v) for v in x.tolist()]
            total = _random(n, itemsize, 7 * n + 1).clone()
            want = total + got
            codec.add_summed(total, w)
            assert torch.equal(total, want)


@pytest.mark.parametrize("k, n, bits", [(1, 1, 1), (1, 63, 5), (2, 64, 33), (3, 65, 64), (1, 1000, 32),
                                        (2, 5000, 33), (1, (1 << 18) + 70, 1), (4, 129, 8), (1, 200, 9)])
def test_bit_planes_hold_bit_i_of_every_element(k, n, bits):
    """Plane i, word w, bit j is bit i of x[r, 64 w + j] (0 past the end), as the word
    arithmetic computes it and as the definition says; unslice reads the bits back."""
    g = torch.Generator().manual_seed(n + bits)
    x = torch.randint(-2**63, 2**63 - 1, (n, k), dtype=torch.long, generator=g).t()  # not contiguous
    planes = bitsmod.bitslice(x, bits)
    assert torch.equal(planes, bitsmod._bitslice_words(x, bits))
    words = planes.shape[-1]
    assert words == (n + 63) // 64
    for i in {0, bits - 1, bits // 2}:
        for r in range(k):
            back = bitsmod.unslice(planes[i, r], n)
            assert back.dtype == torch.int64
            assert torch.equal(back, (x[r] >> i) & 1)
            padded = bitsmod.unslice(planes[i, r], 64 * words)
            assert not padded[n:].any()


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_low_bits_pack_each_values_bits_in_order_and_read_back(bits):
    """An opening's 1-, 2- or 4-bit codec: byte b holds the low bits of values per b ...
    per (b + 1) - 1, the first in the lowest bits, the last byte padded with zeros; read
    back, each value's low bits (then the padding's zeros); the sum of two wire forms'
    values is the sum of the values mod 2^bits."""
    from secure_auc.mpc.primitives.opening import _LowBits

    codec, per, mask = _LowBits(bits), 8 // bits, (1 << bits) - 1
    for n in (0, 1, per - 1, per, per + 1, 1001):
        x = _random(n, 4, n + bits, cols=3)
        w = codec.wire(x)
        assert w.dtype == torch.uint8 and tuple(w.shape) == (-(-n // per), 1)
        vals = [int(v) & mask for v in x.tolist()] + [0] * (-n % per)
        want = [sum(vals[per * b + j] << (bits * j) for j in range(per)) for b in range(len(vals) // per)]
        assert w.reshape(-1).tolist() == want
        got = codec.summed(w)
        assert got.dtype == torch.int32 and got.tolist() == vals
        y = _random(n, 4, 2 * n + bits)
        total = codec.summed(w)
        codec.add([total], [codec.wire(y)])
        assert [int(v) & mask for v in total.tolist()[:n]] == [(int(a) + int(b)) & mask for a, b in zip(x.tolist(), y.tolist())]
