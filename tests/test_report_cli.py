"""secure-auc evaluate --metrics: one JSON object with every metric asked, the tables and the
figures, and one-line refusals (exit 2) before any work."""

import csv
import json

import numpy as np
import pytest
from sklearn.metrics import roc_curve

from secure_auc.cli import main
from secure_auc.data import write_client_csv


def test_metrics_in_json_without_noise_match_scikit_learn_and_files_are_written(tmp_path, capsys):
    rng = np.random.default_rng(2)
    paths, ys, ss = [], [], []
    for k in range(2):
        y = (rng.random(400) < 0.35).astype(int)
        s = np.round(rng.random(400) * 0.7 + 0.3 * y, 2)
        write_client_csv(tmp_path / f"c{k}.csv", s, y)
        paths.append(str(tmp_path / f"c{k}.csv"))
        ys.append(y)
        ss.append(s)
    y, s = np.concatenate(ys), np.concatenate(ss)
    code = main(["evaluate", "--protocol", "plain", *paths, "--mechanism", "none", "--json",
                 "--metrics", "auc", "roc", "pr", "ks", "lift", "precision-at", "calibration", "logloss",
                 "--rank-bands", "20", "--top-fractions", "0.05", "0.3",
                 "--csv", str(tmp_path / "tables"), "--plot", str(tmp_path / "figs")])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("roc", "pr", "ks", "ks_at", "average_precision", "lift", "precision_at", "recall_at", "log_loss",
                "calibration", "auc"):
        assert key in d, key
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    assert d["ks"] == pytest.approx(max(np.array(d["roc"]["tpr"]) - np.array(d["roc"]["fpr"])))
    assert d["ks"] <= np.max(tpr - fpr) + 1e-15  # at 20 bands: a subset of the thresholds
    assert set(d["precision_at"]) == {"0.05", "0.3"}
    with open(tmp_path / "tables" / "roc.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["tpr"]) for r in rows] == d["roc"]["tpr"]
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["calibration.png", "lift.png", "pr.png", "roc.png"]
    assert all((tmp_path / "figs" / n).read_bytes()[:4] == b"\x89PNG" for n in ("roc.png", "lift.png"))


@pytest.mark.parametrize("argv, message", [
    (["--protocol", "plain", "--csv", "x"], "--csv does not apply without --metrics"),
    (["--protocol", "plain", "--metrics", "roc", "--metric-split", "auc=0.2", "bands=0.2"], "add up to 1"),
    (["--protocol", "plain", "--metrics", "roc", "--metric-split", "auc"], "RELEASE=SHARE"),
    (["--protocol", "plain", "--metrics", "f1"], "unknown metric 'f1'"),
    (["--protocol", "plain", "--metrics", "roc", "--top-fractions", "1.5"], "top fractions must be in"),
])
def test_bad_report_options_are_refused_in_one_line(argv, message, capsys):
    assert main(["evaluate", "--samples", "500", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
