import json
import multiprocessing

import pytest

from secure_auc.cli import main
from secure_auc.dp.accountant import Ledger
from secure_auc.cli.ledger import main as ledger_main
from secure_auc.validation import InputError


def test_composition_and_persistence(tmp_path):
    path = tmp_path / "ledger.json"
    led = Ledger(path)
    led.set_budget("ads", 3.0, 1e-5)
    led.charge("ads", "laplace", 1.0)
    led.charge("ads", "gaussian", 0.5, 1e-6)
    led.charge("other", "distributed", 0.25)
    again = Ledger(path)
    s = again.spent("ads")
    assert (s.epsilon, s.delta, s.releases) == (1.5, 1e-6, 2)
    assert again.spent("other").epsilon == 0.25
    assert again.spent("never").epsilon == 0
    assert again.budget("ads") == {"epsilon": 3.0, "delta": 1e-5}
    rel = json.loads(path.read_text())["datasets"]["ads"]["releases"]
    assert [r["mechanism"] for r in rel] == ["laplace", "gaussian"] and all("time" in r for r in rel)


def test_refuses_a_run_over_budget(tmp_path):
    led = Ledger(tmp_path / "l.json")
    led.set_budget("ads", 2.0)
    led.charge("ads", "laplace", 1.5)
    with pytest.raises(InputError, match=r"dataset 'ads' would be exceeded: spent eps = 1.5 .* needs eps = 1; "
                                         r"budget eps = 2"):
        led.check("ads", "laplace", 1.0)
    with pytest.raises(InputError, match="would be exceeded"):
        led.charge("ads", "laplace", 1.0)
    assert Ledger(tmp_path / "l.json").spent("ads").releases == 1  # the refused run left no trace
    led.charge("ads", "laplace", 0.5)  # exactly the budget is fine
    with pytest.raises(InputError, match=r"needs eps = 0.1, delta = 1e-06; budget eps = 2, delta = 0"):
        led.check("ads", "gaussian", 0.1, 1e-6)


def test_budget_is_stored_and_enforced_in_later_runs(tmp_path):
    path = tmp_path / "l.json"
    first = Ledger(path)
    first.set_budget("ads", 1.0)
    first.save()
    with pytest.raises(InputError, match="would be exceeded"):
        Ledger(path).charge("ads", "laplace", 1.5)


def test_rr_with_the_same_flips_is_charged_once(tmp_path):
    led = Ledger(tmp_path / "l.json")
    led.set_budget("ads", 1.0)
    sizes = [100, 250]
    led.charge("ads", "rr", 1.0, seed=3, layout=sizes)
    total = led.charge("ads", "rr", 1.0, seed=3, layout=sizes)  # same flipped labels: free
    assert (total.epsilon, total.releases) == (1.0, 2)
    for kwargs in (dict(seed=4, layout=sizes),  # new flips
                   dict(seed=3, layout=[150, 200]),  # other clients: other streams per sample
                   dict(seed=3),  # layout unknown: cannot tell
                   dict(layout=sizes)):  # unseeded: fresh flips every run
        with pytest.raises(InputError, match="would be exceeded"):
            led.check("ads", "rr", 1.0, **kwargs)
    with pytest.raises(InputError):
        led.check("ads", "rr", 0.5, seed=3, layout=sizes)  # other eps: other flips


def test_a_noise_seed_is_not_reused(tmp_path):
    led = Ledger(tmp_path / "l.json")
    led.charge("ads", "laplace", 1.0, seed=7)
    with pytest.raises(InputError, match="--seed 7 was already used for laplace noise"):
        led.check("ads", "distributed", 1.0, seed=7)
    led.check("ads", "laplace", 1.0, seed=8)
    led.check("other", "laplace", 1.0, seed=7)
    led.check("ads", "rr", 1.0, seed=7, layout=[10])  # RR's label stream is independent of the noise stream


def _charge_one(path):
    Ledger(path).charge("ads", "laplace", 0.1)


def test_concurrent_runs_lose_no_charge(tmp_path):
    path = tmp_path / "l.json"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_charge_one, [path] * 20)
    assert Ledger(path).spent("ads").releases == 20


def test_report(tmp_path, capsys):
    path = tmp_path / "l.json"
    led = Ledger(path)
    led.set_budget("ads", 4.0)
    led.charge("ads", "laplace", 1.0)
    assert ledger_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "ads: eps = 1, delta = 0 in 1 release(s); budget eps = 4, delta = 0; left eps = 3" in out


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


@pytest.mark.parametrize("text, match", [("{not json", "bad.json: not a privacy ledger"),
                                         ("[1, 2]", "bad.json: not a privacy ledger")])
def test_corrupt_ledger_is_named(tmp_path, text, match):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(InputError, match=match):
        Ledger(p)
