"""Faults as a user meets them on the command line and in a session: Ctrl-C while a command
starts, every option of every command with its help and its default, the deployment file's
mechanism options and paths checked as the command line checks them, and a session that
reaches another process at the server's address."""

import argparse
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from secure_auc.cli import build_parser
from secure_auc.cli import main as cli
from secure_auc.deploy import load_config
from secure_auc.interrupts import is_command_line
from secure_auc.mpc import MPCError
from secure_auc.validation import InputError
from tests.test_cli_help import CONFIG

ROOT = Path(__file__).resolve().parents[1]

# stands in for NumPy, the package's first heavy import: Ctrl-C arrives while the command imports
_CTRL_C_IN_IMPORTS = "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nfor _ in range(10 ** 7):\n    pass\n"


def _started_with_ctrl_c_in_imports(tmp_path, argv, env=None):
    (tmp_path / "numpy.py").write_text(_CTRL_C_IN_IMPORTS)
    environment = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", **(env or {}))

    def as_a_terminal_leaves_it():  # a suite run as a background job ignores SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    return subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=60,
                          preexec_fn=as_a_terminal_leaves_it)


@pytest.mark.parametrize("entry", ["python -m secure_auc", "secure-auc", "parties/mpc_party.py", "torchrun rank 1"])
def test_ctrl_c_while_a_command_imports_ends_it_in_one_line_with_status_130(tmp_path, entry):
    script = Path(sys.executable).parent / "secure-auc"
    if entry == "secure-auc" and not script.exists():
        pytest.skip("the console script is not installed next to this interpreter")
    argv = {"python -m secure_auc": [sys.executable, "-m", "secure_auc", "evaluate"],
            "secure-auc": [sys.executable, str(script), "evaluate"],
            "parties/mpc_party.py": [sys.executable, str(ROOT / "parties" / "mpc_party.py"), "c0.csv"],
            "torchrun rank 1": [sys.executable, "-u", "-m", "secure_auc.cli.compute", "--epochs", "1"]}[entry]
    env = {"RANK": "1"} if entry.startswith("torchrun") else None
    done = _started_with_ctrl_c_in_imports(tmp_path, argv, env)
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr == ("" if env else "secure-auc: interrupted\n")  # under torchrun: rank 0 says it once
    assert done.stdout == ""


def test_a_program_that_imports_the_library_gets_its_interrupt_as_usual(tmp_path):
    """Nothing is installed in a program's process: its Ctrl-C during ``import secure_auc`` is its own."""
    done = _started_with_ctrl_c_in_imports(tmp_path, [sys.executable, "-c", "import secure_auc"])
    assert done.returncode == -signal.SIGINT, done.stderr[-2000:]
    assert done.stderr.rstrip().endswith("KeyboardInterrupt")
    assert not is_command_line()  # pytest: SIGINT keeps Python's own handling
    assert signal.getsignal(signal.SIGINT) is not None


def test_ctrl_c_before_the_command_runs_is_one_line(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("secure_auc.cli.build_parser", interrupted)
    assert cli(["evaluate", "--protocol", "plain"]) == 130
    assert capsys.readouterr().err == "secure-auc: interrupted\n"


def _parsers():
    """Every command's parser: secure-auc's subcommands and the torchrun entries'."""
    from secure_auc.cli.compute import build_parser as compute_parser
    from secure_auc.cli.party import build_parser as party_parser

    out, todo = {}, [("secure-auc", build_parser())]
    while todo:
        name, parser = todo.pop()
        out[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", p) for sub, p in action.choices.items()]
    out["python -m secure_auc.cli.compute"] = compute_parser()
    out["parties/mpc_party.py"] = party_parser()
    return out


def test_every_option_of_every_command_has_a_help_and_states_its_default():
    parsers = _parsers()
    assert len(parsers) >= 15  # secure-auc, its 10 commands, ledger's 3, the two torchrun entries
    bare, unstated = [], []
    for name, parser in parsers.items():
        for a in parser._actions:
            if isinstance(a, (argparse._SubParsersAction, argparse._HelpAction, argparse._VersionAction)):
                continue
            if a.help is None or not a.help.strip():
                bare.append(f"{name}: {a.option_strings or a.dest}")
            elif (a.help != argparse.SUPPRESS and a.option_strings and not a.required
                  and a.default not in (None, False, []) and "default" not in a.help.lower()):
                unstated.append(f"{name}: {a.option_strings[-1]} (default {a.default!r})")
    assert bare == [] and unstated == []


@pytest.mark.parametrize("command, text", [
    (("evaluate",), "--evaluations T planning: --epsilon/--delta are the total for T evaluations; each evaluation "
                    "gets the largest budget whose T-fold composition (tightest of basic, RDP and PLD accounting) fits "
                    "(default: no planning, --epsilon/--delta are this evaluation's own)"),
    (("ledger", "plan"), "PLD accounting) fits (required)"),
    (("compare",), "local multi-process launcher (default)"),
    (("roster",), "--server KEY the server (the platform's computing party)"),
    (("evaluate",), "--dataset DATASET a name for the clients' datasets in the ledger's report (default: none, each "
                    "named by its client)"),
])
def test_the_helps_that_lacked_a_text_or_a_default(capsys, command, text):
    with pytest.raises(SystemExit):
        cli([*command, "--help"])
    assert text in " ".join(capsys.readouterr().out.split())


def _config(tmp_path, old, new):
    assert old in CONFIG
    path = tmp_path / "deploy.toml"
    path.write_text(CONFIG.replace(old, new))
    return path


@pytest.mark.parametrize("option, message", [
    ("alpha = 0.3", "mechanism.alpha does not apply to allocation = 'adaptive', only to allocation = 'split'"),
    ("beta = 0.3", "mechanism.beta does not apply to allocation = 'adaptive', only to allocation = 'orthogonal'"),
    ('sensitivity = "global"', "mechanism.sensitivity does not apply to allocation = 'adaptive', only to "
                               "allocation = 'split'"),
])
def test_a_mechanism_option_that_does_not_apply_is_refused_as_on_the_command_line(tmp_path, capsys, option, message):
    path = _config(tmp_path, 'name = "laplace"\n', f'name = "laplace"\n{option}\n')
    with pytest.raises(InputError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: {message}"
    flag = "--" + option.split(" =")[0]
    assert cli(["evaluate", "--protocol", "plain", "--samples", "100", "--clients", "2", flag,
                option.split("= ")[1].strip('"')]) == 2  # the command line refuses the same
    assert f"{flag} does not apply to --allocation adaptive" in capsys.readouterr().err
    split = 'allocation = "split"\n' if "beta" not in option else 'allocation = "orthogonal"\n'
    assert load_config(_config(tmp_path, 'name = "laplace"\n', f'name = "laplace"\n{split}{option}\n')).mechanism()


@pytest.mark.parametrize("old, new, where, value", [
    ('labels = "labels.csv"', "labels = 5", "clients[0].labels", 5),
    ('labels = "labels.csv"', 'labels = ""', "clients[0].labels", ""),
    ('scores = "scores/epoch{epoch}.npy"', "scores = 7", "clients[0].scores", 7),
    ('roster = "roster.json"', "roster = 3", "deployment.roster", 3),
])
def test_a_path_that_is_not_text_is_named_not_a_traceback(tmp_path, old, new, where, value):
    path = _config(tmp_path, old, new)
    with pytest.raises(InputError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: {where} must be text (in quotes), got {value!r}"


def test_a_session_that_reaches_another_process_at_the_servers_address_raises_an_mpc_error(tmp_path, capsys):
    """Another rostered party's service listens where the server's should: the session's
    handshake finds another key, and the session names it in an MPCError."""
    from secure_auc.deploy.session import DeployedSession
    from secure_auc.mpc.comm.inlinks import accept_hosts, listen, public_key
    from secure_auc.mpc.comm.roster import read_identity

    keys = {role: tmp_path / f"{role}.pem" for role in ("server", "helper-1", "client-0")}
    for path in keys.values():
        assert cli(["keygen", str(path)]) == 0
    assert cli(["roster", str(tmp_path / "roster.json"), "--server", str(keys["server"]), "--helpers",
                str(keys["helper-1"]), "--clients", str(keys["client-0"]), "--quiet"]) == 0
    capsys.readouterr()
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    (tmp_path / "deploy.toml").write_text(f"""[deployment]
computing_parties = 2
provider = "tfp"
join_timeout = 5
[mechanism]
name = "laplace"
epsilon = 1.0
[server]
rendezvous = "127.0.0.1:{port + 1}"
clients = "127.0.0.1:{port + 2}"
session = "127.0.0.1:{port}"
[[helpers]]
clients = "127.0.0.1:{port + 3}"
[[clients]]
""")  # the session reaches the session address only

    def accept():  # helper 1's key at the server's session address
        try:
            accept_hosts(sock, 1, read_identity(keys["helper-1"]), [public_key(read_identity(keys["server"]))],
                         timeout=5, describe_me="helper 1", describe_host=lambda h: "the session")
        except Exception:  # noqa: BLE001 - the session's side is what is checked
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        with pytest.raises(MPCError, match=rf"^the server service at 127\.0\.0\.1:{port}: the process at "
                                           rf"127\.0\.0\.1:{port} is not the server service \(its identity key is "
                                           r"not that party's\)"):
            DeployedSession(tmp_path / "deploy.toml", key=keys["server"])
    finally:
        sock.close()  # the impostor's accept ends at its own timeout, in its daemon thread


@pytest.mark.parametrize("labels_used, charged", [(False, 0.0), (True, 1.0)])
def test_a_torchrun_client_stopped_before_it_used_its_labels_charges_nothing(tmp_path, labels_used, charged):
    """parties/mpc_party.py: a client's labels enter only its statistics, after the rank step; a stop
    (Ctrl-C, SIGTERM, SIGHUP) before then withdraws its reservation, a stop after it charges the run."""
    import numpy as np

    from secure_auc.cli.output import Stopped
    from secure_auc.cli.party import _marking_stops
    from secure_auc.data.io import ClientData
    from secure_auc.dp.accountant import Ledger, finishing
    from secure_auc.dp.registry import make_mechanism

    ledger = Ledger(tmp_path / "client.db")
    reservation = ledger.reserve([ClientData(np.zeros(4), np.array([0, 1, 1, 0]))], make_mechanism("laplace", 1.0))
    used: list = []
    with pytest.raises(Stopped):
        with finishing(ledger, reservation), _marking_stops(used):
            if labels_used:
                used.append(True)  # run_party's on_labels, before the client's statistics
            raise Stopped(signal.SIGTERM)
    assert ledger.spent().epsilon == charged


def test_the_examples_of_the_start_up_interrupt_run():
    import doctest

    import secure_auc.interrupts

    result = doctest.testmod(secure_auc.interrupts)
    assert result.attempted >= 7 and result.failed == 0
