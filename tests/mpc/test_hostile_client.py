"""What a client's service tells a server that is not to be trusted: a real client service on
authenticated links against stand-in computing parties (threads, no CrypTen world), the stand-in
server recording every message it received.

The server sends ``open`` with epochs that are paths, texts, floats, lists and bools, and epochs
whose score files hold a secret, a wrong count of scores or infinities; every answer must be a
reason of the fixed list plus counts, never a path, a file's content, a score or an exception's
text, and the secret file outside the configured names is never read.  The client's own log holds
the detail, every remote string escaped (no forged lines).  Then: a scoring hook others can write
is refused; the files ``make-data`` writes are private.
"""

import importlib.util
import json
import logging
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from secure_auc.deploy.config import load_config
from secure_auc.deploy.inputs import load_hook
from secure_auc.deploy.service import run_client_service
from secure_auc.mpc.roles.control import CH_CONTROL, CH_JOIN, REASONS
from secure_auc.mpc.comm import inlinks
from secure_auc.mpc.comm.roster import read_identity
from secure_auc.mpc.launch import free_port
from secure_auc.validation import InputError

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_deploy", ROOT / "scripts" / "bench_deploy.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

SECRET = "AKIA-TOPSECRET-TOKEN"
SCORE = 1.4021351337432861
N = 12


def _deployment(tmp_path):
    folder = tmp_path / "client-host"
    ports = (free_port(), free_port(), free_port())
    while len({ports[1], ports[1] + 1, ports[1] + 2} - {ports[0], ports[2]}) < 3:
        ports = (free_port(), free_port(), free_port())
    bench.write_deployment(folder, [N], epochs=1, ports=ports, timeout=10.0)
    text = (folder / "deploy.toml").read_text().replace('scores = "scoring:score"',
                                                        'scores = "epoch{epoch}/scores.csv"')
    (folder / "deploy.toml").write_text(text)
    (folder / "epoch0").mkdir()  # epoch 0: a malformed file holding a secret where a score should be
    (folder / "epoch0" / "scores.csv").write_text("score\n" + f"{SECRET}\n" + "0.5\n" * (N - 1))
    (folder / "epoch1").mkdir()  # epoch 1: one score short, each a real score of the client's
    (folder / "epoch1" / "scores.csv").write_text("score\n" + f"{SCORE!r}\n" * (N - 1))
    (folder / "epoch2").mkdir()  # epoch 2: infinities (the reader refuses them)
    (folder / "epoch2" / "scores.csv").write_text("score\n" + "inf\n" * 2 + "0.25\n" * (N - 2))
    secret = tmp_path / "secret"  # outside what the configuration names
    secret.mkdir()
    (secret / "scores.csv").write_text(f"score\n{SECRET}\n")
    return folder


EPOCHS = ["0/../../secret", "../secret", "1.0", 1.0, [1], True, -1, "1\nforged line", None, 0, 1, 2]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_a_client_sends_the_server_reason_codes_and_counts_only(tmp_path):
    folder = _deployment(tmp_path)
    config = load_config(folder / "deploy.toml")
    roster = config.roster()
    received = {p: [] for p in range(3)}  # everything each stand-in computing party received
    errors = []
    over = threading.Event()

    def party(p, ready):
        try:
            listener = inlinks.listen(*config.client_addresses[p])
            ready.set()
            role = ["server", "helper-1", "helper-2"][p]
            links = inlinks.accept_hosts(listener, p, read_identity(folder / "keys" / f"{role}.pem"),
                                         [roster.clients[0]], timeout=30, describe_me=role,
                                         describe_host=lambda h: f"client {h}")
            listener.close()
            link = links[0]
            received[p].append(link.recv_obj(CH_JOIN))
            if p == 0:
                link.send_obj(CH_CONTROL, {"op": "joined"})
                for n, epoch in enumerate(EPOCHS, 1):
                    link.send_obj(CH_CONTROL, {"op": "open", "evaluation": n, "epoch": epoch})
                    received[0].append(link.recv_obj(CH_CONTROL))
                    link.send_obj(CH_CONTROL, {"op": "cancel", "reason": "cancelled\nFORGED: a line of its own"})
                link.send_obj(CH_CONTROL, {"op": "end", "reason": "over\nFORGED: another", "shutdown": True})
                over.set()
            over.wait(60)
            inlinks.part([link], wait=5.0)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"party {p}: {exc!r}")
            ready.set()
            over.set()

    threads = []
    for p in range(3):
        ready = threading.Event()
        threads.append(threading.Thread(target=party, args=(p, ready), daemon=True))
        threads[-1].start()
        ready.wait(10)
    caplog, logger = _Records(), logging.getLogger("secure_auc")
    logger.addHandler(caplog)
    level, logger.level = logger.level, logging.INFO
    try:
        assert run_client_service(config, 0, read_identity(folder / "keys" / "client-0.pem")) == 0
    finally:
        logger.removeHandler(caplog)
        logger.setLevel(level)
    for t in threads:
        t.join(20)
    assert not errors, errors

    answers = received[0][1:]
    assert len(answers) == len(EPOCHS)
    # each answer: a code of the fixed list and its integer counts, nothing else
    codes = [a["refused"] for a in answers]
    assert codes == ["epoch"] * 9 + ["scores-unavailable", "scores-shape", "scores-unavailable"]
    assert answers[-2]["numbers"] == {"got": N - 1, "expected": N}
    for a in answers:
        assert set(a) == {"refused", "numbers"} and a["refused"] in REASONS
        assert all(type(v) is int for v in a["numbers"].values())
    wire = json.dumps(received)
    for leak in (SECRET, str(SCORE), "1.40213", "/", "scores.csv", "Error", "inf", str(tmp_path), "forged"):
        assert leak not in wire, leak

    # the client's own log holds the detail, and no remote string starts a line of its own
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "epoch0/scores.csv" in text and SECRET in text  # the local operator sees why
    assert "shape (11,) for 12 labels" in text
    assert "1\\nforged line" in text and "over\\nFORGED" in text
    assert not any(line.startswith(("forged", "FORGED")) for r in caplog.records for line in r.getMessage().split("\n"))


def test_scores_that_are_not_finite_are_refused_with_their_count():
    from secure_auc.mpc.roles.host import checked_scores as _scores

    with pytest.raises(InputError) as err:
        _scores([np.inf, SCORE, np.nan, 0.5], 4)
    assert err.value.message == {"refused": "scores-not-finite", "numbers": {"count": 2}}


def test_the_file_spec_takes_the_checked_integer_only(tmp_path):
    folder = _deployment(tmp_path)
    hook = load_hook("epoch{epoch}/scores.csv", folder)
    for epoch in ("0/../../secret", "0", 0.0, [0], True):
        with pytest.raises(InputError, match="non-negative integer"):
            hook(epoch, client=0, evaluation=1)
    assert len(hook(np.int64(1), client=0, evaluation=1)) == N - 1


@pytest.mark.parametrize("loose", ["folder", "module"])
def test_a_scoring_hook_others_can_write_is_refused(tmp_path, loose):
    folder = tmp_path / "hooks"
    folder.mkdir(mode=0o755)
    name = f"hook_{loose}_{os.getpid()}"
    (folder / f"{name}.py").write_text("def score(epoch, **_):\n    return [0.5]\n")
    os.chmod(folder / f"{name}.py", 0o644)
    assert load_hook(f"{name}:score", folder)(0) == [0.5]  # private: loaded
    os.chmod(folder if loose == "folder" else folder / f"{name}.py", 0o777 if loose == "folder" else 0o666)
    with pytest.raises(InputError, match=r"is writable by other users \(mode 0\d{3}") as err:
        load_hook(f"{name}:score", folder)
    assert "\n" not in str(err.value)


def test_make_data_writes_private_files(tmp_path, capsys):
    from secure_auc.cli import main

    old = os.umask(0o022)
    try:
        files = [tmp_path / "a.csv", tmp_path / "b.csv.gz"]
        (tmp_path / "a.csv").write_text("old\n")
        os.chmod(tmp_path / "a.csv", 0o644)
        assert main(["make-data", *map(str, files), "--samples", "40", "--force", "--quiet"]) == 0
    finally:
        os.umask(old)
    for f in files:
        assert oct(f.stat().st_mode & 0o777) == oct(0o600), f


def test_a_pickled_gadget_is_refused_unread(tmp_path):
    """What another party sends is JSON or nothing: a pickle that would run a command is refused
    by the decoder every broadcast and every dealer request goes through, and never runs."""
    import pickle

    from secure_auc.mpc.comm.backend import ObjectRefused, decode_obj

    marker = tmp_path / "ran"

    class Gadget:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    payload = pickle.dumps(Gadget())
    for terminate in (False, True):
        with pytest.raises(ObjectRefused, match="not a JSON message"):
            decode_obj(payload, "party 0", terminate=terminate)
    with pytest.raises(ObjectRefused):
        decode_obj(pickle.dumps({"function": "sa_ping", "args": []}), terminate=True)
    assert not marker.exists()
    assert decode_obj(pickle.dumps("terminate"), terminate=True) == "terminate"
