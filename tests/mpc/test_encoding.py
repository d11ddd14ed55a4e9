"""CrypTen import shim and the exact, order-preserving score encoding (no MPC run needed)."""

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from secure_auc.mpc.encoding import PAD_KEY, encode_keys, is_float32_exact
from secure_auc.validation import InputError

PKG = Path(__file__).resolve().parents[2] / "secure_auc"


def test_crypten_imports_on_the_installed_torch():
    import torch

    from secure_auc.mpc._crypten import crypten

    assert crypten.__version__ == "0.4.1"
    assert hasattr(crypten, "cryptensor") and hasattr(crypten.mpc, "MPCTensor")
    assert torch.__version__.startswith("2.")


def test_crypten_is_imported_only_through_the_shim():
    offenders = []
    for path in PKG.rglob("*.py"):
        if path.name == "_crypten.py":
            continue
        if re.search(r"^\s*(import crypten|from crypten\b)", path.read_text(), re.M):
            offenders.append(str(path))
    assert offenders == []


def _check(values, limbs):
    keys = [tuple(k) for k in encode_keys(values, limbs)]
    for i in range(len(values)):
        for j in range(len(values)):
            assert (values[i] < values[j]) == (keys[i] < keys[j])
            assert (values[i] == values[j]) == (keys[i] == keys[j])


finite64 = st.floats(allow_nan=False, allow_infinity=False)
finite32 = st.floats(allow_nan=False, allow_infinity=False, width=32)


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
    assert np.all(np.abs(encode_keys(v, 1)) < 2**31) and np.all(encode_keys(v, 1) < PAD_KEY)


def test_neighbours_and_signed_zero():
    x = 1 / 3
    v = np.array([np.nextafter(x, 0), x, np.nextafter(x, 1), -0.0, 0.0, -5e-324, 5e-324])
    _check(v, 2)
    k = encode_keys(v, 2)
    assert tuple(k[3]) == tuple(k[4])  # -0.0 == 0.0
    assert not is_float32_exact(v[:3])
    with pytest.raises(InputError, match="not float32-exact"):
        encode_keys(v[:3], 1)
    with pytest.raises(InputError, match="must be finite"):
        encode_keys(np.array([0.1, np.nan]), 2)
