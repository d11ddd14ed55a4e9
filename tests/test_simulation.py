"""The simulator against the closed forms, the plain protocol and its own determinism."""

import json

import numpy as np
import pytest

from secure_auc.cli import main
from secure_auc.data import make_ctr_dataset
from secure_auc.dp.variance import global_laplace_std, rr_linearised_std
from secure_auc.evaluate import evaluate
from secure_auc.data.io import ClientData
from secure_auc.data.partition import partition_indices
from secure_auc.simulation.engine import Simulator

# R = 400 repetitions: the relative standard error of a std is about 1/sqrt(2R) = 3.5 %;
# a 15 % tolerance is over 4 standard errors.
R = 400
TOL = 0.15


@pytest.fixture(scope="module")
def sim():
    return Simulator(*make_ctr_dataset(30_000, seed=5))


def test_rr_matches_delta_method_and_is_unbiased(sim):
    for eps in (0.5, 2.0):
        c = sim.cell("rr", eps, reps=R, seed=1)
        assert c.std == pytest.approx(rr_linearised_std(sim.ranks, sim.labels, eps), rel=TOL)
        assert abs(c.mean - sim.true_auc) < 4 * c.std / np.sqrt(R)
        assert c.noisy_mean < sim.true_auc - 0.01  # before debiasing: biased towards 1/2


def test_global_laplace_reports_paper_formula_and_matches_delta_method(sim):
    # the paper's closed form assumes an exact P (tested against simulation in test_dp.py);
    # the full estimator with noisy P follows the delta-method std
    c = sim.cell("global", 1.0, clients=100, partition="iid", reps=R, seed=2, alpha=0.6)
    assert c.closed_form_std == global_laplace_std(100, sim.m, sim.p, sim.n, 0.6)
    assert c.std == pytest.approx(c.linearised_std, rel=TOL)
    assert c.std > c.closed_form_std  # the noise on P adds to it


@pytest.mark.parametrize("method", ["local", "orthogonal", "adaptive"])
@pytest.mark.parametrize("partition", ["iid", "noniid"])
def test_statistics_mechanisms_match_delta_method(sim, method, partition):
    c = sim.cell(method, 1.0, clients=300, partition=partition, reps=R, seed=3)
    assert c.std == pytest.approx(c.linearised_std, rel=TOL)
    assert abs(c.mean - sim.true_auc) < 5 * c.std / np.sqrt(R)


def test_simulated_repetition_equals_a_protocol_run():
    """Repetition r of the simulator is the plain protocol with the same noise; check one-sample clients."""
    scores, labels = make_ctr_dataset(2000, seed=9)
    s = Simulator(scores, labels)
    for method in ("local", "adaptive"):
        mech = Simulator.mechanism(method, 1.0)
        est = s.mechanism_estimates(mech, 50, "noniid", reps=300, seed=4)
        parts = partition_indices(scores, 50, "noniid")
        clients = [ClientData(scores[i], labels[i]) for i in parts]
        protocol = np.array([evaluate(clients, mech, seed=r).auc for r in range(60)])
        # same distribution: compare the spreads (different streams, so not the same draws)
        assert protocol.std(ddof=1) == pytest.approx(est.std(ddof=1), rel=0.3)


def test_deterministic_for_a_seed(sim):
    a = sim.cell("adaptive", 2.0, clients=50, partition="iid", reps=20, seed=7)
    b = sim.cell("adaptive", 2.0, clients=50, partition="iid", reps=20, seed=7)
    c = sim.cell("adaptive", 2.0, clients=50, partition="iid", reps=20, seed=8)
    assert a.mean == b.mean and a.std == b.std and a.mean != c.mean


def test_one_client_per_sample(sim):
    c = sim.cell("local", 1.0, clients=sim.m, partition="iid", reps=50, seed=0)
    a = sim.cell("adaptive", 1.0, clients=sim.m, partition="iid", reps=50, seed=0)
    assert a.std < c.std / 2  # all budget on P when each client has one rank (paper, Sec. 5.2)


def test_cli_json(capsys):
    code = main(["simulate", "--samples", "5000", "--methods", "rr", "local", "--clients", "10", "5000",
                 "--partition", "noniid", "--epsilon", "1", "inf", "--reps", "10", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    r = json.loads(captured.out)
    assert r["samples"] == 5000 and r["reps"] == 10
    cells = r["cells"]
    assert len(cells) == 2 * (1 + 2)
    inf_rr = [c for c in cells if c["method"] == "rr" and c["epsilon"] == float("inf")][0]
    assert inf_rr["std"] == 0 and inf_rr["mean"] == pytest.approx(r["true_auc"], abs=1e-12)
    assert "[1/6]" in captured.err


def test_cli_errors(capsys):
    assert main(["simulate", "--samples", "1000", "--epsilon", "0"]) == 2
    assert "epsilon must be > 0" in capsys.readouterr().err
    assert main(["simulate", "--samples", "1000", "--reps", "1"]) == 2
    assert "reps must be at least 2" in capsys.readouterr().err


def test_reproduce_script_quick(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "reproduce_paper.py"
    res = subprocess.run([sys.executable, str(script), "--quick", "--reps", "5", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "paper's Criteo evaluation sets are not available" in res.stdout
    assert "GlobalLaplace" in res.stdout and "adaptive (Non-IID)" in res.stdout
    for f in ("rr_small.csv", "methods_std.csv", "fig_b_alpha_sensitivity.png", "fig_c_allocation.png"):
        assert (tmp_path / f).stat().st_size > 0
