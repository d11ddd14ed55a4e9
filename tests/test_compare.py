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


def test_the_mpc_attack_reads_ranks_and_keys_that_reach_the_server_and_nothing_else():
    """The attack on a recorded view uses whatever rank- or key-like values the server
    received or opened: shares give nothing to rank; exact ranks in a buffer the size of a
    client's samples are found and give the plain attack's precision; the last of several
    opened permutations is read (with identity shuffles, the ranks); keys sent in the
    clear in a host's table of keys and digits are read before any opened value."""
    from secure_auc.experiments.attack import precision_at_k, rank_values_from_received, top_k_guess_from_scores
    from secure_auc.mpc.audit import Received

    rng = np.random.default_rng(0)
    sizes = [300, 200]
    m = sum(sizes)
    scores = rng.random(m)
    labels = (rng.random(m) < np.where(scores > 0.7, 0.9, 0.1)).astype(int)
    ranks = np.argsort(np.argsort(scores))
    noise = [Received("irecv", 1, 0, "int64", rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64).tobytes())
             for n in (m, 300, 200, 7, 17 * 300)]
    assert rank_values_from_received(noise, sizes) is None
    # a reduce-style leak: a third of client 1's exact ranks, the rest partial sums (random words)
    leaked = rng.integers(-2**63, 2**63 - 1, 200, dtype=np.int64)
    leaked[:67] = 2 * ranks[300:367]
    values = rank_values_from_received(noise + [Received("reduce", None, 0, "int64", leaked.tobytes())], sizes)
    assert np.isfinite(values).sum() == 67
    guesses = top_k_guess_from_scores(values, 10, m, rng)
    assert set(guesses) <= set(range(300, 367))
    assert precision_at_k(guesses, labels) > labels.mean() + 0.3
    # opened permutations, the last one the ranks (identity shuffles), masked values after it
    perms = [Received("open_all", None, t, "int32", p.astype(np.int32).tobytes())
             for t, p in enumerate([rng.permutation(m), rng.permutation(m), ranks])]
    masked = Received("open_all", None, 3, "int32", rng.integers(-2**31, 2**31 - 1, 2 * m, dtype=np.int32).tobytes())
    values = rank_values_from_received(noise + perms + [masked], sizes)
    assert np.array_equal(values, ranks)
    # a received buffer with one word that fits 32 bits (a zero-padded last word) takes that
    # sample only: the opened ranks stay every other sample's value
    padded = rng.integers(-2**63, 2**63 - 1, m, dtype=np.int64)
    padded[-1] = 12345
    values = rank_values_from_received(noise + perms + [Received("irecv", 1, 4, "int64", padded.tobytes())], sizes)
    assert values[-1] == 12345 and np.array_equal(values[:-1], ranks[:-1])
    plain = precision_at_k(top_k_guess_from_scores(scores, 100, m, rng), labels)
    assert precision_at_k(top_k_guess_from_scores(values, 100, m, rng), labels) == plain
    # a host's rows (key, then 16 masked digits) with the keys unmasked: client 0's keys win
    from secure_auc.mpc.encoding import encode_keys

    table = rng.integers(-2**63, 2**63 - 1, (300, 17), dtype=np.int64)
    table[:, 0] = encode_keys(scores[:300].astype(np.float32), 1)[:, 0]
    values = rank_values_from_received(noise + perms[:2] + [Received("input link", -1, 4, "uint8", table.tobytes())],
                                       sizes)
    assert np.array_equal(values[:300], table[:, 0])
    top = top_k_guess_from_scores(values, 50, m, rng)
    assert set(top) == set(np.argsort(-scores[:300])[:50])


def test_identical_series_are_drawn_once():
    from types import SimpleNamespace

    from secure_auc.experiments.compare import _series

    rows = [SimpleNamespace(parties=p, samples=m, y=(1.0 if p < 5 else 2.0) * m) for p in (2, 3, 5) for m in (10, 20)]
    merged = _series(rows, lambda r: r.y)
    assert [(ps, m, y.tolist()) for ps, m, y in merged] == [([2, 3], [10, 20], [10.0, 20.0]), ([5], [10, 20], [20.0, 40.0])]


def test_the_attack_finds_what_identity_shuffles_open(monkeypatch):
    """Canary: with the radix sort's shuffles the identity (:mod:`mpc.canaries`), the
    server's last opened permutation is every sample's rank, and ``compare``'s attack on
    the recorded view is as good as the plain protocol's, far above the base rate."""
    from mpc.canaries import identity_shuffle_job

    from secure_auc.dp import RandomizedResponse
    from secure_auc.experiments.compare import compare
    from secure_auc.mpc import launch

    monkeypatch.setattr(launch, "run_party", identity_shuffle_job)
    (row,) = compare([600], [3], RandomizedResponse(1.0), [], ks=(100,))  # two clients
    assert row.exact_equal  # the canary sorts, it only stops hiding
    p_mpc, base = row.attack_precision_mpc[100], row.base_rate
    assert p_mpc > base + 0.15 and p_mpc == pytest.approx(row.attack_precision_plain[100], abs=0.05)


def test_the_attack_finds_keys_a_host_sends_unmasked(monkeypatch):
    """Canary: a client host that sends its keys unmasked (:mod:`mpc.canaries`) hands the
    server, its correction party, every score order of its rows; ``compare``'s attack on
    the server's recorded view reads them and its precision is far above the base rate,
    while the same run with the masking in place gives the base rate."""
    from mpc.canaries import unmasked_keys_host_job

    from secure_auc.data import ClientData, make_ctr_dataset
    from secure_auc.dp import NoNoise
    from secure_auc.experiments.compare import _attack_mpc
    from secure_auc.mpc import input_parties
    from secure_auc.mpc.launch import launch_local
    from secure_auc.mpc.party import PartyConfig

    scores, labels = make_ctr_dataset(1000, seed=1000)
    clients = [ClientData(scores[:600], labels[:600], "client 0"), ClientData(scores[600:], labels[600:], "client 1")]
    config = PartyConfig(mechanisms=(NoNoise(),), clients=2, progress=False, computing=2)
    base = labels.mean()
    precision = {}
    for canary in (False, True):
        if canary:
            monkeypatch.setattr(input_parties, "host_job", unmasked_keys_host_job)
        received: dict = {}
        launch_local(clients, config, timeout=60, hosts=2, received=received, record_ranks={0})
        precision[canary] = _attack_mpc(received[0], [600, 400], labels, (100,), np.random.default_rng(0))[100]
    plain = labels[np.argsort(-scores[:600])[:100]].mean()  # the server's top 100 of host 0's rows
    assert precision[True] == pytest.approx(plain) and precision[True] > base + 0.15
    assert abs(precision[False] - base) < 4 * np.sqrt(base * (1 - base) / 100)
