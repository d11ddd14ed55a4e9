"""The documented CrypTen vFL example runs: private inference of a small model on columns
split over the parties, its MPCTensor straight into the rank step and the DP AUC; the
estimate equals the plain protocol's on the same decoded scores and noise keys, and the AUC
without noise equals scikit-learn's."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _example():
    spec = importlib.util.spec_from_file_location("crypten_vfl_example", ROOT / "scripts" / "crypten_vfl_example.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("parties,mechanism", [(3, "laplace"), (2, "rr")])
def test_the_crypten_example_matches_the_plain_protocol_and_sklearn(parties, mechanism):
    out = _example().run(parties=parties, samples=600, mechanism=mechanism, epsilon=1.0, seed=3)
    assert out["estimate"] == out["plain_estimate"]
    assert out["plain_auc_no_noise"] == pytest.approx(out["sklearn_auc"], abs=1e-12)
    assert 0.6 < out["sklearn_auc"] < 1.0  # the model ranks its samples far better than chance
