"""Every way a careful user could make the privacy ledger under-count, each refused or charged.

The tests drive the command line (``secure-auc evaluate --ledger ...``) as a
user would, and check the ledger file and the exit code.
"""

import json
import math
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest

from secure_auc.cli import main
from secure_auc.data.synthetic import make_ctr_dataset
from secure_auc.dp.rng import client_rngs
from secure_auc.dp.randomized_response import randomized_response
from secure_auc.validation import InputError


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
    from secure_auc.dp.accountant import Ledger

    return Ledger(path).releases()


# ---- randomized response ------------------------------------------------------------------------
def test_rr_flips_at_two_eps_with_one_seed_are_dependent():
    """Why the next test refuses: the same stream at two eps gives two dependent draws, not two independent
    releases.  At eps = 1 and 3 (both with denominator 1) the flips are two functions of one geometric
    count V: V odd at eps = 1, floor(V / 3) odd at eps = 3; so both flip exactly when V mod 6 is 3 or 5."""
    n = 20_000
    y = np.zeros(n, dtype=np.int8)
    a = randomized_response(y, 1.0, client_rngs(3, 0).labels)
    b = randomized_response(y, 3.0, client_rngs(3, 0).labels)
    assert np.array_equal(a, randomized_response(y, 1.0, client_rngs(3, 0).labels))  # one seed, one eps: one draw
    q = math.exp(-1.0)
    both = (1 - q) * (q**3 + q**5) / (1 - q**6)  # P(V mod 6 in {3, 5}), about 0.036
    alone = [1 / (1 + math.exp(e)) for e in (1.0, 3.0)]
    hits = int(np.sum((a == 1) & (b == 1)))
    assert binomtest(hits, n, both).pvalue > 1e-3
    assert binomtest(hits, n, alone[0] * alone[1]).pvalue < 1e-12  # independent draws would give about 0.013
    assert np.any(b > a)  # not nested: V mod 6 = 4 flips at eps = 3 only


def test_rr_seed_reused_at_another_eps_is_refused(tmp_path, files, capsys):
    led = tmp_path / "l.db"
    assert _run(*files, "--mechanism", "rr", "--epsilon", 1, "--seed", 3, "--ledger", led) == 0
    assert _run(*files, "--mechanism", "rr", "--epsilon", 3, "--seed", 3, "--ledger", led) == 2
    assert "already used for randomized response at eps = 1" in capsys.readouterr().err


def test_rr_flip_reuse_on_changed_labels_is_charged(tmp_path, files, capsys):
    led = tmp_path / "l.db"
    args = ("--mechanism", "rr", "--epsilon", 1, "--seed", 3, "--ledger", led, "--json")
    assert _run(*files, *args) == 0
    assert _run(*files, *args) == 0  # the same labels: the same flips, free
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["total_epsilon_spent"] == 1.0
    lines = files[0].read_text().splitlines()
    lines[1] = lines[1][:-1] + ("0" if lines[1].endswith("1") else "1")  # one label changed
    files[0].write_text("\n".join(lines) + "\n")
    assert _run(*files, *args) == 0
    charged = [(r["evaluation"], r["client"], r["epsilon"]) for r in _releases(led)]
    # the unchanged client reuses its flips; the changed client's new labels pay again
    assert charged == [(1, 0, 1.0), (1, 1, 1.0), (2, 0, 0.0), (2, 1, 0.0), (3, 0, 1.0), (3, 1, 0.0)]


# ---- the exact AUC -----------------------------------------------------------------------------------
def test_none_is_refused_when_a_budget_is_set(tmp_path, files, capsys):
    led = tmp_path / "l.db"
    assert _run(*files, "--epsilon", 1, "--ledger", led, "--budget", 2) == 0
    capsys.readouterr()
    assert _run(*files, "--mechanism", "none", "--ledger", led) == 2
    err = capsys.readouterr().err
    assert "has a privacy budget: --mechanism none releases the exact AUC" in err
    assert len(_releases(led)) == 2


def test_none_is_charged_as_infinite(tmp_path, files, capsys):
    led = tmp_path / "l.db"
    assert _run(*files, "--mechanism", "none", "--ledger", led) == 0
    assert all(r["epsilon"] is None and r["event"] == {"kind": "none"} for r in _releases(led))
    assert len(_releases(led)) == 2
    assert _run(*files, "--epsilon", 1, "--ledger", led, "--budget", 5) == 2  # nothing is left to spend


# ---- dataset identity and budgets -------------------------------------------------------------------
def test_one_dataset_whatever_the_path(tmp_path, files, capsys, monkeypatch):
    led = tmp_path / "l.db"
    monkeypatch.chdir(tmp_path)
    spellings = [[f.name for f in files], [f"./{f.name}" for f in files], [str(f.resolve()) for f in files]]
    assert _run(*spellings[0], "--epsilon", 1, "--ledger", led, "--budget", 1) == 0
    for other in spellings[1:]:
        assert _run(*other, "--epsilon", 1, "--ledger", led, "--budget", 1) == 2
        assert "would be exceeded" in capsys.readouterr().err
    assert len(_releases(led)) == 2  # one per client, not per spelling


def test_a_budget_is_not_raised_silently(tmp_path, files, capsys):
    led = tmp_path / "l.db"
    assert _run(*files, "--epsilon", 1, "--ledger", led, "--budget", 1) == 0
    assert _run(*files, "--epsilon", 1, "--ledger", led, "--budget", 5) == 2
    assert "already has the budget eps = 1" in capsys.readouterr().err
    assert main(["ledger", "budget", str(led), "--epsilon", "5"]) == 0  # the explicit command
    assert "budget per record: eps = 5" in capsys.readouterr().out
    assert _run(*files, "--epsilon", 1, "--ledger", led, "--budget", 5) == 0


def test_budget_without_ledger_is_refused(files, capsys):
    assert _run(*files, "--epsilon", 1, "--budget", 1) == 2
    assert "--budget needs --ledger" in capsys.readouterr().err


# ---- reserve before release ---------------------------------------------------------------------------
def test_the_budget_is_reserved_before_the_run(tmp_path, files, monkeypatch):
    ev = sys.modules["secure_auc.evaluate"]

    led = tmp_path / "l.db"
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
    assert _run(*files, "--epsilon", 1, "--ledger", blocker / "l.db") == 2
    assert "privacy ledger" in capsys.readouterr().err


# ---- the file itself -------------------------------------------------------------------------------
def test_ledger_is_private_and_its_temporary_file_unpredictable(tmp_path, files):
    led = tmp_path / "l.db"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for name in (f"l.db.{os.getpid()}.tmp", "l.db.tmp", ".l.db.tmp"):
        os.symlink(victim, tmp_path / name)  # planted links at the names a writer could guess
    assert _run(*files, "--epsilon", 1, "--ledger", led) == 0
    assert victim.read_text() == "precious"
    assert stat.S_IMODE(os.stat(led).st_mode) == 0o600
    os.symlink(victim, tmp_path / "l.db-journal")  # SQLite's journal: not followed, the run refused
    assert _run(*files, "--epsilon", 1, "--ledger", led) == 2
    assert victim.read_text() == "precious"
    os.unlink(tmp_path / "l.db-journal")
    assert len(_releases(led)) == 2


def test_a_symlinked_ledger_is_refused(tmp_path, files, capsys):
    target = tmp_path / "elsewhere.json"
    assert _run(*files, "--epsilon", 1, "--ledger", target) == 0
    link = tmp_path / "l.db"
    os.symlink(target, link)
    assert _run(*files, "--epsilon", 1, "--ledger", link) == 2
    assert "is a symbolic link" in capsys.readouterr().err


@pytest.mark.parametrize("mutate, match", [
    (lambda p: p.write_bytes(b""), "is empty"),
    (lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200), "not a valid privacy ledger"),
    (lambda p: p.write_text("hello"), "not an SQLite database"),
    ("UPDATE charges SET epsilon = -1 WHERE id = 1", "epsilon must be a finite number >= 0"),
    ("UPDATE charges SET state = 3 WHERE id = 1", "state must be one of"),
    ("UPDATE charges SET event = replace(event, 'pure', 'magic')", "unknown privacy event kind"),
    ("UPDATE charges SET event = '{\"kind\": \"pure\", \"epsilon\": NaN}'", "NaN is not a number"),
    ("UPDATE meta SET value = 'x' WHERE name = 'format'", "format 'x'"),
    ("UPDATE meta SET value = NULL WHERE name = 'key'", "key is missing"),
    ("UPDATE members SET tags = x'0102'", "not a list of 64-bit tags"),
    ("DELETE FROM members", "should have"),
    ("DELETE FROM charges WHERE id = 1", "names a missing group or release"),
    ("DELETE FROM history WHERE charge_id = 1", "was charged to 1 records, its groups hold 0"),
    ("DROP TABLE meta", "no 'meta' table"),
])
def test_a_broken_ledger_is_refused_with_one_line(tmp_path, files, capsys, mutate, match):
    import sqlite3

    led = tmp_path / "l.db"
    assert _run(*files, "--mechanism", "rr", "--epsilon", 1, "--ledger", led, "--budget", 3) == 0
    if isinstance(mutate, str):
        with sqlite3.connect(led) as db:
            db.execute(mutate)
        db.close()
    else:
        mutate(led)
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
                                      "--ledger", str(tmp_path / "client{client}.db"), "--budget", "1.5"])
    from secure_auc.cli import mechanism_from_args

    mech = mechanism_from_args(args, clients=2)
    for k, f in enumerate(files):
        data = read_client_csv(f)
        ledger, res = reserve_client_ledger(args, mech, data, k, 2)
        ledger.finish(res)
        own = Ledger(tmp_path / f"client{k}.db")
        assert [r["units"] for r in own.releases()] == [1]  # its own labels only
        assert own.spent(data).epsilon == pytest.approx(1.0) == own.spent(label_commitment(data.labels)).epsilon
        assert own.spent(read_client_csv(files[1 - k])).releases == 0
        with pytest.raises(InputError, match="would be exceeded"):
            reserve_client_ledger(args, mech, data, k, 2)


def _reserve_forever(path, log):
    from secure_auc import ClientData, make_mechanism
    from secure_auc.dp.accountant import Ledger

    led = Ledger(path)
    i = len(led.releases())  # a restarted process slides on: a record is in 60 windows at most in all
    while True:  # sliding windows of records: every reservation splits groups and rewrites members
        ids = np.arange(50 * i, 50 * i + 3000)
        led.reserve([ClientData(np.zeros(len(ids)), ids % 2, ids=ids)], make_mechanism("laplace", 0.01))
        i += 1
        with open(log, "a") as f:  # after the commit: the log never counts more than the ledger holds
            f.write("x")


def test_kill_9_at_any_moment_never_under_counts(tmp_path):
    import multiprocessing
    import signal
    import time

    from secure_auc.dp.accountant import Ledger

    path, log = tmp_path / "l.db", tmp_path / "log"
    for delay in (0.0, 0.05, 0.13, 0.31):
        proc = multiprocessing.get_context("fork").Process(target=_reserve_forever, args=(path, log))
        proc.start()
        before = log.stat().st_size if log.exists() else 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (log.stat().st_size if log.exists() else 0) == before:
            time.sleep(0.01)  # until the child has reserved once
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        led = Ledger(path)
        rel = led.releases()  # reads and checks in full: each release's records are all in the groups
        assert all(r["state"] == "reserved" for r in rel)
        assert len(rel) >= log.stat().st_size  # every reservation that returned is in the ledger
        windows = len(rel)
        assert led.spent().releases == min(windows, 60)  # record 50 * (w - 1) .. is in 60 windows at most
    assert log.stat().st_size > 0


# ---- per record --------------------------------------------------------------------------------------
def _id_file(path, ids, seed=0):
    """A client file with an id column: scores and labels drawn per record, so a record keeps its label."""
    ids = np.asarray(ids)
    y = (ids * 2654435761 % 97 < 30).astype(int)
    s = np.round(np.random.default_rng(seed).random(len(ids)) + 0.3 * y, 4)
    path.write_text("id,score,label\n" + "".join(f"user-{i:06d},{a},{b}\n" for i, a, b in zip(ids, s, y)))
    return path


def _spent_of(led, ids):
    from secure_auc import ClientData
    from secure_auc.dp.accountant import Ledger

    labels = np.zeros(len(ids), dtype=np.int8)
    return Ledger(led).spent(ClientData(np.zeros(len(ids)), labels, ids=np.array([f"user-{i:06d}" for i in ids])))


def test_reordered_labels_without_identifiers_are_the_same_dataset(tmp_path, files, capsys):
    led = tmp_path / "l.db"
    assert _run(*files, "--epsilon", 1, "--ledger", led, "--budget", 1) == 0
    for f in files:  # the same people's labels, rows reversed
        head, *rows = f.read_text().splitlines()
        f.write_text("\n".join([head, *rows[::-1]]) + "\n")
    assert _run(*files, "--epsilon", 1, "--ledger", led) == 2
    assert "would be exceeded for client 0's dataset" in capsys.readouterr().err


def test_records_are_charged_whatever_the_order_filter_or_growth(tmp_path, capsys):
    led, f = tmp_path / "l.db", tmp_path / "c.csv"
    args = ("--epsilon", 1, "--ledger", led, "--id-column", "id")
    rng = np.random.default_rng(1)
    assert _run(_id_file(f, np.arange(400)), *args, "--budget", 2) == 0
    day2 = rng.permutation(np.r_[np.arange(50, 400), np.arange(400, 500)])  # reordered, 50 dropped, 100 new
    assert _run(_id_file(f, day2, 1), *args) == 0
    assert _spent_of(led, np.arange(50, 400)).epsilon == 2.0
    assert _spent_of(led, np.r_[np.arange(50), np.arange(400, 500)]).epsilon == 1.0
    capsys.readouterr()
    # any dataset holding one record at the budget is refused, naming how many records are
    assert _run(_id_file(f, np.r_[np.arange(400, 500), [77], np.arange(50)]), *args) == 2
    assert "would be exceeded for 1 of client 0's 151 records: spent eps = 2 in 2 release(s)" in capsys.readouterr().err
    assert _run(_id_file(f, np.r_[np.arange(400, 500), np.arange(50)], 2), *args) == 0  # the others are at 1
    assert _spent_of(led, np.arange(500)).epsilon == 2.0 and _spent_of(led, [600]).releases == 0


def test_overlapping_datasets_are_charged_exactly_on_shared_records(tmp_path):
    from secure_auc.dp.accountant import Ledger

    led, f = tmp_path / "l.db", tmp_path / "c.csv"
    args = ("--mechanism", "rr", "--epsilon", 0.5, "--ledger", led, "--id-column", "id")
    for window in (np.arange(0, 300), np.arange(200, 500), np.arange(250, 260)):
        assert _run(_id_file(f, window), *args) == 0
    expected = {(0, 200): 0.5, (200, 250): 1.0, (250, 260): 1.5, (260, 300): 1.0, (300, 500): 0.5}
    for (a, b), eps in expected.items():
        s = _spent_of(led, np.arange(a, b))
        assert s.basic_epsilon == pytest.approx(eps), (a, b)
        assert s.releases == round(eps / 0.5)
    report = Ledger(led).report()
    assert "10 record(s): eps = 1.5" in report and "90 record(s): eps = 1," in report
    assert "400 record(s): eps = 0.5," in report


def test_identifiers_are_kept_keyed_never_in_the_clear(tmp_path):
    import hashlib
    import sqlite3

    f = _id_file(tmp_path / "c.csv", np.arange(300))
    tags = []
    for name in ("a.db", "b.db"):
        assert _run(f, "--epsilon", 1, "--ledger", tmp_path / name, "--id-column", "id") == 0
        raw = (tmp_path / name).read_bytes()
        for i in (0, 7, 299):
            text = f"user-{i:06d}".encode()
            assert text not in raw and text.decode("ascii").encode("utf-32-le") not in raw
            assert hashlib.sha256(text).digest()[:8] not in raw
        with sqlite3.connect(tmp_path / name) as db:
            tags.append(np.frombuffer(db.execute("SELECT tags FROM members").fetchone()[0], dtype="<i8"))
        db.close()
    assert len(tags[0]) == len(tags[1]) == 300 and not np.isin(tags[0], tags[1]).any()  # a key per ledger


def test_identifiers_are_text_and_repeated_ones_are_refused(tmp_path):
    from secure_auc import ClientData, Ledger, make_mechanism

    led = Ledger(tmp_path / "l.db")
    led.set_budget(1.0)
    y = np.array([0, 1, 1, 0])
    led.reserve([ClientData(np.zeros(4), y, ids=np.array([3, 10, -4, 2**62]))], make_mechanism("laplace", 1.0))
    with pytest.raises(InputError, match="would be exceeded for 1 of client 0's 2 records"):  # 7 and 10 as text
        led.reserve([ClientData(np.zeros(2), y[:2], ids=["7", "10"])], make_mechanism("laplace", 0.5))
    with pytest.raises(InputError, match="record identifier 'b' \\(row 3\\) appears more than once"):
        led.reserve([ClientData(np.zeros(3), y[:3], ids=["a", "b", "b"])], make_mechanism("laplace", 0.5))
    led.reserve([ClientData(np.zeros(2), y[:2], ids=["07", "3.0"])], make_mechanism("laplace", 1.0))  # others


def test_one_history_is_one_row_whatever_the_number_of_records(tmp_path):
    import sqlite3

    from secure_auc import ClientData, Ledger, make_mechanism

    path = tmp_path / "l.db"
    led = Ledger(path)
    ids = np.arange(5000)
    data = ClientData(np.zeros(5000), (ids % 3 == 0).astype(np.int8), ids=ids)
    keyed = led.keyed(data)  # keyed once, reserved every epoch
    for i in range(60):
        led.reserve([keyed if i % 2 else data], make_mechanism("laplace", 0.01))

    def counts():
        with sqlite3.connect(path) as db:
            out = [db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("groups", "members", "history")]
        db.close()
        return out

    assert counts() == [1, 1, 60] and path.stat().st_size < 200_000
    part = ClientData(np.zeros(100), np.zeros(100, dtype=np.int8), ids=ids[::50])
    led.reserve([part], make_mechanism("laplace", 0.01))  # splits the group in two: the 100, with 61 releases
    assert counts() == [2, 2, 60 + 61]
    assert led.spent(part).releases == 61 and led.spent(data).releases == 61
    with pytest.raises(InputError, match="keyed for another ledger"):
        Ledger(tmp_path / "other.db").reserve([keyed], make_mechanism("laplace", 0.01))


def test_an_earlier_json_ledger_is_refused_with_one_line(tmp_path, files, capsys):
    old = tmp_path / "privacy.json"
    old.write_text(json.dumps({"version": 2, "datasets": {}}) + "\n")
    assert _run(*files, "--epsilon", 1, "--ledger", old) == 2
    err = capsys.readouterr().err
    assert "a privacy ledger of an earlier version (JSON" in err and err.count("\n") == 1
    assert main(["ledger", "show", str(old)]) == 2


def test_ledger_show_of_a_missing_file_is_an_error(tmp_path, capsys):
    assert main(["ledger", "show", str(tmp_path / "nothing.db")]) == 2
    err = capsys.readouterr().err
    assert err == f"secure-auc: error: {tmp_path / 'nothing.db'}: no such privacy ledger\n"
    assert not (tmp_path / "nothing.db").exists()
    assert main(["ledger", "budget", str(tmp_path / "nothing.db"), "--epsilon", "1"]) == 2


def test_the_client_command_refuses_over_its_own_budget_before_releasing(tmp_path, capsys):
    """`secure-auc client` charges its own ledger before it connects: over budget, exit 2 and the reason;
    its computing parties (none listening here) are told if they can be reached."""
    from secure_auc import Ledger, make_mechanism
    from secure_auc.data.io import read_client_csv

    keys = {}
    for role in ("server", "helper1", "helper2", "dealer", "client0", "client1"):
        assert main(["keygen", str(tmp_path / f"{role}.pem")]) == 0
        keys[role] = capsys.readouterr().out.split()[-1]
    roster = tmp_path / "roster.json"
    roster.write_text(json.dumps({"server": keys["server"], "helpers": [keys["helper1"], keys["helper2"]],
                                  "dealer": keys["dealer"], "clients": [keys["client0"], keys["client1"]]}))
    f = _id_file(tmp_path / "c.csv", np.arange(200))
    led = tmp_path / "own.db"
    Ledger(led).reserve([read_client_csv(f, id_column="id")], make_mechanism("laplace", 1.0))
    argv = ["client", str(f), "--client", "0", "--clients", "2", "--epsilon", "1", "--roster", str(roster),
            "--identity", str(tmp_path / "client0.pem"), "--parties", "127.0.0.1:9", "127.0.0.1:9", "127.0.0.1:9",
            "--timeout", "1", "--ledger", str(led), "--budget", "1.5", "--id-column", "id"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "would be exceeded for 200 of client 0's 200 records: spent eps = 1 in 1 release(s)" in err
    assert err.count("\n") == 1
    assert len(Ledger(led).releases()) == 1  # nothing charged, nothing released


@pytest.mark.skipif(not (Path(sys.executable).parent / "torchrun").exists(), reason="torchrun not installed")
def test_a_deployed_client_over_its_budget_stops_the_run_naming_why(tmp_path, capsys):
    """The computing parties under torchrun, two `secure-auc client` processes; client 1's own ledger is
    spent: it exits 2 before releasing anything, and the server's error names it and the reason."""
    import subprocess

    from secure_auc import Ledger, make_mechanism
    from secure_auc.data.io import read_client_csv
    from secure_auc.mpc.launch import check_port_free, free_port

    keys = {}
    for role in ("server", "helper1", "helper2", "dealer", "client0", "client1"):
        assert main(["keygen", str(tmp_path / f"{role}.pem")]) == 0
        keys[role] = capsys.readouterr().out.split()[-1]
    roster = tmp_path / "roster.json"
    roster.write_text(json.dumps({"server": keys["server"], "helpers": [keys["helper1"], keys["helper2"]],
                                  "dealer": keys["dealer"], "clients": [keys["client0"], keys["client1"]]}))
    files = [_id_file(tmp_path / f"c{k}.csv", np.arange(100 * k, 100 * k + 80), k) for k in range(2)]
    Ledger(tmp_path / "own1.db").reserve([read_client_csv(files[1], id_column="id")], make_mechanism("laplace", 1.0))
    while True:
        base, master = free_port(), free_port()
        try:
            check_port_free("127.0.0.1", base + 2)
        except InputError:
            continue
        if master + 1 < base or master > base + 2:
            break
    common = ["--clients", "2", "--mechanism", "laplace", "--epsilon", "1", "--roster", str(roster), "--timeout", "90"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    bin_dir = Path(sys.executable).parent
    compute = subprocess.Popen(
        [str(bin_dir / "torchrun"), "--nnodes", "1", "--nproc-per-node", "4", "--master-addr", "127.0.0.1",
         "--master-port", str(master), "-m", "secure_auc.cli.compute", *common,
         "--identity-template", str(tmp_path / "{role}.pem"), "--client-port", str(base)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    clients = [subprocess.Popen(
        [sys.executable, "-m", "secure_auc", "client", str(files[k]), "--client", str(k), *common,
         "--parties", *[f"127.0.0.1:{base + r}" for r in range(3)], "--identity", str(tmp_path / f"client{k}.pem"),
         "--ledger", str(tmp_path / f"own{k}.db"), "--budget", "1.5", "--id-column", "id"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for k in range(2)]
    try:
        _, err = compute.communicate(timeout=300)
        client_err = [c.communicate(timeout=120)[1] for c in clients]
    finally:
        for p in [compute, *clients]:
            if p.poll() is None:
                p.kill()
    assert clients[1].returncode == 2
    assert "would be exceeded for 80 of client 1's 80 records" in client_err[1]
    assert compute.returncode != 0
    # the computing parties learn the reason (a code), not the client's figures: those stay in its own log
    assert "client 1 refused: its privacy budget would be exceeded (budget)" in err, err[-3000:]
    assert "80 records" not in err
    assert [r["state"] for r in Ledger(tmp_path / "own1.db").releases()] == ["reserved"]  # nothing more charged


def test_an_mpc_run_that_never_started_is_not_charged(tmp_path, files, capsys):
    """A busy port, or parties that never meet, fail before anything is computed: the reservation is
    withdrawn; a run that fails after the parties met stays charged (test_the_budget_is_reserved_...)."""
    import socket

    led = tmp_path / "l.db"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(["evaluate", *map(str, files), "--ledger", str(led), "--budget", "5", "--port", str(port - 1)])
    assert code == 2 and "is busy" in capsys.readouterr().err
    assert _releases(led) == []
    # the parties cannot meet within 1 ms: the launcher names it, nothing was computed
    code = main(["evaluate", *map(str, files), "--ledger", str(led), "--timeout", "0.001"])
    assert code == 1 and "MPC run failed" in capsys.readouterr().err
    assert _releases(led) == []
    assert main(["evaluate", *map(str, files), "--ledger", str(led)]) == 0  # a run that starts is charged
    assert [r["state"] for r in _releases(led)] == ["released", "released"]


def test_the_joined_mark_tells_a_started_run_from_one_that_never_started():
    from secure_auc.mpc.launch import _all_joined, _mark_joined, _mark_ready

    beats = [0.0] * 8  # 3 ranks and a host: beats, then readiness
    for r in range(3):
        _mark_ready(beats, r)
    assert not _all_joined(beats, range(3))
    for r in range(3):
        _mark_joined(beats, r)
        assert _all_joined(beats, range(3)) == (r == 2)


def test_two_clients_alike_in_counts_with_one_seed_run_and_are_charged_as_one_dataset(tmp_path, capsys):
    """Without identifiers a dataset is its (n, positives): two clients alike in both are one group,
    charged twice by one run; the seed is refused only across runs (in a run each client has its own key)."""
    rng = np.random.default_rng(3)
    paths = []
    for k in range(2):
        labels = np.repeat([1, 0], [40, 160])
        p = tmp_path / f"same{k}.csv"
        p.write_text("score,label\n" + "".join(f"{float(s)!r},{y}\n" for s, y in zip(rng.random(200), labels)))
        paths.append(p)
    led = tmp_path / "l.db"
    assert _run(*paths, "--ledger", led, "--budget", 2.5, "--seed", 1) == 0
    assert [r["state"] for r in _releases(led)] == ["released", "released"]
    capsys.readouterr()
    assert _run(*paths, "--ledger", led, "--seed", 1) == 2  # the same seed in another run: the same noise
    assert "this seed was already used" in capsys.readouterr().err
    led2 = tmp_path / "l2.db"
    assert _run(*paths, "--ledger", led2, "--budget", 1.5, "--seed", 1) == 2
    err = capsys.readouterr().err
    assert "privacy budget would be exceeded for client 1's dataset" in err and "datasets alike in both count as one" in err
    assert _releases(led2) == []


def test_a_torchrun_client_whose_rendezvous_fails_is_not_charged(tmp_path, files):
    """A torchrun client reserves its budget before the rendezvous; when the server never opens it,
    nothing was computed: the reservation is withdrawn, and the client names the server."""
    import subprocess

    from secure_auc.mpc.launch import free_port

    port = free_port()  # nobody serves the rendezvous there
    env = dict(os.environ, RANK="1", WORLD_SIZE="4", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    led = tmp_path / "client{client}.db"
    res = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "parties" / "mpc_party.py"),
                          *map(str, files), "--ledger", str(led), "--budget", "3", "--timeout", "2"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode != 0 and "server (rank 0)" in res.stderr, res.stderr[-2000:]
    assert _releases(tmp_path / "client0.db") == []
