"""`secure-auc compare --quick`: both protocols agree, the attack numbers come from the views."""

import json

import numpy as np
import pytest

from secure_auc.cli import main


def test_compare_quick(tmp_path, capsys):
    out = tmp_path / "cmp"
    code = main(["compare", "--quick", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    rows = json.loads(captured.out)
    assert {(r["samples"], r["parties"]) for r in rows} == {(300, 2), (1000, 2), (300, 3), (1000, 3)}
    assert {r["sort"] for r in rows} == {"radix"}  # the default rank method
    for r in rows:
        assert r["exact_equal"] and r["dp_equal"]
        assert r["plain_auc"] == pytest.approx(r["sklearn_auc"], abs=1e-12)
        assert len(r["mpc_bytes_per_party"]) == r["parties"] and min(r["mpc_bytes_per_party"]) > 0
        assert r["slowdown"] > 1
        # attack: the plain server's top-100 is far above the base rate; the MPC server's is a random guess
        p_plain, p_mpc, base = r["attack_precision_plain"]["100"], r["attack_precision_mpc"]["100"], r["base_rate"]
        assert p_plain > base + 0.15
        assert abs(p_mpc - base) < 4 * np.sqrt(base * (1 - base) / 100)
        assert "10000" not in r["attack_precision_plain"]  # k larger than M is skipped
    for name in ("compare.csv", "compare.json", "compare.png"):
        assert (out / name).stat().st_size > 0
    assert "[1/4]" not in captured.err  # no progress output with --json


def test_torchrun_and_local_launcher_agree(tmp_path, capsys):
    code = main(["compare", "--sizes", "200", "--parties", "3", "--launcher", "both", "--provider", "tfp",
                 "--out", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    (row,) = json.loads(captured.out)
    assert row["torchrun_dp_auc"] == row["mpc_dp_auc"] == row["plain_dp_auc"]


def test_ctrl_c_leaves_no_process_behind(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "secure_auc", "compare", "--sizes", "262144", "--parties", "3", "--out", str(tmp_path)]
    # a shell running this suite in the background ignores SIGINT, and children inherit that:
    # restore the default so that the process sees Ctrl-C as a user's terminal would deliver it
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in proc.stderr:  # wait until the MPC parties are running
        if "MPC protocol" in line:
            break
    time.sleep(4)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: SIGINT to the foreground group
    proc.wait(timeout=60)
    assert proc.returncode != 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        ps = subprocess.run(["ps", "-eo", "pid=,sid=,stat="], capture_output=True, text=True).stdout.split("\n")
        alive = [ln for ln in ps if ln.split() and ln.split()[1] == str(proc.pid) and not ln.split()[2].startswith("Z")]
        if not alive:
            break
        time.sleep(0.5)
    assert not alive, alive


def test_the_mpc_attack_reads_ranks_that_reach_the_server_and_nothing_else():
    """The attack on a recorded view uses whatever rank-like values the server received:
    exact ranks in a buffer the size of a client's samples are found and give the plain
    attack's precision; shares and shuffled permutations give nothing to rank."""
    from secure_auc.experiments.attack import precision_at_k, rank_values_from_received, top_k_guess_from_scores
    from secure_auc.mpc.audit import Received

    rng = np.random.default_rng(0)
    sizes = [300, 200]
    m = sum(sizes)
    scores = rng.random(m)
    labels = (rng.random(m) < np.where(scores > 0.7, 0.9, 0.1)).astype(int)
    twice = 2 * np.argsort(np.argsort(scores))
    noise = [Received("irecv", 1, 0, "int64", rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64).tobytes())
             for n in (m, 300, 200, 7)]
    perm = Received("all_gather", 1, 0, "int64", rng.permutation(m).astype(np.int64).tobytes())
    assert rank_values_from_received(noise + [perm], sizes) is None
    # a reduce-style leak: a third of client 1's exact ranks, the rest partial sums (random words)
    leaked = rng.integers(-2**63, 2**63 - 1, 200, dtype=np.int64)
    leaked[:67] = twice[300:367]
    view = noise + [perm, Received("reduce", None, 0, "int64", leaked.tobytes())]
    values = rank_values_from_received(view, sizes)
    assert np.isfinite(values).sum() == 67
    guesses = top_k_guess_from_scores(values, 10, m, rng)
    assert set(guesses) <= set(range(300, 367))
    assert precision_at_k(guesses, labels) > labels.mean() + 0.3


def test_identical_series_are_drawn_once():
    from types import SimpleNamespace

    from secure_auc.experiments.compare import _series

    rows = [SimpleNamespace(parties=p, samples=m, y=(1.0 if p < 5 else 2.0) * m) for p in (2, 3, 5) for m in (10, 20)]
    merged = _series(rows, lambda r: r.y)
    assert [(ps, m, y.tolist()) for ps, m, y in merged] == [([2, 3], [10, 20], [10.0, 20.0]), ([5], [10, 20], [20.0, 40.0])]
