"""Command-line options: ranges checked first, options that do not apply refused, defaults
stated, output modes (--json, --quiet, --verbose), units, and --out checked before a sweep."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from secure_auc.cli import build_parser, main
from secure_auc.cli.output import human_bytes


def _one_line_error(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("secure-auc: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("args, match", [
    (["--mechanism", "rr", "--alpha", "0.3"], "--alpha does not apply to --mechanism rr"),
    (["--mechanism", "rr", "--allocation", "split"], "--allocation does not apply to --mechanism rr"),
    (["--mechanism", "laplace", "--honest-fraction", "0.5"], "--honest-fraction does not apply to --mechanism laplace"),
    (["--mechanism", "laplace", "--alpha", "0.3"], "--alpha does not apply to --allocation adaptive"),
    (["--mechanism", "laplace", "--allocation", "orthogonal", "--alpha", "0.3"], "only to --allocation split"),
    (["--mechanism", "laplace", "--allocation", "split", "--beta", "0.3"], "only to --allocation orthogonal"),
    (["--mechanism", "laplace", "--delta", "1e-6"], "--delta does not apply to --mechanism laplace"),
    (["--mechanism", "distributed", "--protocol", "mpc", "--allocation", "split"], "does not apply to --mechanism distributed"),
    (["--mechanism", "none", "--epsilon", "2"], "--epsilon does not apply to --mechanism none"),
    (["--mechanism", "none", "--seed", "3"], "--seed does not apply to --mechanism none"),
    (["--timeout", "5"], "--timeout does not apply to --protocol plain"),
    (["--port", "5000"], "--port does not apply to --protocol plain"),
    (["--sort", "radix"], "--sort does not apply to --protocol plain"),
    (["--score-column", "p"], "--score-column does not apply without client files"),
])
def test_options_that_do_not_apply_are_refused(capsys, args, match):
    assert match in _one_line_error(capsys, ["evaluate", "--protocol", "plain", "--samples", "500", *args])


def test_builtin_data_options_with_files_are_refused(tmp_path, capsys):
    p = tmp_path / "a.csv"
    p.write_text("score,label\n0.2,0\n0.8,1\n")
    err = _one_line_error(capsys, ["evaluate", "--protocol", "plain", str(p), "--samples", "500"])
    assert "--samples does not apply to client files" in err
    assert "--large does not apply to client files" in _one_line_error(
        capsys, ["evaluate", "--protocol", "plain", str(p), "--large"])


@pytest.mark.parametrize("option", [["--samples", "500"], ["--base-rate", "0.3"], ["--data-auc", "0.8"]])
def test_large_fixes_the_built_in_set(capsys, option):
    err = _one_line_error(capsys, ["evaluate", "--protocol", "plain", "--large", *option])
    assert f"{option[0]} does not apply with --large" in err


@pytest.mark.parametrize("args, match", [
    (["--timeout", "nan"], "--timeout must be"),
    (["--timeout", "0"], "--timeout must be"),
    (["--timeout", "-3"], "--timeout must be"),
    (["--timeout", "inf"], "--timeout must be"),
    (["--port", "65535"], "--port must be in 1..65534"),
    (["--port", "-1"], "--port must be in 1..65534"),
    (["--seed", "1234"], "--seed must be a secret of more than 128 bits with the MPC protocol"),
    (["--seed", str(2**128 - 1)], "--seed must be a secret of more than 128 bits with the MPC protocol"),
    (["--seed", str(2**256)], "--seed must be between 0 and 2^256 - 1"),
    (["--epsilon", "1e-16"], "beyond the range of the released fixed-point statistics"),
    (["--epsilon", "nan"], "epsilon must be a finite number between 1e-06 and 10000"),
    (["--epsilon", "inf"], "epsilon must be a finite number between 1e-06 and 10000"),
    (["--data-seed", "-1"], "--data-seed must be between 0 and 2^63 - 1"),
])
def test_mpc_ranges_checked_before_any_party_starts(capsys, args, match):
    start = time.perf_counter()
    err = _one_line_error(capsys, ["evaluate", "--protocol", "plain", "--samples", "500", "--protocol", "mpc", *args])
    assert match in err
    assert time.perf_counter() - start < 5  # no party was started (one takes seconds to import CrypTen)


def test_simulate_checks_its_options(capsys):
    assert "--alpha does not apply to --methods rr" in _one_line_error(
        capsys, ["simulate", "--methods", "rr", "--alpha", "0.2", "--reps", "2", "--samples", "300"])
    assert "--delta does not apply to --noise laplace" in _one_line_error(
        capsys, ["simulate", "--delta", "1e-6", "--reps", "2", "--samples", "300"])
    assert "--seed must be between" in _one_line_error(capsys, ["simulate", "--seed", "-4", "--samples", "300"])


def _help(*cmd):
    return subprocess.run([sys.executable, "-m", "secure_auc", *cmd, "--help"], capture_output=True, text=True,
                          env=dict(os.environ, COLUMNS="300")).stdout


def test_help_states_the_defaults():
    ev = _help("evaluate")
    for text in ("Default: iid", "(default 0)", "(default 10)", "Default: laplace", "Default: adaptive"):
        assert text in ev, text
    sim = _help("simulate")
    for text in ("default: rr global local adaptive", "seed of the built-in data and of the iid split (default 0)",
                 "Default: laplace", "Default: files with input files, else iid noniid"):
        assert text in sim, text


def test_json_has_error_bars_and_no_infinity(capsys):
    assert main(["evaluate", "--protocol", "plain", "--samples", "3000", "--clients", "3", "--seed", "4", "--json"]) == 0
    out = capsys.readouterr().out
    d = json.loads(out)  # strict JSON: json.loads accepts Infinity, so check the text too
    assert "Infinity" not in out and "NaN" not in out
    assert d["std"] > 0 and d["ci_low"] < d["auc"] < d["ci_high"]
    assert d["ci_high"] - d["ci_low"] == pytest.approx(2 * 1.959963984540054 * d["std"])


def test_table_shows_std_and_interval(capsys):
    assert main(["evaluate", "--protocol", "plain", "--samples", "3000", "--clients", "3", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    assert "standard deviation" in out and "95% interval" in out


def test_quiet_and_verbose(capsys):
    assert main(["evaluate", "--protocol", "plain", "--samples", "400", "--quiet", "--mechanism", "rr", "--seed", "1"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["simulate", "--samples", "400", "--reps", "2", "--methods", "rr", "--clients", "5", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "rr" in captured.out
    with pytest.raises(SystemExit):
        build_parser().parse_args(["evaluate", "--protocol", "plain", "--quiet", "--verbose"])


def test_no_progress_lines_with_json(capsys):
    assert main(["simulate", "--samples", "400", "--reps", "2", "--methods", "rr", "--clients", "5", "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    json.loads(captured.out)


def test_human_bytes():
    assert [human_bytes(n) for n in (0, 999, 1000, 1_234_567, 8.05e8, 3e12)] == \
        ["0 B", "999 B", "1.0 kB", "1.2 MB", "805.0 MB", "3.0 TB"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_compare_out_unwritable_is_refused_before_the_sweep(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    start = time.perf_counter()
    err = _one_line_error(capsys, ["compare", "--quick", "--out", str(locked / "out")])
    assert "cannot write there" in err and time.perf_counter() - start < 5


def test_compare_out_under_a_file_is_refused_before_the_sweep(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    start = time.perf_counter()
    err = _one_line_error(capsys, ["compare", "--quick", "--out", str(f)])
    assert "exists and is not a folder" in err and time.perf_counter() - start < 5
    err = _one_line_error(capsys, ["compare", "--quick", "--out", str(f / "sub")])
    assert "cannot write there" in err
