"""Every command's help and errors complete: ``ledger show --json`` and help for the ledger's
arguments, no option named in a help that the command lacks, ``serve``'s output options and
timeout defaults, ``ledger plan``'s progress on a terminal only, and the configuration file's
errors naming the file and what is valid (no process is started here)."""

import argparse
import json

import numpy as np
import pytest

from secure_auc.cli import build_parser
from secure_auc.cli import main as cli
from secure_auc.data.io import ClientData
from secure_auc.deploy import config as deploy_config
from secure_auc.deploy import load_config
from secure_auc.dp.accountant import Ledger
from secure_auc.dp.registry import FAMILIES, METHODS, make_mechanism
from secure_auc.validation import InputError
from tests.test_deploy_config import CONFIG as DEPLOY_CONFIG

CONFIG = (DEPLOY_CONFIG.replace("timeout = 30\n", "")  # tests/test_deploy_config.py's, without timeout or ledger
          .replace('ledger = "privacy.json"\nbudget = 4\n', ""))


def _write(tmp_path, text=CONFIG):
    path = tmp_path / "deploy.toml"
    path.write_text(text)
    return path


def _subparser(*names):
    parser = build_parser()
    for name in names:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_ledger_show_json_is_what_the_ledger_holds(tmp_path, capsys):
    path = tmp_path / "ledger.db"
    ledger = Ledger(path)
    ledger.set_budget(5.0)
    day1 = ClientData(np.zeros(4), np.array([0, 1, 1, 0]), ids=["a", "b", "c", "d"])
    day2 = ClientData(np.zeros(3), np.array([1, 0, 1]), ids=["c", "d", "e"])
    for data, eps in ((day1, 1.0), (day2, 0.5)):
        ledger.finish(ledger.reserve([data], make_mechanism("laplace", eps)))
    assert cli(["ledger", "show", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == str(path) and out["budget"] == {"epsilon": 5.0, "delta": 0.0}
    assert out["evaluations"] == 2 and out["client_releases"] == 2
    # basic composition of pure Laplace releases: c, d spent 1.5; a, b 1.0; e 0.5
    assert [(h["count"], h["epsilon"], h["releases"]) for h in out["histories"]] == [(2, 1.5, 2), (2, 1.0, 1),
                                                                                     (1, 0.5, 1)]
    assert [h["left_epsilon"] for h in out["histories"]] == [3.5, 4.0, 4.5]
    assert out["histories"][0]["epsilon"] == ledger.spent().epsilon
    assert [(r["epsilon"], r["state"], r["mechanism"]) for r in out["releases"]] == [
        (1.0, "released", "laplace"), (0.5, "released", "laplace")]
    assert not any("rr_key" in r or "seed_tag" in r for r in out["releases"])
    assert cli(["ledger", "show", str(path)]) == 0  # the table is unchanged by the refactoring into histories()
    text = capsys.readouterr().out
    assert "2 record(s): eps = 1.5" in text and "1 record(s): eps = 0.5" in text and "left eps = 3.5" in text


def test_ledger_show_json_of_an_empty_ledger_and_a_missing_one(tmp_path, capsys):
    path = tmp_path / "new.db"
    Ledger(path).set_budget(2.0, 1e-6)
    assert cli(["ledger", "show", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["budget"] == {"epsilon": 2.0, "delta": 1e-6} and out["histories"] == [] and out["releases"] == []
    assert cli(["ledger", "show", str(tmp_path / "none.db"), "--json"]) == 2
    assert capsys.readouterr().err.strip() == f"secure-auc: error: {tmp_path / 'none.db'}: no such privacy ledger"


@pytest.mark.parametrize("command", [("ledger", "show"), ("ledger", "budget"), ("ledger", "plan"), ("serve",),
                                     ("client",), ("evaluate",)])
def test_every_argument_has_a_help(command):
    parser = _subparser(*command)
    assert parser.description, command
    bare = [a.dest for a in parser._actions if not a.help]
    assert bare == [], f"{' '.join(command)}: no help for {bare}"


def test_a_help_names_only_options_the_command_has(capsys):
    assert "--evaluations" not in _help(capsys, "client")
    assert "--evaluations" not in _help(capsys, "compare")
    for command in (["evaluate"], ["ledger", "plan"]):
        text = " ".join(_help(capsys, *command).split())
        assert "with --evaluations T, the total of the T" in text and "--evaluations T" in text


def test_serve_has_the_output_options_and_states_its_timeouts(capsys):
    text = " ".join(_help(capsys, "serve").split())
    for option in ("--quiet", "--verbose", "--version"):
        assert option in text
    defaults = deploy_config.DEPLOYMENT_DEFAULTS
    for name in ("join_timeout", "timeout", "score_timeout"):
        assert f"{name} (default {defaults[name]:g} s)" in text
    with pytest.raises(SystemExit) as exit_:
        cli(["serve", "--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("secure-auc ")
    with pytest.raises(SystemExit) as exit_:
        cli(["serve", "--config", "x.toml", "--role", "server", "--key", "k.pem", "--quiet", "--verbose"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("argv, named", [(["client", "--help-x"], "--help-x"), (["serve", "--rolee", "x"], "--rolee"),
                                          (["client", "--clients", "2", "--bogus=1"], "--bogus=1")])
def test_a_mistyped_option_is_named_before_the_missing_arguments(capsys, argv, named):
    with pytest.raises(SystemExit) as exit_:
        cli(argv)
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err == (f"secure-auc {argv[0]}: error: unrecognized arguments: {named} "
                                             f"(see secure-auc {argv[0]} --help)"), err
    with pytest.raises(SystemExit):  # an abbreviation and a short option are known: the missing ones are named
        cli(["serve", "--rol", "server", "-q"])
    assert "the following arguments are required: --config" in capsys.readouterr().err


def test_ledger_plan_shows_no_progress_off_a_terminal(capsys):
    assert cli(["ledger", "plan", "--evaluations", "10", "--epsilon", "5"]) == 0  # stderr is captured: no terminal
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.startswith("10 evaluations within eps = 5")


@pytest.mark.parametrize("edit, message", [
    (('clients = "10.0.0.1:29600"', 'clients = "10.0.0.1;29600"'),
     r"deploy.toml: server.clients: expected \"HOST:PORT\", got '10.0.0.1;29600'"),
    (('[[helpers]]\nclients = "10.0.0.3:29600"', '[[helpers]]\nclients = "10.0.0.3;29600"'),
     r"deploy.toml: helpers\[1\].clients: expected"),
    (('rendezvous = "10.0.0.1:29500"', 'rendezvous = "10.0.0.1:295x0"'), r"deploy.toml: server.rendezvous: expected"),
    (("[[helpers]]\nclients = \"10.0.0.3:29600\"\n", "[[helper]]\nclients = \"10.0.0.3:29600\"\n"),
     r"deploy.toml: unknown table \[\[helper\]\] \(known: \[deployment\], \[mechanism\], \[server\], \[\[helpers\]\], "
     r"\[\[clients\]\], \[report\]\)"),
    (("[server]", "[servers]"), r"deploy.toml: unknown table \[servers\]"),
])
def test_a_configuration_error_names_the_file_and_what_is_valid(tmp_path, edit, message):
    old, new = edit
    assert old in CONFIG
    with pytest.raises(InputError, match=message):
        load_config(_write(tmp_path, CONFIG.replace(old, new)))


@pytest.mark.parametrize("name", ["laplce", "adaptive", "global"])
def test_a_misspelt_mechanism_lists_the_families_only(tmp_path, name):
    with pytest.raises(InputError) as err:
        load_config(_write(tmp_path, CONFIG.replace('name = "laplace"', f'name = "{name}"')))
    text = str(err.value)
    assert text == f"{tmp_path / 'deploy.toml'}: mechanism.name must be one of {', '.join(FAMILIES)}, got '{name}'"
    assert not any(m in text.split("got")[0] for m in METHODS if m not in FAMILIES)


def test_the_configuration_docstring_shows_the_sqlite_ledger():
    doc = deploy_config.__doc__
    ledger_line = next(line for line in doc.splitlines() if line.strip().startswith("ledger ="))
    assert '"privacy.db"' in ledger_line and "SQLite" in ledger_line
    assert ".json\"  " not in ledger_line
