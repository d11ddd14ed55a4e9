"""scripts/distributed_noise_table.py --per-client draws every client's share, as the protocol does."""

import importlib.util
from pathlib import Path

import numpy as np

from secure_auc.data import make_ctr_dataset
from secure_auc.data.partition import partition_owner
from secure_auc.dp.distributed import Calibration, DistributedNoiseMechanism
from secure_auc.local_stats import LocalStatistics
from secure_auc.metrics import midranks, rank_auc

SCRIPT = Path(__file__).parents[1] / "scripts" / "distributed_noise_table.py"


def _script():
    spec = importlib.util.spec_from_file_location("distributed_noise_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_per_client_draws_every_share(monkeypatch):
    script = _script()
    monkeypatch.setattr(script, "CHUNK_SHARES", 1000)  # several chunks
    scores, labels = make_ctr_dataset(samples=3000, seed=2)
    k, reps = 300, 25
    stats = LocalStatistics.from_owner(midranks(scores), labels, partition_owner(scores, k, "iid"), k)
    calls = []
    draw = Calibration.draw
    monkeypatch.setattr(Calibration, "draw", lambda self, rng, shape, shares=1.0: calls.append((shape, shares))
                        or draw(self, rng, shape, shares))
    mech = DistributedNoiseMechanism(1.0, k)
    est = script.per_client_estimates(mech, stats, len(labels), reps, np.random.default_rng(0))
    assert calls == [((3, k), 1.0)] * 8 + [((1, k), 1.0)]  # one share per client and repetition
    assert est.shape == (reps,)
    # the estimates scatter around the AUC with the delta-method std of the total noise
    truth = rank_auc(labels, scores)
    sd = mech.linearised_std(len(labels), int(labels.sum()), truth)
    assert np.all(np.abs(est - truth) < 8 * sd)
