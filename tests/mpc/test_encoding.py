"""CrypTen import shim and the exact, order-preserving score encoding (no MPC run needed;
the keys' exact sharing with CrypTen is checked in test_ranks.py)."""

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from secure_auc.mpc.encoding import (COMPARE_BITS, KEY_BITS, PAD_KEY, encode_keys, is_float32_exact, limbs_for,
                                     pad_keys)
from secure_auc.validation import InputError

PKG = Path(__file__).resolve().parents[2] / "secure_auc"


def test_crypten_imports_on_the_installed_torch():
    import torch

    from secure_auc.mpc.comm.backend import crypten

    assert crypten.__version__ == "0.4.1"
    assert hasattr(crypten, "cryptensor") and hasattr(crypten.mpc, "MPCTensor")
    assert torch.__version__.startswith("2.")


def test_crypten_is_reached_only_through_the_backend():
    """Only ``mpc/comm/backend.py`` and the package that works on CrypTen's own tensors and
    operations (``mpc/crypten/``: install, the MPCTensor bridge, the example's party) import
    CrypTen or touch its attributes; everything else calls the backend's named functions."""
    offenders = []
    for path in PKG.rglob("*.py"):
        if path.name == "backend.py" or path.parent.name == "crypten":
            continue
        text = path.read_text()
        if re.search(r"^\s*(import crypten|from crypten\b|from .*backend import crypten)", text, re.M) \
                or re.search(r"\bcrypten\.(comm|cfg|mpc|init|uninit|cryptensor|common)\b", text):
            offenders.append(str(path))
    assert offenders == []


def _check(values, limbs):
    keys = encode_keys(values, limbs)
    assert keys.dtype == np.int64 and keys.shape == (len(values), limbs)
    # every limb within a 32-bit range, so limb differences fit the comparison's bits
    assert np.all(keys[:, 0] >= -(2**31)) and np.all(keys[:, 0] < PAD_KEY)
    if limbs == 2:
        assert np.all(keys[:, 1] >= 0) and np.all(keys[:, 1] < 2**KEY_BITS)
    assert COMPARE_BITS == KEY_BITS + 1
    t = [tuple(k) for k in keys]
    pad = tuple(pad_keys(1, limbs)[0])
    for i in range(len(values)):
        assert t[i] < pad
        for j in range(len(values)):
            assert (values[i] < values[j]) == (t[i] < t[j])
            assert (values[i] == values[j]) == (t[i] == t[j])


finite64 = st.floats(allow_nan=False)
finite32 = st.floats(allow_nan=False, width=32)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite64, min_size=1, max_size=30))
def test_float64_two_limbs_exact(values):
    _check(np.array(values, dtype=np.float64), 2)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite32, min_size=1, max_size=30))
def test_float32_one_limb_exact(values):
    v = np.array(values, dtype=np.float32).astype(np.float64)
    assert is_float32_exact(v)
    _check(v, 1)
    _check(v, 2)  # the two-limb encoding works for every float


def test_neighbours_signed_zero_infinities():
    x = 1 / 3
    v = np.array([np.nextafter(x, 0), x, np.nextafter(x, 1), -0.0, 0.0, -5e-324, 5e-324, -np.inf, np.inf, -1e308])
    _check(v, 2)
    k = encode_keys(v, 2)
    assert tuple(k[3]) == tuple(k[4])  # -0.0 == 0.0
    assert not is_float32_exact(v[:3]) and not is_float32_exact([1e300])  # beyond float32: not exact
    f = np.array([np.nextafter(np.float32(0.5), np.float32(1)), 0.5, -0.0, 0.0, np.inf, -np.inf], dtype=np.float32)
    _check(f.astype(np.float64), 1)
    assert encode_keys(np.array([-0.0]), 1)[0, 0] == encode_keys(np.array([0.0]), 1)[0, 0] == 0


def test_inputs_and_errors():
    with pytest.raises(InputError, match="not float32-exact"):
        encode_keys(np.array([0.1]), 1)
    with pytest.raises(InputError, match="score 1 is nan"):
        encode_keys(np.array([0.1, np.nan]), 2)
    with pytest.raises(InputError, match="score 0 is nan"):
        is_float32_exact(np.array([np.nan]))
    with pytest.raises(InputError, match="one-dimensional"):
        encode_keys(np.zeros((2, 2)), 2)
    with pytest.raises(ValueError, match="limbs"):
        encode_keys(np.zeros(2), 3)
    # integers and float16 are encoded by value
    np.testing.assert_array_equal(encode_keys(np.array([3, -1, 2]), 1), encode_keys(np.array([3.0, -1.0, 2.0]), 1))
    np.testing.assert_array_equal(encode_keys(np.array([0.5], dtype=np.float16), 1), encode_keys([0.5], 1))


def test_limbs_agreement():
    assert limbs_for([True, True]) == 1
    assert limbs_for([True, False]) == 2
    assert limbs_for([]) == 1
    assert pad_keys(2, 2).tolist() == [[PAD_KEY, 0], [PAD_KEY, 0]]
