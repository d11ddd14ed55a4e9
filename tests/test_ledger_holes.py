"""Every way a careful user could make the privacy ledger under-count, each refused or charged.

The tests drive the command line (``secure-auc evaluate --ledger ...``) as a
user would, and check the ledger file and the exit code.
"""

import json
import os
import stat
import sys

import numpy as np
import pytest

from secure_auc.cli import main
from secure_auc.data.synthetic import make_ctr_dataset
from secure_auc.dp.rng import client_rngs
from secure_auc.dp.randomized_response import randomized_response


def _run(*args):
    return main(["evaluate", "--protocol", "plain", *map(str, args)])


@pytest.fixture
def files(tmp_path):
    scores, labels = make_ctr_dataset(600, seed=5)
    paths = []
    for k, part in enumerate(np.array_split(np.arange(600), 2)):
        p = tmp_path / f"c{k}.csv"
        p.write_text("score,label\n" + "".join(f"{float(s)!r},{int(y)}\n" for s, y in zip(scores[part], labels[part])))
        paths.append(p)
    return paths


def _releases(path):
    return [r for d in json.loads(path.read_text())["datasets"].values() for r in d["releases"]]


# ---- randomized response ------------------------------------------------------------------------
def test_rr_flips_at_two_eps_with_one_seed_are_nested():
    """Why the next test refuses: the same stream at two eps flips nested sets of labels."""
    y = np.zeros(20_000, dtype=np.int8)
    a = randomized_response(y, 1.0, client_rngs(3, 0).labels)
    b = randomized_response(y, 3.0, client_rngs(3, 0).labels)
    assert np.all(b <= a)  # every label flipped at eps = 3 is flipped at eps = 1


def test_rr_seed_reused_at_another_eps_is_refused(tmp_path, files, capsys):
    led = tmp_path / "l.json"
    assert _run(*files, "--mechanism", "rr", "--epsilon", 1, "--seed", 3, "--ledger", led) == 0
    assert _run(*files, "--mechanism", "rr", "--epsilon", 3, "--seed", 3, "--ledger", led) == 2
    assert "already used for randomized response at eps = 1" in capsys.readouterr().err


def test_rr_flip_reuse_on_changed_labels_is_charged(tmp_path, files, capsys):
    led = tmp_path / "l.json"
    args = ("--mechanism", "rr", "--epsilon", 1, "--seed", 3, "--ledger", led, "--json")
    assert _run(*files, *args) == 0
    assert _run(*files, *args) == 0  # the same labels: the same flips, free
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["total_epsilon_spent"] == 1.0
    lines = files[0].read_text().splitlines()
    lines[1] = lines[1][:-1] + ("0" if lines[1].endswith("1") else "1")  # one label changed
    files[0].write_text("\n".join(lines) + "\n")
    assert _run(*files, *args) == 0
    data = json.loads(led.read_text())["datasets"]
    assert len(data) == 3  # the changed labels are another dataset
    charged = sorted([r["epsilon"] for r in d["releases"]] for d in data.values())
    # the unchanged client reuses its flips; the changed client's new labels pay again
    assert charged == [[1.0], [1.0, 0.0], [1.0, 0.0, 0.0]]


# ---- the exact AUC -----------------------------------------------------------------------------------
def test_none_is_refused_when_a_budget_is_set(tmp_path, files, capsys):
    led = tmp_path / "l.json"
    assert _run(*files, "--epsilon", 1, "--ledger", led, "--budget", 2) == 0
    capsys.readouterr()
    assert _run(*files, "--mechanism", "none", "--ledger", led) == 2
    err = capsys.readouterr().err
    assert "has a privacy budget: --mechanism none releases the exact AUC" in err
    assert len(_releases(led)) == 2


def test_none_is_charged_as_infinite(tmp_path, files, capsys):
    led = tmp_path / "l.json"
    assert _run(*files, "--mechanism", "none", "--ledger", led) == 0
    assert all(r["epsilon"] is None and r["event"] == {"kind": "none"} for r in _releases(led))
    assert len(_releases(led)) == 2
    assert _run(*files, "--epsilon", 1, "--ledger", led, "--budget", 5) == 2  # nothing is left to spend


# ---- dataset identity and budgets -------------------------------------------------------------------
def test_one_dataset_whatever_the_path(tmp_path, files, capsys, monkeypatch):
    led = tmp_path / "l.json"
    monkeypatch.chdir(tmp_path)
    spellings = [[f.name for f in files], [f"./{f.name}" for f in files], [str(f.resolve()) for f in files]]
    assert _run(*spellings[0], "--epsilon", 1, "--ledger", led, "--budget", 1) == 0
    for other in spellings[1:]:
        assert _run(*other, "--epsilon", 1, "--ledger", led, "--budget", 1) == 2
        assert "would be exceeded" in capsys.readouterr().err
    assert len(json.loads(led.read_text())["datasets"]) == 2  # one per client, not per spelling


def test_a_budget_is_not_raised_silently(tmp_path, files, capsys):
    led = tmp_path / "l.json"
    assert _run(*files, "--epsilon", 1, "--ledger", led, "--budget", 1) == 0
    assert _run(*files, "--epsilon", 1, "--ledger", led, "--budget", 5) == 2
    assert "already has the budget eps = 1" in capsys.readouterr().err
    digest = next(iter(json.loads(led.read_text())["datasets"]))
    assert main(["ledger", "budget", str(led), digest[:12], "--epsilon", "5"]) == 0  # the explicit command
    assert "budget eps = 5" in capsys.readouterr().out


def test_budget_without_ledger_is_refused(files, capsys):
    assert _run(*files, "--epsilon", 1, "--budget", 1) == 2
    assert "--budget needs --ledger" in capsys.readouterr().err


# ---- reserve before release ---------------------------------------------------------------------------
def test_the_budget_is_reserved_before_the_run(tmp_path, files, monkeypatch):
    ev = sys.modules["secure_auc.evaluate"]

    led = tmp_path / "l.json"
    seen = {}

    def crash(roles, server):
        seen["releases"] = _releases(led)
        raise RuntimeError("killed mid-run")

    monkeypatch.setattr(ev, "run_plain", crash)
    with pytest.raises(RuntimeError):
        _run(*files, "--epsilon", 1, "--ledger", led)
    assert [r["state"] for r in seen["releases"]] == ["reserved", "reserved"]  # recorded before the release
    assert [r["state"] for r in _releases(led)] == ["failed", "failed"]  # and still charged


def test_an_unwritable_ledger_is_found_before_the_run(tmp_path, files, capsys, monkeypatch):
    ev = sys.modules["secure_auc.evaluate"]

    monkeypatch.setattr(ev, "run_plain", lambda *a: pytest.fail("the run started"))
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    assert _run(*files, "--epsilon", 1, "--ledger", blocker / "l.json") == 2
    assert "privacy ledger" in capsys.readouterr().err


# ---- the file itself -------------------------------------------------------------------------------
def test_ledger_is_private_and_its_temporary_file_unpredictable(tmp_path, files):
    led = tmp_path / "l.json"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for name in (f"l.json.{os.getpid()}.tmp", "l.json.tmp", ".l.json.tmp"):
        os.symlink(victim, tmp_path / name)  # planted links at the names a writer could guess
    assert _run(*files, "--epsilon", 1, "--ledger", led) == 0
    assert victim.read_text() == "precious"
    assert stat.S_IMODE(os.stat(led).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(str(led) + ".lock").st_mode) == 0o600


def test_a_symlinked_ledger_is_refused(tmp_path, files, capsys):
    target = tmp_path / "elsewhere.json"
    assert _run(*files, "--epsilon", 1, "--ledger", target) == 0
    link = tmp_path / "l.json"
    os.symlink(target, link)
    assert _run(*files, "--epsilon", 1, "--ledger", link) == 2
    assert "is a symbolic link" in capsys.readouterr().err


@pytest.mark.parametrize("mutate, match", [
    (lambda d: "", "is empty"),
    (lambda d: d.replace('"epsilon": 1.0', '"epsilon": NaN', 1), "NaN is not a number"),
    (lambda d: d.replace('"epsilon": 1.0', '"epsilon": -1.0', 1), "epsilon must be a finite number >= 0"),
    (lambda d: d.replace('"epsilon": 1.0', '"epsilon": "1"', 1), "epsilon must be a finite number >= 0"),
    (lambda d: d.replace('"releases": [', '"releases": "x", "old": [', 1), "needs a 'releases' list"),
    (lambda d: d.replace('"state": "released"', '"state": 3', 1), "state must be one of"),
    (lambda d: d.replace('"kind": "pure"', '"kind": "magic"', 1), "unknown privacy event kind"),
])
def test_a_broken_ledger_is_refused_with_one_line(tmp_path, files, capsys, mutate, match):
    led = tmp_path / "l.json"
    assert _run(*files, "--mechanism", "rr", "--epsilon", 1, "--ledger", led, "--budget", 3) == 0
    led.write_text(mutate(led.read_text()))
    capsys.readouterr()
    assert _run(*files, "--mechanism", "rr", "--epsilon", 1, "--ledger", led) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1 and "Traceback" not in err


# ---- the torchrun entry: each client charges its own ledger -----------------------------------------
def test_a_torchrun_client_charges_its_own_ledger(tmp_path, files):
    from secure_auc.cli.party import build_parser, reserve_client_ledger
    from secure_auc.data.io import read_client_csv
    from secure_auc.dp.accountant import Ledger, label_commitment
    from secure_auc.validation import InputError

    args = build_parser().parse_args([*map(str, files), "--mechanism", "distributed", "--epsilon", "1",
                                      "--ledger", str(tmp_path / "client{client}.json"), "--budget", "1.5"])
    from secure_auc.cli import mechanism_from_args

    mech = mechanism_from_args(args, clients=2)
    for k, f in enumerate(files):
        data = read_client_csv(f)
        ledger, res = reserve_client_ledger(args, mech, data, k, 2)
        ledger.finish(res)
        own = Ledger(tmp_path / f"client{k}.json")
        assert own.datasets() == [label_commitment(data.labels)]  # only its own labels
        assert own.spent(own.datasets()[0]).epsilon == pytest.approx(1.0)
        with pytest.raises(InputError, match="would be exceeded"):
            reserve_client_ledger(args, mech, data, k, 2)


def _reserve_forever(path):
    from secure_auc import make_mechanism
    from secure_auc.dp.accountant import Ledger, label_commitment

    led, ds = Ledger(path), label_commitment([0, 1, 1, 0])
    while True:
        led.reserve([ds], make_mechanism("laplace", 0.01))


def test_kill_9_at_any_moment_leaves_a_valid_ledger(tmp_path):
    import multiprocessing
    import signal
    import time

    from secure_auc.dp.accountant import Ledger

    path = tmp_path / "l.json"
    for delay in (0.0, 0.05, 0.13):
        proc = multiprocessing.get_context("fork").Process(target=_reserve_forever, args=(path,))
        proc.start()
        before = len(path.read_text()) if path.exists() else 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (len(path.read_text()) if path.exists() else 0) == before:
            time.sleep(0.01)  # until the child has written once
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        led = Ledger(path)  # parses and validates in full
        assert all(r["state"] == "reserved" for d in led.data["datasets"].values() for r in d["releases"])
    assert sum(len(d["releases"]) for d in Ledger(path).data["datasets"].values()) > 0
