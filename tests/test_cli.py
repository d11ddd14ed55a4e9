"""The command line: report, JSON, and one clear error per kind of bad input."""

import json
import subprocess
import sys

import numpy as np
import pytest

from secure_auc.cli import main
from secure_auc.data import write_client_csv


def write_clients(tmp_path, n=3, size=40, seed=0):
    rng = np.random.default_rng(seed)
    paths = []
    for k in range(n):
        p = tmp_path / f"client{k}.csv"
        write_client_csv(p, rng.random(size), (rng.random(size) < 0.4).astype(int))
        paths.append(str(p))
    return paths


def test_json_report_from_files(tmp_path, capsys):
    from sklearn.metrics import roc_auc_score
    from secure_auc.data import read_client_csv

    paths = write_clients(tmp_path)
    assert main(["evaluate", "--protocol", "plain", *paths, "--mechanism", "none", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("auc", "reference_auc", "epsilon", "mechanism", "protocol", "clients", "samples", "seconds"):
        assert key in out
    data = [read_client_csv(p) for p in paths]
    ref = roc_auc_score(np.concatenate([d.labels for d in data]), np.concatenate([d.scores for d in data]))
    assert out["auc"] == pytest.approx(ref, abs=1e-12)
    assert out["clients"] == 3 and out["samples"] == 120 and out["protocol"] == "plain"


def test_table_report_labels_the_reference(capsys):
    assert main(["evaluate", "--protocol", "plain", "--samples", "5000", "--clients", "5", "--mechanism", "rr", "--epsilon", "2", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "AUC (DP estimate)" in out and "reference AUC*" in out and "a real deployment would not have it" in out
    assert "eps = 2" in out


def test_python_dash_m_entry_point():
    res = subprocess.run([sys.executable, "-m", "secure_auc", "evaluate", "--protocol", "plain", "--samples", "2000", "--json", "--seed", "0"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["samples"] == 2000


def _err(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("secure-auc: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    "content, match",
    [
        ("score,label\n0.5,1\nnan,0\n", "row 2 (line 3), column 'score': 'nan' is not finite"),
        ("score,label\n0.5,1\ninf,0\n", "column 'score': 'inf' is not finite"),
        ("score,label\n0.5,3\n", "row 1 (line 2), column 'label': '3' is not a label"),
        ("score\n0.5\n", "missing column 'label'"),
        ("", "file is empty"),
        ("score,label\n", "has a header but no data rows"),
    ],
)
def test_bad_file(tmp_path, capsys, content, match):
    good = write_clients(tmp_path, n=1)
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    err = _err(capsys, ["evaluate", "--protocol", "plain", *good, str(bad), "--mechanism", "none"])
    assert match in err and "bad.csv" in err


def test_all_labels_one_class_across_clients(tmp_path, capsys):
    paths = []
    for k in range(2):
        p = tmp_path / f"c{k}.csv"
        write_client_csv(p, [0.1, 0.2], [0, 0])
        paths.append(str(p))
    err = _err(capsys, ["evaluate", "--protocol", "plain", *paths])
    assert "all 4 labels across all 2 clients are negative" in err and "undefined" in err


@pytest.mark.parametrize(
    "args, match",
    [
        (["--epsilon", "0"], "epsilon must be > 0"),
        (["--epsilon", "-2"], "epsilon must be > 0"),
        (["--mechanism", "rr", "--epsilon", "0"], "epsilon must be > 0"),
        (["--mechanism", "gaussian", "--delta", "1"], "delta must be in (0, 1)"),
        (["--mechanism", "gaussian", "--delta", "0"], "delta must be in (0, 1)"),
        (["--mechanism", "gaussian"], "needs --delta"),
        (["--allocation", "split", "--alpha", "1.5"], "alpha must be in (0, 1)"),
        (["--allocation", "split", "--alpha", "0"], "alpha must be in (0, 1)"),
        (["--clients", "0"], "clients must be between 1"),
    ],
)
def test_bad_parameters(capsys, args, match):
    err = _err(capsys, ["evaluate", "--protocol", "plain", "--samples", "1000", *args])
    assert match in err


def test_a_spreadsheet_bom_is_read(tmp_path, capsys):
    p = tmp_path / "bom.csv"
    p.write_bytes("\ufeffscore,label\n0.9,1\n0.2,0\n0.4,1\n".encode("utf-8"))
    q = tmp_path / "other.csv"
    q.write_text("score,label\n0.3,0\n0.8,1\n")
    assert main(["evaluate", "--protocol", "plain", str(p), str(q), "--mechanism", "none", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["auc"] == pytest.approx(1.0)


@pytest.mark.parametrize("data, match", [
    (b"score,label,note\n0.9,1,caf\xe9\n0.2,0,x\n", "not UTF-8 text"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "binary content"),
])
def test_undecodable_files_are_named(tmp_path, capsys, data, match):
    p = tmp_path / "bad.csv"
    p.write_bytes(data)
    assert main(["evaluate", "--protocol", "plain", str(p), "--mechanism", "none"]) == 2
    err = capsys.readouterr().err
    assert match in err and str(p) in err and "Traceback" not in err


def test_the_same_file_twice_is_refused(tmp_path, capsys):
    paths = write_clients(tmp_path, n=1)
    assert main(["evaluate", "--protocol", "plain", paths[0], str(tmp_path / "." / "client0.csv"), "--mechanism", "none"]) == 2
    assert "the same file as" in capsys.readouterr().err


@pytest.mark.parametrize("args, match", [
    (["--protocol", "mpc", "--port", "70000"], "--port must be in 1..65534"),
    (["--seed", "-1"], "--seed must be between 0"),
    (["--protocol", "mpc", "--timeout", "inf"], "--timeout must be"),
    (["--epsilon", "1e-300"], "epsilon must be between"),
    (["--mechanism", "gaussian", "--delta", "1e-320"], "delta must be at least"),
])
def test_out_of_range_numbers_end_before_anything_starts(capsys, args, match):
    assert main(["evaluate", "--protocol", "plain", "--samples", "200", *args]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("secure-auc ")


def test_json_never_holds_infinity():
    from secure_auc.cli import json_safe

    assert json.dumps(json_safe({"auc": float("inf"), "x": [float("nan"), 1.0]}), allow_nan=False) == \
        '{"auc": null, "x": [null, 1.0]}'


def test_the_commands_start_up_counts_from_its_process_start(monkeypatch, capsys):
    """``secure-auc evaluate --protocol mpc`` as a process's own command reports its start-up from the
    process's start (its imports included); ``seconds`` still leaves the start-up out."""
    import json

    import secure_auc.cli as cli_module
    import secure_auc.deploy.service as service

    monkeypatch.setattr(cli_module, "is_command_line", lambda: True)
    monkeypatch.setattr(service, "process_seconds", lambda: 100.0)  # as if the process had started 100 s ago
    assert cli_module.main(["evaluate", "--protocol", "mpc", "--samples", "300", "--clients", "2", "--computing-parties",
                            "2", "--provider", "tfp", "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 100.0 <= out["startup_seconds"] < 100.0 + 120, out
    assert 0.0 <= out["seconds"] < 60, out
