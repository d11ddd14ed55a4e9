"""Local holes of the command line: noise-key files others can read, broken pipes, eps out
of range, keygen's missing folder, a guessable --seed in MPC runs."""

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from secure_auc.cli import main
from secure_auc.dp.rng import read_noise_key_file
from secure_auc.validation import InputError

ROOT = Path(__file__).resolve().parents[1]
KEY = "0123456789abcdef0123456789abcdef"


def _one_line_error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("secure-auc: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_noise_key_file_others_can_read_is_refused(tmp_path, mode):
    path = tmp_path / "client0.key"
    path.write_text(KEY + "\n")
    path.chmod(mode)
    with pytest.raises(InputError, match=rf"client 0: noise key file {re.escape(str(path))} is readable by others "
                                         rf"\(mode 0{mode:o}\): chmod 600 it"):
        read_noise_key_file(str(tmp_path / "client{client}.key"), 0)
    path.chmod(0o600)
    assert read_noise_key_file(str(tmp_path / "client{client}.key"), 0) == int(KEY, 16)


def test_the_client_command_refuses_a_noise_key_file_others_can_read(tmp_path, capsys):
    from secure_auc.data import write_client_csv
    from secure_auc.mpc.comm.roster import generate_identity, write_identity

    keys = {name: write_identity(tmp_path / f"{name}.pem", generate_identity())
            for name in ("server", "helper1", "dealer", "client0")}
    roster = tmp_path / "roster.json"
    roster.write_text(json.dumps({"server": keys["server"], "helpers": [keys["helper1"]], "dealer": keys["dealer"],
                                  "clients": [keys["client0"]]}))
    data = tmp_path / "c0.csv"
    write_client_csv(data, np.array([0.1, 0.7, 0.4]), np.array([0, 1, 1]))
    key = tmp_path / "client0.key"
    key.write_text(KEY + "\n")
    key.chmod(0o644)
    err = _one_line_error(capsys, ["client", str(data), "--client", "0", "--clients", "1", "--roster", str(roster),
                                   "--identity", str(tmp_path / "client0.pem"), "--parties", "127.0.0.1:1",
                                   "127.0.0.1:2", "--noise-key-file", str(key), "--mechanism", "laplace",
                                   "--epsilon", "1"])
    assert "is readable by others (mode 0644): chmod 600 it" in err


def test_the_readme_recipe_makes_a_noise_key_only_its_owner_can_read(tmp_path):
    readme = (ROOT / "README.md").read_text()
    recipes = re.findall(r"`([^`]*secrets\.token_hex\(16\)[^`]*)`", readme)
    assert recipes, "the README's noise-key recipe"
    (tmp_path / "keys").mkdir(mode=0o700)
    for recipe in recipes:
        (tmp_path / "keys" / "client0.key").unlink(missing_ok=True)
        subprocess.run(["bash", "-c", f"umask 022; {recipe}"], cwd=tmp_path, check=True, timeout=60)
        path = tmp_path / "keys" / "client0.key"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) & 0o077 == 0
        assert 0 <= read_noise_key_file(str(tmp_path / "keys" / "client{client}.key"), 0) < 2**128


@pytest.mark.parametrize("argv", [
    ["evaluate", "--protocol", "plain", "--samples", "600", "--clients", "2", "--mechanism", "none"],
    ["evaluate", "--protocol", "plain", "--samples", "600", "--clients", "2", "--mechanism", "rr", "--epsilon", "1",
     "--json"],
    ["evaluate", "--help"],
    ["--version"],
    ["simulate", "--samples", "600", "--methods", "rr", "--clients", "3", "--reps", "2", "--quiet"],
    ["ledger", "plan", "--evaluations", "3", "--epsilon", "3", "--mechanism", "laplace", "--samples", "600"],
    ["make-data", "{tmp}/a.csv", "--samples", "100"],
    ["keygen", "{tmp}/k.pem"],
])
def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path, argv):
    """``secure-auc ... | head``: the reader is gone before the first line is written."""
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "secure_auc", *[a.format(tmp=tmp_path) for a in argv]],
                            stdout=w, stderr=subprocess.PIPE, text=True)
    os.close(w)
    os.close(r)
    _, err = proc.communicate(timeout=300)
    assert not any(w in err.lower() for w in ("traceback", "broken", "pipe", "error", "exception")), err[-2000:]
    if "--quiet" in argv or "keygen" in argv or "make-data" in argv:
        assert err == "", err[-2000:]
    # --help and --version: argparse ignores a failed write itself (unbuffered output: exit 0); otherwise 141
    assert proc.returncode == 141 or (proc.returncode == 0 and argv[-1] in ("--help", "--version"))


@pytest.mark.parametrize("argv", [
    ["evaluate", "--protocol", "plain", "--samples", "500", "--epsilon", "inf"],
    ["evaluate", "--protocol", "plain", "--samples", "500", "--mechanism", "rr", "--epsilon", "inf"],
    ["evaluate", "--protocol", "mpc", "--samples", "500", "--mechanism", "distributed", "--epsilon", "inf"],
    ["evaluate", "--protocol", "plain", "--samples", "500", "--mechanism", "gaussian", "--epsilon", "nan",
     "--delta", "1e-6"],
    ["evaluate", "--protocol", "plain", "--samples", "500", "--evaluations", "3", "--epsilon", "inf"],
    ["compare", "--quick", "--epsilon", "inf"],
    ["ledger", "plan", "--evaluations", "3", "--epsilon", "inf", "--mechanism", "laplace"],
    ["simulate", "--samples", "500", "--methods", "local", "--epsilon", "inf"],
])
def test_epsilon_inf_and_nan_are_refused_on_the_command_line(capsys, argv):
    err = _one_line_error(capsys, argv)
    assert "must be a finite number between 1e-06 and 10000" in err or "applies to --methods rr only" in err, err


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e4 * (1 + 1e-12), 0.0])
@pytest.mark.parametrize("mechanism, kwargs", [
    ("rr", {}), ("laplace", {}), ("laplace", {"allocation": "split"}), ("laplace", {"allocation": "orthogonal"}),
    ("gaussian", {"delta": 1e-6}), ("distributed", {"clients": 3}),
])
def test_epsilon_out_of_range_is_refused_by_the_library(mechanism, kwargs, value):
    from secure_auc import make_mechanism
    from secure_auc.dp.planning import plan_evaluations

    with pytest.raises(InputError, match="epsilon must be"):
        make_mechanism(mechanism, value, **kwargs)
    with pytest.raises(InputError, match="epsilon must be"):
        plan_evaluations(lambda e, d: make_mechanism(mechanism, e, **kwargs), 3, value, kwargs.get("delta", 0.0))
    make_mechanism(mechanism, 1e4, **kwargs)  # the range's ends are accepted
    make_mechanism(mechanism, 1e-6, **kwargs)


def test_keygen_makes_the_missing_folder_for_this_user_only(tmp_path, capsys):
    from secure_auc.mpc.comm.roster import public_bytes, read_identity

    path = tmp_path / "keys" / "server.pem"
    assert main(["keygen", str(path)]) == 0
    public = capsys.readouterr().out.strip()
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert public_bytes(read_identity(path)).hex() == public
    assert main(["keygen", str(path)]) == 2  # never overwritten
    assert "exists" in capsys.readouterr().err


BIG_SEED = 0x9F3B_52C1_7A0E_44D8_B6F1_2C93_0E7D_A5B4_6C18_F2E9_3D70_8A5B_C4E1_1F96_27D3_B08A  # 256 bits


@pytest.mark.parametrize("seed", [0, 1234, 20240101, 2**63 - 1, 2**128 - 1])
def test_a_guessable_seed_is_refused_in_mpc_runs_before_anything_is_charged(tmp_path, capsys, seed):
    import time

    from secure_auc import Ledger, builtin_clients, evaluate, make_mechanism

    start = time.perf_counter()
    err = _one_line_error(capsys, ["evaluate", "--protocol", "mpc", "--samples", "500", "--seed", str(seed),
                                   "--ledger", str(tmp_path / "cli.json")])
    assert "--seed must be a secret of more than 128 bits with the MPC protocol" in err
    ledger = Ledger(tmp_path / "api.json")
    with pytest.raises(InputError, match="seed must be a secret of more than 128 bits"):
        evaluate(builtin_clients(2, samples=500), make_mechanism("laplace", 1.0), protocol="mpc", seed=seed,
                 ledger=ledger)
    assert time.perf_counter() - start < 10  # refused before any party started (each imports CrypTen)
    assert ledger.datasets() == [] and not (tmp_path / "cli.json").exists()  # nothing charged


def test_a_256_bit_seed_reproduces_the_plain_protocol_in_an_mpc_run(capsys):
    from secure_auc import builtin_clients, evaluate, make_mechanism

    clients = builtin_clients(2, samples=400)
    mech = make_mechanism("laplace", 1.0, allocation="adaptive")  # the same allocation as the command line below
    plain = evaluate(clients, mech, protocol="plain", seed=BIG_SEED)
    mpc = evaluate(clients, mech, protocol="mpc", seed=BIG_SEED,
                   mpc_options={"computing": 2, "provider": "tfp", "progress": False})
    assert mpc.auc == plain.auc and mpc.estimated_positives == plain.estimated_positives
    assert mpc.seed is None  # an MPC report keeps nothing to recompute the noise from
    # the command line takes the same seed (beyond 2^63) and gives the same estimate
    assert main(["evaluate", "--protocol", "plain", "--samples", "400", "--clients", "2", "--seed", str(BIG_SEED),
                 "--mechanism", "laplace", "--allocation", "adaptive", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["auc"] == plain.auc


@pytest.mark.parametrize("mechanism", [[], ["--mechanism", "rr"], ["--mechanism", "gaussian", "--delta", "1e-5"]])
def test_ledger_plan_takes_the_default_epsilon(capsys, mechanism):
    assert main(["ledger", "plan", "--evaluations", "3", *mechanism]) == 0
    out = capsys.readouterr().out
    assert "3 evaluations within eps = 1" in out, out


@pytest.mark.parametrize("options, message", [
    (["--mechanism", "none"], "--mechanism none adds no noise"),
    (["--clients", "0"], "--clients must be at least 1, got 0"),
    (["--samples", "1"], "--samples must be at least 2"),
])
def test_ledger_plan_refuses_what_it_cannot_plan_in_one_line(capsys, options, message):
    err = _one_line_error(capsys, ["ledger", "plan", "--evaluations", "3", *options])
    assert message in err


def test_simulate_refuses_split_options_when_each_file_is_a_client(tmp_path, capsys):
    for k in range(2):
        (tmp_path / f"c{k}.csv").write_text("score,label\n0.5,1\n0.25,0\n0.75,1\n")
    files = [str(tmp_path / "c0.csv"), str(tmp_path / "c1.csv")]
    for option in (["--clients", "3"], ["--data-seed", "3"]):
        err = _one_line_error(capsys, ["simulate", *files, *option, "-q"])
        assert f"{option[0]} does not apply to --partition files" in err


@pytest.mark.parametrize("timeout", ["nan", "inf", "0", "-1", "1e9"])
def test_a_client_refuses_a_timeout_that_is_not_a_number_of_seconds(tmp_path, capsys, timeout):
    from secure_auc.mpc.comm.channel import public_bytes
    from secure_auc.mpc.comm.roster import generate_identity, write_identity

    (tmp_path / "c.csv").write_text("score,label\n0.5,1\n0.25,0\n")
    keys = [generate_identity() for _ in range(4)]
    write_identity(tmp_path / "k.pem", keys[3])
    roster = {"server": public_bytes(keys[0]).hex(), "helpers": [public_bytes(keys[1]).hex()],
              "clients": [public_bytes(keys[3]).hex()], "dealer": public_bytes(keys[2]).hex()}
    (tmp_path / "r.json").write_text(json.dumps(roster))
    err = _one_line_error(capsys, ["client", str(tmp_path / "c.csv"), "--client", "0", "--clients", "1",
                                   "--roster", str(tmp_path / "r.json"), "--parties", "127.0.0.1:29999",
                                   "127.0.0.1:29998", "--identity", str(tmp_path / "k.pem"), "--timeout", timeout])
    assert f"--timeout must be a number of seconds in (0, 86400], got {float(timeout)}" in err, err


def test_an_undefined_estimator_is_said_in_the_report_without_numpys_warnings(tmp_path):
    """One positive and one negative: randomized response's flips can leave no class, the estimator is
    undefined (the report says so); NumPy's division warnings stay out of stderr."""
    (tmp_path / "p.csv").write_text("score,label\n0.5,1\n")
    (tmp_path / "n.csv").write_text("score,label\n0.3,0\n")
    argv = [sys.executable, "-m", "secure_auc", "evaluate", "--protocol", "plain", "--mechanism", "rr",
            str(tmp_path / "p.csv"), str(tmp_path / "n.csv"), "--json"]
    for seed in range(1, 6):
        res = subprocess.run(argv + ["--seed", str(seed)], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and res.stderr == "", res.stderr
        assert json.loads(res.stdout)["ci_low"] is None


@pytest.mark.parametrize("options, message", [
    (["--dataset", "x"], "--dataset needs --ledger"),
    (["--budget-delta", "0.1"], "--budget-delta needs --ledger"),
    (["--ledger", "{tmp}/l.db", "--budget-delta", "0.1"], "--budget-delta needs --budget"),
])
def test_ledger_options_without_effect_are_refused(tmp_path, capsys, options, message):
    (tmp_path / "a.csv").write_text("score,label\n0.5,1\n0.25,0\n")
    options = [o.replace("{tmp}", str(tmp_path)) for o in options]
    err = _one_line_error(capsys, ["evaluate", "--protocol", "plain", str(tmp_path / "a.csv"), *options])
    assert message in err
    assert not (tmp_path / "l.db").exists()


def test_a_run_that_times_out_at_once_is_one_line_without_torchs_log(tmp_path):
    """torch's C++ log (a line per connect that times out, pages of frames) stays out of stderr unless
    --verbose: the launcher names the failure in one line.  (Gloo's own connect retries, which it writes
    to stderr itself when the launcher stops a party mid-rendezvous, are not torch's log.)"""
    for k in range(2):
        (tmp_path / f"c{k}.csv").write_text("score,label\n0.5,1\n0.25,0\n0.75,1\n")
    res = subprocess.run([sys.executable, "-m", "secure_auc", "evaluate", str(tmp_path / "c0.csv"),
                          str(tmp_path / "c1.csv"), "-q", "--timeout", "0.01"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.splitlines()
    assert lines[-1].startswith("secure-auc: error: MPC run failed: "), res.stderr
    assert not [line for line in lines if "c10d" in line or "frame #" in line], res.stderr


@pytest.mark.parametrize("argv, message", [
    (["evaluate", "--epsilon", "abc"], "secure-auc evaluate: error: argument --epsilon: invalid float value: 'abc' "
                                       "(see secure-auc evaluate --help)"),
    (["ledger", "plan", "--evaluations", "x"], "secure-auc ledger plan: error: argument --evaluations: invalid int"),
    (["bogus"], "secure-auc: error: argument command: invalid choice: 'bogus'"),
])
def test_a_usage_error_is_one_line_naming_the_commands_help(capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and err.startswith(message), err


def test_a_client_of_no_clients_is_refused_as_such(tmp_path, capsys):
    (tmp_path / "c.csv").write_text("score,label\n0.5,1\n0.25,0\n")
    err = _one_line_error(capsys, ["client", str(tmp_path / "c.csv"), "--client", "0", "--clients", "0",
                                   "--roster", str(tmp_path / "r.json"), "--parties", "127.0.0.1:29999",
                                   "127.0.0.1:29998", "--identity", str(tmp_path / "k.pem")])
    assert "--clients must be at least 1, got 0" in err, err
