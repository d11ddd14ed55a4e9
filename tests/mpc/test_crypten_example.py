"""The documented CrypTen vFL example runs: private inference of a small model on columns
split over the parties, its MPCTensor straight into the rank step and the DP AUC; the
estimate equals the plain protocol's on the same decoded scores and noise keys, and the AUC
without noise equals scikit-learn's.

The same runs record what every process (each party and the dealer) received and opened
(:func:`secure_auc.mpc.audit.record_received`): the scores are opened once, to party 0 only
(the example's check), each advertiser opens its own rows' ranks and nothing else, the
server alone the aggregate, and every value opened to every party is independent of the
scores."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from secure_auc.data import ClientData
from secure_auc.dp import make_mechanism
from secure_auc.dp.rng import client_key
from secure_auc.mpc.audit import OPENINGS

from .test_leakage import _found, _opened_values, client_secrets, dependence, leaks, true_ranks

ROOT = Path(__file__).resolve().parents[2]


def _example():
    spec = importlib.util.spec_from_file_location("crypten_vfl_example", ROOT / "scripts" / "crypten_vfl_example.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _recording(received: dict):
    """The launcher's ``run_parties`` with every process's record kept in ``received``."""
    from secure_auc.mpc.launch import spawn_parties

    def run_parties(job, per_rank, parties, *, provider="ttp", timeout=60.0, **kwargs):
        return spawn_parties(job, per_rank, parties, provider=provider, timeout=timeout, received=received, **kwargs)

    return run_parties


@pytest.mark.parametrize("parties,mechanism", [(3, "laplace"), (2, "rr")])
def test_the_crypten_example_matches_the_plain_protocol_and_sklearn(parties, mechanism, monkeypatch):
    import secure_auc.mpc.launch as launch

    from .test_crypten_safe import audit_patterns

    example = _example()
    received: dict = {}
    monkeypatch.setattr(launch, "run_parties", _recording(received))
    samples, seed = 600, 3
    out = example.run(parties=parties, samples=samples, mechanism=mechanism, epsilon=1.0, seed=seed)
    assert out["estimate"] == out["plain_estimate"]
    assert out["plain_auc_no_noise"] == pytest.approx(out["sklearn_auc"], abs=1e-12)
    assert 0.6 < out["sklearn_auc"] < 1.0  # the model ranks its samples far better than chance

    # what each process received and opened: every party and the dealer, a complete record
    assert sorted(received) == list(range(parties + 1))
    assert not [(p, r.op) for p, records in received.items() for r in records
                if r.op in ("reduce", "all_reduce", "gather", "scatter", "unclaimed frame")]
    scores = out["scores"]
    fixed = np.round(scores * (1 << 16)).astype(np.int64)  # CrypTen's fixed point: what an opening gives
    # the example's check: the scores opened once, to party 0 only, point-to-point
    check = [r for r in received[0] if r.op == "open_to" and np.array_equal(_opened_values(r), fixed)]
    records = {p: [r for r in recs if not any(r is c for c in check)] for p, recs in received.items()}
    score_forms = audit_patterns(scores)
    held = {p: len(_found(recs, score_forms)) for p, recs in records.items()}
    assert held == {p: 0 for p in records}, f"forms of the scores held besides the check's opening: {held}"
    assert len(check) == 1
    # each advertiser (party k + 1) opened its own rows' ranks and nothing else; the server alone the aggregate
    _, y, _, _ = example.make_data(samples, parties, 2, seed)
    sizes = example.advertiser_rows(samples, parties)
    parts = np.split(np.arange(samples), np.cumsum(sizes)[:-1])
    owners = [ClientData(scores[rows], y[rows], f"advertiser {k}") for k, rows in enumerate(parts)]
    twice = 2 * true_ranks(owners)
    for k, rows in enumerate(parts):
        (mine,) = [r for r in records[k + 1] if r.op == "open_to_owners"]
        assert np.array_equal(_opened_values(mine), twice[rows]), k
    assert not any(r.op in ("open_to_owners", "rank shares") for p in (0, parties) for r in records[p])
    assert [p for p in records if any(r.op == "open_to" for r in records[p])] == [0]
    assert not any(r.op in OPENINGS for r in records[parties])  # the dealer opens nothing
    mechs = (make_mechanism(mechanism, 1.0),)
    keys = [client_key(seed, k) for k in range(parties - 1)]
    secrets_by_client, aggregate, aggregates = client_secrets(owners, mechs, keys)
    assert out["aggregate"] == aggregates[0]  # the run is the one the secrets were computed for
    assert leaks(records, secrets_by_client, aggregate, owner=lambda k: k + 1) == []
    # what is opened to every party (the model's and the rank step's masked values) is the
    # same at every party and independent of the scores
    found, tested = dependence(records, owners, list(range(parties)))
    assert found == [] and tested > 0
