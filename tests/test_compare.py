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
    assert "[1/4] M=300 parties=2: plain protocol" in captured.err
