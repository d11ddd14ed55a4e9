"""The simulator against the closed forms, the plain protocol and its own determinism."""

import json

import numpy as np

from secure_auc.dp.registry import make_mechanism
import pytest

from secure_auc.cli import main
from secure_auc.data import make_ctr_dataset
from secure_auc.dp.variance import (
    global_laplace_std, local_laplace_one_sample_std, rr_linearised_std, rr_paper_std, rr_rank_sum_std)
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


def test_rr_exact_pn_std_is_the_papers_closed_form(sim):
    """The paper's RR formula is the std of sum r_i y~_i / (P N) with exact P, N: the simulator reports that too."""
    for eps in (0.5, 3.0):
        c = sim.cell("rr", eps, reps=R, seed=11)
        exact = rr_rank_sum_std(sim.ranks, sim.p, sim.n, eps)  # exact for any ranks
        assert c.exact_pn_std == pytest.approx(exact, rel=TOL)
        # distinct ranks 0..M-1 (no ties in the synthetic scores): the paper's closed form is the same number
        assert c.closed_form_std == pytest.approx(exact, rel=1e-3)
        assert c.closed_form_std == rr_paper_std(sim.m, sim.p, sim.n, eps)


@pytest.mark.parametrize("clients", [10, 300])
def test_exact_p_global_laplace_matches_closed_form(sim, clients):
    """Paper, appendix: with exact P and N and the whole eps on localSum, std = sqrt(2K)(M-1)/(P N eps).

    The estimate is linear in the noise, so the closed form is exact; the sample std of R = 400 runs has a
    relative standard error of about 1/sqrt(2R) = 3.5 % (4 % for the heavier-tailed sum of 10 Laplace noises).
    """
    for eps in (1.0, 4.0):
        c = sim.cell("global", eps, clients=clients, partition="iid", reps=R, seed=12, exact_p=True)
        cf = global_laplace_std(clients, sim.m, sim.p, sim.n, eps)
        assert c.exact_p and c.closed_form_std == pytest.approx(cf)
        assert c.linearised_std == pytest.approx(cf, rel=1e-9)
        assert c.std == pytest.approx(cf, rel=TOL)
        assert abs(c.mean - sim.true_auc) < 4 * cf / np.sqrt(R)


@pytest.mark.parametrize("partition", ["iid", "noniid"])
def test_exact_p_local_laplace_one_sample_per_client_matches_closed_form(sim, partition):
    c = sim.cell("local", 2.0, clients=sim.m, partition=partition, reps=R, seed=13, exact_p=True)
    cf = local_laplace_one_sample_std(sim.m, sim.p, sim.n, 2.0)
    assert c.closed_form_std == pytest.approx(cf)
    assert c.std == pytest.approx(cf, rel=TOL)
    # GlobalLaplace / LocalLaplace ~ sqrt(3) with one sample per client (paper, Sec. 6.2.2)
    g = sim.cell("global", 2.0, clients=sim.m, partition=partition, reps=R, seed=14, exact_p=True)
    assert g.std / c.std == pytest.approx(np.sqrt(3), rel=0.2)


def test_exact_p_rejects_other_allocations(sim):
    from secure_auc.validation import InputError

    with pytest.raises(InputError, match="split allocation"):
        sim.cell("adaptive", 1.0, clients=10, partition="iid", reps=5, exact_p=True)


def test_threads_do_not_change_results():
    scores, labels = make_ctr_dataset(50_000, seed=2)
    one, two = Simulator(scores, labels, workers=1), Simulator(scores, labels, workers=2)
    for kw in (dict(method="rr", epsilon=1.0), dict(method="local", epsilon=1.0, clients=50_000, partition="iid"),
               dict(method="global", epsilon=2.0, clients=25_000, partition="noniid", exact_p=True)):
        a, b = one.cell(reps=8, seed=3, **kw), two.cell(reps=8, seed=3, **kw)
        assert a.mean == b.mean and a.std == b.std


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
    """Repetition r of the simulator is the plain protocol with the same noise.  10 non-iid clients: a
    protocol run draws each client's noise on its own (most of its time), and the spread's comparison
    does not depend on the number of clients."""
    scores, labels = make_ctr_dataset(2000, seed=9)
    s = Simulator(scores, labels)
    for method in ("local", "adaptive"):
        mech = make_mechanism(method, 1.0)
        est = s.mechanism_estimates(mech, 10, "noniid", reps=300, seed=4)
        parts = partition_indices(scores, 10, "noniid")
        clients = [ClientData(scores[i], labels[i]) for i in parts]
        protocol = np.array([evaluate(clients, mech, protocol="plain", seed=r).auc for r in range(60)])
        # same distribution: compare the spreads (different streams, so not the same draws); the ratio's
        # relative sd is about sqrt(1 / (2 * 59) + 1 / (2 * 299)) = 10 %, so rel=0.3 is 3 sd (fixed seeds)
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
                 "--partition", "noniid", "--epsilon", "1", "2", "--reps", "10", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    r = json.loads(captured.out)
    assert r["samples"] == 5000 and r["reps"] == 10
    assert len(r["cells"]) == 2 * (1 + 2)
    assert captured.err == ""  # no progress with --json
    # eps = inf, the no-noise limit of randomized response (the paper's table): rr only
    code = main(["simulate", "--samples", "5000", "--methods", "rr", "--epsilon", "inf", "--reps", "10", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    r = json.loads(captured.out)
    inf_rr = [c for c in r["cells"] if c["method"] == "rr" and c["epsilon"] is None][0]  # JSON has no inf: null
    assert inf_rr["std"] == 0 and inf_rr["mean"] == pytest.approx(r["true_auc"], abs=1e-12)
    assert captured.err == ""  # no progress with --json


def test_cli_exact_p_json(capsys):
    code = main(["simulate", "--samples", "3000", "--methods", "rr", "global", "local", "--clients", "3000",
                 "--partition", "iid", "--epsilon", "2", "--reps", "30", "--exact-p", "--threads", "1", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    r = json.loads(captured.out)
    assert r["exact_p"] is True
    by = {c["method"]: c for c in r["cells"]}
    assert not by["rr"]["exact_p"] and by["rr"]["exact_pn_std"] > 0
    for m in ("global", "local"):
        assert by[m]["exact_p"] and by[m]["closed_form_std"] > 0
        assert by[m]["std"] == pytest.approx(by[m]["closed_form_std"], rel=0.5)  # R = 30: a loose sanity bound
    assert main(["simulate", "--samples", "1000", "--methods", "adaptive", "--exact-p"]) == 2
    assert "--exact-p applies to --methods global and local only" in capsys.readouterr().err


def test_cli_text_output(capsys):
    assert main(["simulate", "--samples", "2000", "--methods", "rr", "local", "--clients", "10",
                 "--partition", "iid", "--epsilon", "1", "--reps", "5"]) == 0
    out, err = capsys.readouterr()
    assert "true AUC" in out and "(noisy AUC before debiasing)" in out and "exact P and N" in out
    assert "[" not in out.splitlines()[0] and "[2/2] local" in err  # progress on stderr only


def test_cli_client_files(tmp_path, capsys):
    from secure_auc.data.io import write_client_csv

    scores, labels = make_ctr_dataset(3000, seed=4)
    files = []
    for i, idx in enumerate(np.array_split(np.argsort(scores), 3)):  # three clients, non-IID by score
        files.append(str(tmp_path / f"c{i}.csv"))
        write_client_csv(files[-1], scores[idx], labels[idx])
    assert main(["simulate", *files, "--methods", "rr", "local", "--reps", "20", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    local = [c for c in r["cells"] if c["method"] == "local"]
    assert r["samples"] == 3000 and [(c["partition"], c["clients"]) for c in local] == [("files", 3)]
    # the files are the clients: the same statistics as the non-IID split of the pooled rows into 3 parts
    sim = Simulator(scores, labels)
    assert local[0]["linearised_std"] == pytest.approx(sim.cell("local", 1.0, clients=3, partition="noniid",
                                                                 reps=2).linearised_std)
    assert main(["simulate", *files, "--methods", "local", "--partition", "iid", "--clients", "7",
                 "--reps", "5", "--json"]) == 0
    assert [c["clients"] for c in json.loads(capsys.readouterr().out)["cells"]] == [7]
    assert main(["simulate", "--samples", "1000", "--partition", "files"]) == 2
    assert "needs client CSV files" in capsys.readouterr().err


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
    assert "accurate P and N" in res.stdout and "closed form" in res.stdout
    for f in ("rr_small.csv", "methods_std.csv", "accurate_pn_std.csv", "fig_b_alpha_sensitivity.png",
              "fig_c_allocation.png"):
        assert (tmp_path / f).stat().st_size > 0
    import csv

    rows = list(csv.DictReader(open(tmp_path / "methods_std.csv")))
    assert {r["method"] for r in rows} >= {"RR", "GlobalLaplace", "adaptive (Non-IID)"}
    assert all(float(r["our_std"]) > 0 for r in rows)


def test_flag_rule_is_three_standard_errors_of_two_stds():
    import runpy
    from pathlib import Path

    flag = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts" / "reproduce_paper.py"))["flag"]
    # R = 100 both: SE of each std ~ std / sqrt(198) = 7 %; 3 combined SE ~ 30 %
    assert flag(1.25, 1.0, 100) == "" and flag(0.8, 1.0, 100) == ""
    assert flag(1.45, 1.0, 100) == "!!" and flag(0.6, 1.0, 100) == "!!"
    assert flag(1.0, None, 100) == ""  # the paper's blank cells are never flagged
