"""A mechanism family declared here, in the test, and nowhere in the library: the command line,
a deployment file's [mechanism] table and the privacy ledger take it from its declaration alone
(secure_auc.dp.family, secure_auc.dp.registry.register)."""

import json
from dataclasses import dataclass

import numpy as np
import pytest

from secure_auc import evaluate, load_clients
from secure_auc.cli import main
from secure_auc.deploy import load_config
from secure_auc.dp.accountant import Ledger
from secure_auc.dp.events import composed_event, pure_event
from secure_auc.dp.family import EPSILON, Family, Option
from secure_auc.dp.mechanisms import StatisticsMechanism
from secure_auc.dp.registry import family, register, unregister
from secure_auc.validation import InputError

NAME = "toy-laplace"


@dataclass(frozen=True)
class ToyLaplace(StatisticsMechanism):
    """The orthogonal allocation's discrete Laplace noise (integer-exact), its share named ``toy_share``."""

    @property
    def name(self) -> str:
        return NAME

    def describe(self) -> dict:
        return super().describe() | {"mechanism": NAME}


TOY = Family(NAME, "toy: Laplace noise, orthogonal allocation",
             (EPSILON, Option("toy_share", "share of eps on localP", default=0.5, range="(0, 1)")),
             make=lambda epsilon, delta, clients, toy_share: ToyLaplace(epsilon, delta=delta, allocation="orthogonal",
                                                                       beta=toy_share))


@pytest.fixture
def toy():
    register(TOY)
    try:
        yield TOY
    finally:
        unregister(NAME)


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(7)
    paths = []
    for k in range(3):
        y = (rng.random(200) < 0.3).astype(int)
        s = np.round(rng.random(200) + 0.4 * y, 3)  # ties included
        p = tmp_path / f"client{k}.csv"
        p.write_text("score,label\n" + "".join(f"{a},{b}\n" for a, b in zip(s, y)))
        paths.append(str(p))
    return paths


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_line_runs_and_charges_a_family_declared_in_a_test(toy, files, tmp_path, capsys):
    ledger = tmp_path / "ledger.db"
    base = ["evaluate", "--protocol", "plain", *files, "--json", "--ledger", str(ledger), "--budget", "3"]
    code, out, err = _run(capsys, [*base, "--mechanism", NAME, "--epsilon", "1.5", "--toy-share", "0.25", "--seed", "11"])
    assert code == 0, err
    got = json.loads(out)
    assert got["mechanism"] == NAME
    # the mechanism the declaration builds from the options, as the Python API runs it (bit for bit: the noise
    # streams are keyed by the mechanism's parameters), and the option is used
    ref = evaluate(load_clients(files), ToyLaplace(1.5, allocation="orthogonal", beta=0.25), protocol="plain", seed=11)
    assert (got["auc"], got["estimated_positives"]) == (ref.auc, ref.estimated_positives)
    other = evaluate(load_clients(files), ToyLaplace(1.5, allocation="orthogonal", beta=0.75), protocol="plain", seed=11)
    assert other.auc != ref.auc

    # the ledger charged it under its name, with the event its mechanism declares
    releases = Ledger(ledger).releases()
    assert [(r["mechanism"], r["state"], r["epsilon"]) for r in releases] == [(NAME, "released", 1.5)] * 3
    assert releases[0]["event"] == composed_event([pure_event(0.25 * 1.5), pure_event(0.75 * 1.5)])
    # its noise is seeded (the declaration's default): the seed is refused for the next noise release
    code, _, err = _run(capsys, [*base, "--mechanism", "laplace", "--epsilon", "0.5", "--seed", "11"])
    assert code == 2 and f"this seed was already used for {NAME} noise" in err
    code, _, err = _run(capsys, [*base, "--mechanism", NAME, "--epsilon", "2", "--seed", "12"])
    assert code == 2 and "would be exceeded" in err, err  # 1.5 + 2 > 3 for every record

    # its options: in the help, refused where they do not apply, range checked by the mechanism
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    assert "toy_share" not in (help_text := capsys.readouterr().out) and "--toy-share" in help_text
    assert f"{NAME} only: share of eps on localP" in " ".join(help_text.split())
    code, _, err = _run(capsys, ["evaluate", "--protocol", "plain", *files, "--toy-share", "0.3"])
    assert code == 2 and err.strip() == f"secure-auc: error: --toy-share does not apply to --mechanism laplace, only to {NAME}"
    code, _, err = _run(capsys, ["evaluate", "--protocol", "plain", *files, "--mechanism", NAME, "--alpha", "0.3"])
    assert code == 2 and f"--alpha does not apply to --mechanism {NAME}" in err
    code, _, err = _run(capsys, ["evaluate", "--protocol", "plain", *files, "--mechanism", NAME, "--toy-share", "1.5"])
    assert code == 2 and "beta must be in (0, 1)" in err


TOML = """
[deployment]
computing_parties = 2
[mechanism]
name = "{name}"
epsilon = 1.0
{extra}
[server]
rendezvous = "10.0.0.1:29500"
clients = "10.0.0.1:29600"
session = "127.0.0.1:29700"
[[helpers]]
clients = "10.0.0.2:29600"
[[clients]]
[[clients]]
"""


def test_a_deployment_file_takes_a_family_declared_in_a_test(toy, tmp_path):
    path = tmp_path / "deploy.toml"
    path.write_text(TOML.format(name=NAME, extra="toy_share = 0.2"))
    config = load_config(path)
    assert config.mechanism() == ToyLaplace(1.0, allocation="orthogonal", beta=0.2)
    assert config.agreed()["mechanism.toy_share"] == 0.2 and config.agreed()["mechanism.name"] == NAME
    path.write_text(TOML.format(name=NAME, extra=""))
    assert load_config(path).mechanism().beta == 0.5  # the declared default
    for extra, message in [('toy_share = "x"', "mechanism.toy_share must be a number, got 'x'"),
                           ("toy_share = 2", "[mechanism]: beta must be in (0, 1), got 2.0"),
                           ("alpha = 0.3", f"mechanism.alpha does not apply to the mechanism '{NAME}', only to laplace, "
                                           "gaussian"),
                           ("bogus = 1", "unknown option mechanism.bogus (known: name, epsilon, toy_share)")]:
        path.write_text(TOML.format(name=NAME, extra=extra))
        with pytest.raises(InputError) as exc:
            load_config(path)
        assert str(exc.value) == f"{path}: {message}"
    path.write_text(TOML.format(name="laplace", extra="toy_share = 0.2"))
    with pytest.raises(InputError) as exc:
        load_config(path)
    assert str(exc.value) == f"{path}: mechanism.toy_share does not apply to the mechanism 'laplace', only to {NAME}"


def test_the_family_is_gone_once_unregistered(tmp_path):
    with pytest.raises(InputError, match="mechanism must be one of none, rr, laplace, gaussian, distributed, got"):
        family(NAME)
    path = tmp_path / "deploy.toml"
    path.write_text(TOML.format(name=NAME, extra=""))
    with pytest.raises(InputError, match=f"mechanism.name must be one of none, rr, laplace, gaussian, distributed, got '{NAME}'"):
        load_config(path)


@pytest.mark.parametrize("name", ["secure_auc.dp.family", "secure_auc.dp.families.none", "secure_auc.dp.families.rr",
                                  "secure_auc.dp.families.laplace", "secure_auc.dp.families.gaussian",
                                  "secure_auc.dp.noise"])
def test_the_family_modules_examples_run(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
