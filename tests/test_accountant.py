import json

import pytest

from secure_auc.cli import main
from secure_auc.dp.accountant import Ledger
from secure_auc.validation import InputError


def test_composition_and_persistence(tmp_path):
    path = tmp_path / "ledger.json"
    led = Ledger(path)
    led.set_budget("ads", 3.0, 1e-5)
    led.charge("ads", "laplace", 1.0)
    led.charge("ads", "gaussian", 0.5, 1e-6)
    led.save()
    again = Ledger(path)
    s = again.spent("ads")
    assert (s.epsilon, s.delta, s.releases) == (1.5, 1e-6, 2)
    assert again.spent("other").epsilon == 0


def test_refuses_a_run_over_budget(tmp_path):
    led = Ledger(tmp_path / "l.json")
    led.set_budget("ads", 2.0)
    led.charge("ads", "laplace", 1.5)
    with pytest.raises(InputError, match=r"dataset 'ads' would be exceeded: spent eps = 1.5 .* needs eps = 1; budget eps = 2"):
        led.check("ads", "laplace", 1.0)


def test_rr_with_the_same_flips_is_charged_once(tmp_path):
    led = Ledger(tmp_path / "l.json")
    led.set_budget("ads", 1.0)
    led.charge("ads", "rr", 1.0, seed=3)
    led.charge("ads", "rr", 1.0, seed=3)  # same flipped labels: free
    assert led.spent("ads").epsilon == 1.0
    with pytest.raises(InputError):
        led.check("ads", "rr", 1.0, seed=4)  # new flips cost again
    with pytest.raises(InputError):
        led.check("ads", "rr", 1.0)  # unseeded: fresh flips every run


def test_cli_ledger(tmp_path, capsys):
    path = tmp_path / "ledger.json"
    args = ["evaluate", "--samples", "2000", "--epsilon", "1", "--ledger", str(path), "--dataset", "d",
            "--budget", "2.5", "--json"]
    for expected in (1.0, 2.0):
        assert main(args) == 0
        assert json.loads(capsys.readouterr().out)["total_epsilon_spent"] == expected
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "privacy budget of dataset 'd' would be exceeded: spent eps = 2" in err
    assert len(json.loads(path.read_text())["datasets"]["d"]["releases"]) == 2


def test_corrupt_ledger_is_named(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(InputError, match="bad.json: not a privacy ledger"):
        Ledger(p)
