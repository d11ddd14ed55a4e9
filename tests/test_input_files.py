"""Client files in every supported form (CSV with/without BOM, UTF-16, gzip, Parquet, other
column names), and every unreadable input refused with one line naming the file, exit 2."""

import gzip
import os
import sys

import numpy as np
import pytest

from secure_auc.cli import main
from secure_auc.data import read_client_file, write_client_csv
from secure_auc.evaluate import load_clients
from secure_auc.validation import InputError

SCORES = [0.9, 0.25, 0.4, 0.7]
LABELS = [1, 0, 0, 1]
CSV = "id,score,label\n1,0.9,1\n2,0.25,0\n3,0.4,0\n4,0.7,1\n"


def _same(data):
    assert data.scores.tolist() == SCORES and data.labels.tolist() == LABELS
    assert data.labels.dtype == np.int8 and data.scores.dtype == np.float64


@pytest.mark.parametrize("raw", [
    CSV.encode(),
    b"\xef\xbb\xbf" + CSV.encode(),  # UTF-8 with BOM (spreadsheets)
    CSV.replace("\n", "\r\n").encode(),  # Windows line ends
    CSV.encode("utf-16"),  # UTF-16 with its BOM
    gzip.compress(CSV.encode(), mtime=0),  # mtime 0: the same parameters in every test worker
    gzip.compress(b"\xef\xbb\xbf" + CSV.encode(), mtime=0),
])
def test_csv_forms_are_read_the_same(tmp_path, raw):
    p = tmp_path / "client.dat"  # recognised by content, not by name
    p.write_bytes(raw)
    _same(read_client_file(p))


def test_other_column_names(tmp_path, capsys):
    p = tmp_path / "c.csv.gz"
    p.write_bytes(gzip.compress(b"pred, Clicked \n0.9,1\n0.25,0\n0.4,0\n0.7,1\n"))
    data = read_client_file(p, score_column="PRED", label_column="clicked")
    _same(data)
    with pytest.raises(InputError, match=r"c.csv.gz: missing column 'score' \(another name: --score-column\)"):
        read_client_file(p)
    assert main(["evaluate", "--protocol", "plain", str(p), "--score-column", "pred", "--label-column", "clicked", "--mechanism", "none",
                 "--json"]) == 0
    assert '"auc": 1.0' in capsys.readouterr().out


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    p = tmp_path / "c.parquet"
    pq.write_table(pa.table({"Score": SCORES, "label": [bool(y) for y in LABELS], "x": ["a"] * 4}), p)
    _same(read_client_file(p))
    pq.write_table(pa.table({"s": SCORES, "y": ["1", "0", "false", "TRUE"]}), p)
    data = read_client_file(p, score_column="s", label_column="y")
    assert data.labels.tolist() == [1, 0, 0, 1]
    pq.write_table(pa.table({"score": [0.1, None], "label": [0, 1]}), p)
    with pytest.raises(InputError, match=r"c.parquet: row 2, column 'score': missing value"):
        read_client_file(p)
    pq.write_table(pa.table({"score": [0.1, float("inf")], "label": [0, 1]}), p)
    with pytest.raises(InputError, match=r"c.parquet: row 2, column 'score': inf is not finite"):
        read_client_file(p)
    pq.write_table(pa.table({"score": [0.1, 0.2], "label": [0, 2]}), p)
    with pytest.raises(InputError, match=r"c.parquet: row 2, column 'label': .*2.* is not a label"):
        read_client_file(p)
    p.write_bytes(b"PAR1 truncated")
    with pytest.raises(InputError, match=r"c.parquet: not a readable Parquet file"):
        read_client_file(p)


def test_parquet_without_pyarrow_is_one_line(tmp_path, monkeypatch):
    p = tmp_path / "c.parquet"
    p.write_bytes(b"PAR1....PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails as if not installed
    with pytest.raises(InputError, match=r"c.parquet: a Parquet file; reading it needs pyarrow: "
                                         r"pip install 'secure-auc\[parquet\]'"):
        read_client_file(p)


def _cli_error(capsys, paths):
    code = main(["evaluate", "--protocol", "plain", *map(str, paths), "--mechanism", "none"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("secure-auc: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_unreadable_inputs_are_one_line_naming_the_file(tmp_path, capsys):
    good = tmp_path / "good.csv"
    write_client_csv(good, SCORES, LABELS)
    cases = {}
    cases["missing"] = (tmp_path / "nope.csv", "cannot open client file (No such file or directory)")
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    cases["folder"] = (folder, "is a folder, not a client file")
    binary = tmp_path / "bin.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    cases["binary"] = (binary, "binary content")
    latin = tmp_path / "latin.csv"
    latin.write_bytes("score,label,city\n0.9,1,Malmö\n0.2,0,x\n".encode("latin-1"))
    cases["latin-1"] = (latin, "not UTF-8 text: byte 0xf6 at line 2")
    broken_gz = tmp_path / "broken.csv.gz"
    broken_gz.write_bytes(gzip.compress(CSV.encode())[:-12])
    cases["gzip"] = (broken_gz, "gzip-compressed but cannot be decompressed")
    gz_binary = tmp_path / "gzbin.csv.gz"
    gz_binary.write_bytes(gzip.compress(bytes(range(256))))
    cases["gzip of binary"] = (gz_binary, "binary content")
    for name, (path, match) in cases.items():
        err = _cli_error(capsys, [good, path])
        assert str(path) in err and match in err, (name, err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_permission_denied(tmp_path, capsys):
    p = tmp_path / "secret.csv"
    write_client_csv(p, SCORES, LABELS)
    p.chmod(0)
    err = _cli_error(capsys, [p])
    assert str(p) in err and "Permission denied" in err


def test_the_same_file_twice_under_any_spelling(tmp_path, capsys, monkeypatch):
    a = tmp_path / "a.csv"
    write_client_csv(a, SCORES, LABELS)
    (tmp_path / "sub").mkdir()
    os.symlink(a, tmp_path / "link.csv")
    os.link(a, tmp_path / "hard.csv")
    monkeypatch.chdir(tmp_path)
    for other in ["link.csv", "hard.csv", "./a.csv", "sub/../a.csv", str(a)]:
        err = _cli_error(capsys, ["a.csv", other])
        assert f"{other}: the same file as a.csv" in err
    with pytest.raises(InputError, match="the same file"):
        load_clients(["a.csv", "b.csv", "link.csv"])
    assert main(["simulate", "a.csv", "link.csv", "--reps", "2"]) == 2
    assert "the same file as" in capsys.readouterr().err


def test_a_path_that_is_no_regular_file_is_one_line(tmp_path):
    write_client_csv(tmp_path / "a.csv", SCORES, LABELS)
    # "a.csv/" is no file (pathlib would read it as a.csv: one client counted twice beside a.csv)
    with pytest.raises(InputError, match=r"a.csv/: cannot open client file \(Not a directory\)"):
        read_client_file(str(tmp_path / "a.csv") + "/")
    os.mkfifo(tmp_path / "pipe.csv")  # reading it would block
    with pytest.raises(InputError, match=r"pipe.csv: not a regular file \(a device, a pipe or a socket\)"):
        read_client_file(tmp_path / "pipe.csv")
    with pytest.raises(InputError, match=r"^/dev/zero: not a regular file"):  # read forever
        read_client_file("/dev/zero")
    with pytest.raises(InputError, match=r"cannot open client file \(File name too long\)"):
        read_client_file(tmp_path / ("x" * 300 + ".csv"))


@pytest.mark.parametrize("text, options, message", [
    ("score,label,score\n0.5,1,0.1\n0.2,0,0.1\n", {}, r"the header names column 'score' 2 times \(columns 1, 3\)"),
    ("Score,label, score \n0.5,1,0.1\n0.2,0,0.1\n", {}, r"names column 'score' 2 times"),
    ("score,label\n0.5,1\n0.2,0\n", {"score_column": "label"},
     r"column 'label' is asked for as both the score and the label column"),
    ("id,score,label\n7,0.5,1\n8,0.2,0\n", {"id_column": "score"},
     r"column 'score' is asked for as both the score and the identifier column"),
    ("score,label\n0.5,1\n0.2,0,7\n", {}, r"row 2 \(line 3\): has 3 fields, the header names 2"),
    ("score,label\n0.5,1,\n0.2,0,\n", {}, r"row 1 \(line 2\): has 3 fields, the header names 2"),
])
def test_an_ambiguous_or_ragged_file_is_refused(tmp_path, text, options, message):
    (tmp_path / "c.csv").write_text(text)
    with pytest.raises(InputError, match=message):
        read_client_file(tmp_path / "c.csv", **options)


def test_a_trailing_slash_does_not_count_a_client_twice(tmp_path, capsys):
    write_client_csv(tmp_path / "a.csv", SCORES, LABELS)
    write_client_csv(tmp_path / "b.csv", [0.3, 0.6], [0, 1])
    code = main(["evaluate", "--protocol", "plain", "--mechanism", "none", str(tmp_path / "a.csv"),
                 str(tmp_path / "b.csv"), str(tmp_path / "a.csv") + "/"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "a.csv/: cannot open client file (Not a directory)" in err, err


@pytest.mark.parametrize("score", ["1_000", "\u0661\u0662", "\uff11"])
def test_a_score_is_a_decimal_number_in_ascii(tmp_path, score):
    (tmp_path / "c.csv").write_text(f"score,label\n0.25,0\n{score},1\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"row 2 \(line 3\), column 'score': .* is not a number"):
        read_client_file(tmp_path / "c.csv")
