"""The number of clients a distributed mechanism is calibrated for is the number taking part, in every
path that runs an evaluation: taken from the run, or refused (naming both numbers) before anything is
charged or any party starts."""

import time

import numpy as np
import pytest

from secure_auc import DistributedNoise, builtin_clients, evaluate, make_mechanism
from secure_auc.validation import InputError

MISMATCH = "calibrated for 100 clients but 3 clients take part"


class Started(Exception):
    """Raised by a stand-in for the function that would start the parties."""


def _never(*args, **kwargs):
    raise Started


def _clients(k=3):
    return builtin_clients(k, samples=60)


def test_mechanism_is_bound_to_the_clients_present():
    assert DistributedNoise(1.0).for_clients(3).clients == 3
    assert DistributedNoise(1.0, clients=3).for_clients(3).clients == 3
    with pytest.raises(InputError, match=MISMATCH):
        DistributedNoise(1.0, clients=100).for_clients(3)
    with pytest.raises(InputError, match="calibrated for 3 clients but 100 clients take part"):
        DistributedNoise(1.0, clients=3).for_clients(100)
    laplace = make_mechanism("laplace", 1.0)
    assert laplace.for_clients(7) is laplace


def test_too_few_clients_would_under_noise():
    # the reason for the check: shares sized for 100 clients, 10 present, give a tenth of the variance on P
    made_for_100 = DistributedNoise(1.0, clients=100)
    present = made_for_100.noise_variance(total=1000, clients=100)[1] / 10
    assert present < 0.11 * DistributedNoise(1.0, clients=10).noise_variance(total=1000)[1]


def test_evaluate_refuses_before_charging(monkeypatch):
    import secure_auc.mpc.launch as launch
    import secure_auc.mpc.session as session

    class Ledger:  # records what would be charged
        charged = []

        def reserve(self, *args, **kwargs):
            self.charged.append(args)
            raise Started

    monkeypatch.setattr(session, "run_mpc_local", _never)
    with pytest.raises(InputError, match=MISMATCH):
        evaluate(_clients(), make_mechanism("distributed", 1.0, clients=100), protocol="mpc", ledger=Ledger())
    assert Ledger.charged == []
    with pytest.raises(Started):  # the run's own number goes on to the ledger
        evaluate(_clients(), make_mechanism("distributed", 1.0, clients=3), protocol="mpc", ledger=Ledger())
    assert len(Ledger.charged) == 1


def test_evaluate_sets_the_number_from_the_run(monkeypatch):
    import secure_auc.mpc.launch as launch
    import secure_auc.mpc.session as session

    seen = []
    monkeypatch.setattr(session, "run_mpc_local", lambda clients, mech, **kw: seen.append(mech) or _never())
    with pytest.raises(Started):
        evaluate(_clients(), DistributedNoise(1.0), protocol="mpc")
    assert seen[0].clients == 3


def test_run_mpc_local_refuses_before_starting(monkeypatch):
    import secure_auc.mpc.launch as launch
    import secure_auc.mpc.session as session

    monkeypatch.setattr(launch, "launch_local", _never)
    with pytest.raises(InputError, match=MISMATCH):
        session.run_mpc_local(_clients(), make_mechanism("distributed", 1.0, clients=100), progress=False)


def test_party_configuration_binds_every_mechanism():
    from secure_auc.mpc.party import PartyConfig

    config = PartyConfig(mechanisms=(make_mechanism("none"), DistributedNoise(1.0)), clients=4)
    assert config.mechanisms[1].clients == 4
    with pytest.raises(InputError, match="calibrated for 100 clients but 4 clients take part"):
        PartyConfig(mechanisms=(DistributedNoise(1.0, clients=100),), clients=4)


def test_session_refuses_before_starting(monkeypatch):
    from secure_auc.session import MPCSession

    monkeypatch.setattr(MPCSession, "_start", _never)
    labels = [c.labels for c in _clients()]
    with pytest.raises(InputError, match=MISMATCH):
        MPCSession(labels, make_mechanism("distributed", 1.0, clients=100))
    with pytest.raises(Started):
        MPCSession(labels, make_mechanism("distributed", 1.0, clients=3))


def test_cli_evaluate_calibrates_for_its_clients(monkeypatch):
    import secure_auc.mpc.launch as launch
    import secure_auc.mpc.session as session
    from secure_auc.cli import main

    seen = []
    monkeypatch.setattr(session, "run_mpc_local", lambda clients, mech, **kw: seen.append((len(clients), mech))
                        or _never())
    with pytest.raises(Started):
        main(["evaluate", "--clients", "3", "--samples", "60", "--mechanism", "distributed", "--epsilon", "1",
              "--protocol", "mpc"])
    assert seen[0][0] == seen[0][1].clients == 3


@pytest.fixture
def torchrun_env(monkeypatch):
    import secure_auc.mpc.comm.runtime as runtime

    def env(rank, world):
        for key, value in {"RANK": rank, "WORLD_SIZE": world, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": 1}.items():
            monkeypatch.setenv(key, str(value))
    monkeypatch.setattr(runtime, "init_party", lambda **kw: None)
    return env


def _capture(monkeypatch, module, name):
    seen = []

    def fake(rank, config, *args, **kwargs):
        seen.append(config)
        raise Started
    monkeypatch.setattr(module, name, fake)
    return seen


@pytest.mark.parametrize("entry", ["cli", "script"])
def test_torchrun_party_calibrates_for_its_files(tmp_path, monkeypatch, torchrun_env, entry):
    import runpy

    import secure_auc.mpc.party as party
    from secure_auc.cli import party as cli_party
    from secure_auc.data.io import write_client_csv

    files = []
    for k, c in enumerate(_clients()):
        files.append(str(tmp_path / f"c{k}.csv"))
        write_client_csv(files[-1], c.scores, c.labels)
    torchrun_env(0, 5)  # server of 3 clients + server + dealer
    seen = _capture(monkeypatch, party, "run_party")
    argv = files + ["--mechanism", "distributed", "--epsilon", "1"]
    with pytest.raises(Started):
        if entry == "cli":
            cli_party._run(cli_party.build_parser().parse_args(argv), time.perf_counter())
        else:  # parties/mpc_party.py runs the same main; its _run is the one patched below
            monkeypatch.setattr(cli_party, "main", lambda: cli_party._run(cli_party.build_parser().parse_args(argv), time.perf_counter()))
            runpy.run_path(str(__import__("pathlib").Path(__file__).parents[1] / "parties" / "mpc_party.py"),
                           run_name="__main__")
    assert seen[0].clients == seen[0].mechanisms[0].clients == 3


class _Key:
    def __init__(self, raw=b"k"):
        self.raw = raw

    def public_key(self):
        return self

    def public_bytes_raw(self):
        return self.raw


class _Roster:
    def __init__(self, clients):
        self.clients = [_Key(bytes([k])).raw for k in range(clients)]

    def key(self, rank):
        return b"party"


def test_torchrun_computing_party_calibrates_for_its_clients(monkeypatch, torchrun_env):
    import secure_auc.deploy.service as service
    import secure_auc.mpc.comm.roster as roster
    from secure_auc.cli import compute

    monkeypatch.setattr(roster, "read_identity", lambda path: _Key())
    torchrun_env(0, 4)  # server, two helpers, dealer
    seen = []
    monkeypatch.setattr(service, "run_computing_service", lambda config, *a, **kw: seen.append(config) or _never())
    args = compute.build_parser().parse_args(["--clients", "3", "--roster", "r.json", "--identity-template", "x",
                                              "--mechanism", "distributed", "--epsilon", "1"])
    with pytest.raises(Started):
        compute._run_computing(args, time.perf_counter())
    assert seen[0].party_config().clients == seen[0].mechanism().clients == 3


def test_client_host_calibrates_for_its_clients(tmp_path, monkeypatch):
    import secure_auc.deploy.service as service
    import secure_auc.mpc.comm.roster as roster
    from secure_auc.cli import build_parser, cmd_client
    from secure_auc.deploy.config import DeployConfig
    from secure_auc.mpc import MPCError
    from secure_auc.data.io import write_client_csv

    c = _clients()[1]
    write_client_csv(tmp_path / "c1.csv", c.scores, c.labels)
    monkeypatch.setattr(DeployConfig, "roster", lambda self: _Roster(len(self.clients)))
    monkeypatch.setattr(roster, "read_identity", lambda path: _Key(bytes([1])))
    seen = []
    monkeypatch.setattr(service, "run_client_service", lambda config, *a, **kw: seen.append(config) or _never())
    args = build_parser().parse_args(["client", str(tmp_path / "c1.csv"), "--client", "1", "--clients", "3",
                                      "--roster", "r.json", "--identity", "k.pem", "--parties", "a:1", "b:2", "c:3",
                                      "--mechanism", "distributed", "--epsilon", "1"])
    with pytest.raises(MPCError, match="Started"):
        cmd_client(args)
    assert seen[0].party_config().clients == seen[0].mechanism().clients == 3
