"""The deployment's configuration file, the roster command, a client's hook and labels, and the
ledger's withdrawal of a reservation that never ran (no process is started here)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from secure_auc.cli import main as cli
from secure_auc.deploy import load_config
from secure_auc.deploy.config import parse_role
from secure_auc.data.io import read_label_file as read_labels
from secure_auc.deploy.inputs import load_hook
from secure_auc.mpc.roles.host import checked_scores as _scores
from secure_auc.dp.accountant import Ledger, label_commitment
from secure_auc.dp.registry import make_mechanism
from secure_auc.mpc.comm.roster import Roster
from secure_auc.validation import InputError

CONFIG = """[deployment]
computing_parties = 3
timeout = 30
roster = "roster.json"

[mechanism]
name = "laplace"
epsilon = 1

[server]
rendezvous = "10.0.0.1:29500"
clients = "10.0.0.1:29600"
session = "127.0.0.1:29700"

[[helpers]]
clients = "10.0.0.2:29600"

[[helpers]]
clients = "10.0.0.3:29600"

[[clients]]
labels = "labels.csv"
scores = "scores/epoch{epoch}.npy"
ledger = "privacy.json"
budget = 4

[[clients]]
"""


def _write(tmp_path, text=CONFIG):
    path = tmp_path / "deploy.toml"
    path.write_text(text)
    return path


def test_a_configuration_is_read_with_the_command_lines_defaults(tmp_path):
    config = load_config(_write(tmp_path))
    assert config.computing_parties == 3 and config.provider == "ttp" and config.sort == "radix"
    assert config.timeout == 30.0 and config.join_timeout == 300.0
    assert config.client_addresses == (("10.0.0.1", 29600), ("10.0.0.2", 29600), ("10.0.0.3", 29600))
    assert config.session_address == ("127.0.0.1", 29700) and config.rendezvous == ("10.0.0.1", 29500)
    assert config.mechanism().describe() == make_mechanism("laplace", 1.0, allocation="adaptive").describe()
    assert config.clients[0].labels == tmp_path / "labels.csv" and config.clients[0].budget == 4.0
    assert config.clients[1].labels is None
    assert config.agreed()["mechanism.epsilon"] == 1.0 and config.agreed()["clients"] == 2


@pytest.mark.parametrize("edit, message", [
    (("epsilon = 1", "epsilon = 1\nepsilom = 2"), r"unknown option mechanism.epsilom"),
    (("computing_parties = 3", "computing_parties = 4"), r"computing_parties must be 2 or 3, got 4"),
    (("[[helpers]]\nclients = \"10.0.0.3:29600\"\n", ""), r"3 computing parties need 2 \[\[helpers\]\] table\(s\), found 1"),
    (("timeout = 30", "timeout = -1"), r"deployment.timeout must be a number of seconds"),
    (("session = \"127.0.0.1:29700\"", "session = \"127.0.0.1\""), r"server.session: expected \"HOST:PORT\""),
    (("epsilon = 1", "epsilon = 0"), r"\[mechanism\]: "),
    (("ledger = \"privacy.json\"\n", ""), r"clients\[0\].budget needs clients\[0\].ledger"),
    (("[server]", "[server"), r"not valid TOML"),
    (("epsilon = 1", "epsilon = \"one\""), r"deploy.toml: mechanism.epsilon must be a number, got 'one'"),
    (("epsilon = 1", "epsilon = true"), r"mechanism.epsilon must be a number, got True"),
    (("budget = 4", "budget = -1"), r"deploy.toml: clients\[0\].budget must be a number in \(0, inf\), got -1"),
    (("budget = 4", "budget = \"ten\""), r"clients\[0\].budget must be a number in \(0, inf\), got 'ten'"),
    (("budget = 4", "budget = 4\nbudget_delta = 1.0"), r"clients\[0\].budget_delta must be a number in \[0, 1\), got 1.0"),
    (("budget = 4", "budget = inf"), r"clients\[0\].budget must be a number in \(0, inf\), got inf"),
])
def test_a_bad_configuration_is_one_line_naming_the_option(tmp_path, edit, message):
    old, new = edit
    assert old in CONFIG
    with pytest.raises(InputError, match=message):
        load_config(_write(tmp_path, CONFIG.replace(old, new)))


def test_roles():
    assert parse_role("client-1", 3, 2, True) == ("client", 1) == parse_role("client1", 3, 2, True)
    assert parse_role("helper-2", 3, 2, True) == ("helper", 2)
    for bad in ("client-2", "helper-3", "dealerx"):
        with pytest.raises(InputError, match=f"--role '{bad}' is not a role of this deployment"):
            parse_role(bad, 3, 2, True)
    with pytest.raises(InputError, match="--role 'dealer'"):
        parse_role("dealer", 3, 2, False)


def test_the_roster_command_writes_what_every_party_loads(tmp_path, capsys):
    keys = {}
    for role in ("server", "h1", "h2", "dealer", "c0", "c1"):
        assert cli(["keygen", str(tmp_path / f"{role}.pem")]) == 0
        keys[role] = capsys.readouterr().out.strip()
    (tmp_path / "c1.pub").write_text(keys["c1"] + "\n")
    out = tmp_path / "roster.json"
    # a public key as hex, as a file of hex, or the identity key file itself
    assert cli(["roster", str(out), "--server", keys["server"], "--helpers", str(tmp_path / "h1.pem"), keys["h2"],
                "--dealer", keys["dealer"], "--clients", str(tmp_path / "c0.pem"), str(tmp_path / "c1.pub")]) == 0
    roster = Roster.load_helpers(out, helpers=2, clients=2, dealer=True)
    assert roster.server.hex() == keys["server"] and [h.hex() for h in roster.helpers] == [keys["h1"], keys["h2"]]
    assert [c.hex() for c in roster.clients] == [keys["c0"], keys["c1"]] and roster.dealer.hex() == keys["dealer"]
    assert cli(["roster", str(out), "--server", keys["server"], "--clients", keys["c0"]]) == 2
    assert "exists; give --force" in capsys.readouterr().err
    assert cli(["roster", str(out), "--server", "abc", "--clients", keys["c0"], "--force"]) == 2
    assert "--server: 'abc' is neither 64 hex digits nor a key file" in capsys.readouterr().err
    assert json.loads(out.read_text())["server"] == keys["server"]
    assert cli(["roster", str(out), "--server", keys["server"], "--helpers", keys["h1"], keys["c1"],
                "--clients", keys["c0"], keys["c1"], "--force"]) == 2
    assert "clients[1] and helpers[1] have the same key" in capsys.readouterr().err


def test_serve_refuses_a_role_outside_the_deployment_with_exit_code_2(tmp_path):
    config = _write(tmp_path)
    assert cli(["keygen", str(tmp_path / "k.pem")]) == 0
    res = subprocess.run([sys.executable, "-m", "secure_auc", "serve", "--config", str(config), "--role", "client-5",
                          "--key", str(tmp_path / "k.pem")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == ("secure-auc serve (client-5): error: --role 'client-5' is not a role "
                                                   "of this deployment (server, helper-1, helper-2, dealer, "
                                                   "client-0..client-1)")
    # a file that is not a key (here the configuration, readable by others) is named as such, by the role's line
    res = subprocess.run([sys.executable, "-m", "secure_auc", "serve", "--config", str(config), "--role", "server",
                          "--key", str(config)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"secure-auc serve (server): error: {config} is not an Ed25519 private "
                                               "key (make one with secure-auc keygen)"]


def test_a_clients_hook_and_labels(tmp_path):
    (tmp_path / "labels.csv").write_text("id,label\n1,0\n2,1\n3,1\n")
    assert read_labels(tmp_path / "labels.csv").tolist() == [0, 1, 1]
    (tmp_path / "scores").mkdir()
    np.save(tmp_path / "scores" / "epoch7.npy", np.array([0.1, 0.5, 0.2]))
    hook = load_hook("scores/epoch{epoch}.npy", tmp_path)
    assert _scores(hook(7, client=0, evaluation=1), 3)[0].tolist() == [0.1, 0.5, 0.2]
    (tmp_path / "myhook.py").write_text("import numpy as np\n"
                                        "def score(epoch, *, client, evaluation):\n"
                                        "    return np.full((3, 1), float(epoch)), 42\n")
    scores, key = _scores(load_hook("myhook:score", tmp_path)(2, client=0, evaluation=1), 3)
    assert scores.tolist() == [2.0, 2.0, 2.0] and key == 42  # (n, 1) flattened; the noise key passed on
    with pytest.raises(InputError, match=r"returned scores of shape \(2,\) for 3 labels"):
        _scores(np.zeros(2), 3)
    with pytest.raises(InputError, match="returned 1 score\\(s\\) that are not finite"):
        _scores(np.array([0.1, np.nan, 0.3]), 3)
    with pytest.raises(InputError, match="cannot load the scoring hook 'nomodule:f'"):
        load_hook("nomodule:f", tmp_path)


def test_a_clients_scores_and_labels_from_client_files_of_every_form(tmp_path):
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    # a client file per epoch, as make-data writes them (score and label columns): the scores are the score
    # column, the labels the label column, whichever other columns are there
    (tmp_path / "epoch0.csv").write_text("id,score,label\n1,0.25,true\n2,0.75,false\n3,0.5,1\n")
    (tmp_path / "epoch1.csv.gz").write_bytes(gzip.compress(b"score\n0.125\n0.5\n1e-3\n"))
    pq.write_table(pa.table({"label": [0, 1, 1], "score": [0.3, 0.2, 0.1]}), tmp_path / "epoch2.parquet")
    assert _scores(load_hook("epoch{epoch}.csv", tmp_path)(0, client=0, evaluation=1), 3)[0].tolist() == [0.25, 0.75, 0.5]
    assert load_hook("epoch{epoch}.csv.gz", tmp_path)(1).tolist() == [0.125, 0.5, 1e-3]
    assert load_hook("epoch{epoch}.parquet", tmp_path)(2).tolist() == [0.3, 0.2, 0.1]
    assert read_labels(tmp_path / "epoch0.csv").tolist() == [1, 0, 1]  # true/false labels beside the scores
    assert read_labels(tmp_path / "epoch2.parquet").tolist() == [0, 1, 1]
    (tmp_path / "epoch3.csv").write_text("score,label\n0.1,0\nhigh,1\n")
    with pytest.raises(InputError, match=r"epoch3.csv: row 2 \(line 3\), column 'score': 'high' is not a number"):
        load_hook("epoch{epoch}.csv", tmp_path)(3)
    with pytest.raises(InputError, match=r"epoch1.csv.gz: missing column 'label'"):
        read_labels(tmp_path / "epoch1.csv.gz")


def test_a_withdrawn_reservation_is_not_charged(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    ds = label_commitment([0, 1, 1])
    ledger.set_budget(ds, 2.0)
    ledger.finish(ledger.reserve([ds], make_mechanism("laplace", 1.0)))
    ledger.cancel(ledger.reserve([ds], make_mechanism("laplace", 1.0)))
    assert ledger.spent(ds).releases == 1 and ledger.spent(ds).epsilon == 1.0
    ledger.finish(ledger.reserve([ds], make_mechanism("laplace", 1.0)))  # the budget still allows this one
    with pytest.raises(InputError, match="would be exceeded"):
        ledger.reserve([ds], make_mechanism("laplace", 1.0))


def test_one_argument_switches_the_session_to_deployed_services(tmp_path):
    from secure_auc.session import MPCSession

    with pytest.raises(InputError, match="with deploy=, a session takes only key="):
        MPCSession([np.array([0, 1])], make_mechanism("none"), deploy=tmp_path / "deploy.toml")
    with pytest.raises(InputError, match="cannot read the configuration .*deploy.toml"):
        MPCSession(deploy=tmp_path / "deploy.toml", key=tmp_path / "server.pem")
    _write(tmp_path)
    with pytest.raises(InputError, match="roster .*roster.json does not exist"):  # read before any connection
        MPCSession(deploy=tmp_path / "deploy.toml", key=tmp_path / "server.pem")


def test_a_client_that_finds_no_computing_party_says_what_to_check(tmp_path):
    from secure_auc.deploy.service import ServiceError, run_client_service
    from secure_auc.mpc.comm.channel import public_bytes
    from secure_auc.mpc.comm.roster import Roster, generate_identity
    from secure_auc.mpc.launch import free_port

    keys = [generate_identity() for _ in range(6)]
    pub = [public_bytes(k) for k in keys]
    (tmp_path / "roster.json").write_text(Roster(pub[0], (pub[4], pub[5]), pub[3], (pub[1], pub[2])).to_json())
    (tmp_path / "labels.csv").write_text("label\n1\n0\n")
    port = free_port()  # nothing listens there
    text = CONFIG.replace("timeout = 30", "timeout = 30\njoin_timeout = 1").replace(
        "10.0.0.1:29600", f"127.0.0.1:{port}").replace("ledger = \"privacy.json\"\nbudget = 4\n", "")
    with pytest.raises(ServiceError, match=rf"^server is not reachable at 127.0.0.1:{port} \(tried for 1 s\) "
                                           r"\(deployment.join_timeout = 1 s\); a "
                                           r"computing party takes clients only once every computing party and "
                                           r"the dealer have joined"):
        run_client_service(load_config(_write(tmp_path, text)), 0, keys[4])
