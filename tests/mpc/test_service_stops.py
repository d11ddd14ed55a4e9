"""A deployment ended on purpose, and the session's errors: SIGTERM to the server service ends
every service in order (each says so and exits 0) and the session's next call raises an
MPCError carrying the cause; a session that finds no server raises an MPCError naming it."""

import importlib.util
import signal
import time
from pathlib import Path

import pytest

from secure_auc.mpc import MPCError

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_deploy", ROOT / "scripts" / "bench_deploy.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


ROLES = ["server", "helper-1", "client-0", "client-1"]  # the smallest deployment: 2 computing parties, no dealer


def _small_deployment(folder, timeout, remove=(), roles=ROLES, sizes=(40, 30), epochs=1):
    """Two computing parties (the server deals: provider tfp, tests only) and two clients: four
    services, the fewest that show every kind of party a fault must reach."""
    from secure_auc.cli import main as cli
    from secure_auc.mpc.launch import free_port

    bench.write_deployment(folder, list(sizes), epochs=epochs, ports=(free_port(), free_port(span=3), free_port()),
                           timeout=timeout)
    keys = folder / "keys"
    bench._quiet(cli, ["roster", str(folder / "roster.json"), "--server", str(keys / "server.pem"), "--helpers",
                       str(keys / "helper-1.pem"), "--clients", str(keys / "client-0.pem"),
                       str(keys / "client-1.pem"), "--force", "--quiet"])
    config = folder / "deploy.toml"
    text = config.read_text().replace("computing_parties = 3", "computing_parties = 2").replace(
        'provider = "ttp"', 'provider = "tfp"')
    head, _, helpers = text.partition("[[helpers]]")
    config.write_text(head + "[[helpers]]" + helpers.split("[[helpers]]")[0].rstrip() + "\n" +
                      "[[clients]]" + helpers.split("[[clients]]", 1)[1])
    for name in remove:
        (folder / name).unlink()
    return {role: bench.start_service(folder, role) for role in roles}


def test_a_session_that_finds_no_server_raises_an_mpc_error(tmp_path):
    from secure_auc.deploy.session import DeployedSession  # MPCSession.connect's (no torch imported)
    from secure_auc.mpc.launch import free_port

    bench.write_deployment(tmp_path, [5, 5, 5], epochs=1, ports=(free_port(), free_port(span=3), free_port()),
                           timeout=0.25)  # join_timeout = 1 s: nobody listens at the session's address
    start = time.monotonic()
    with pytest.raises(MPCError, match=r"^the server service is not reachable at 127\.0\.0\.1:\d+ \(tried for 1 s\) "
                                       r"\(deployment.join_timeout = 1 s\)$"):
        DeployedSession(tmp_path / "deploy.toml", key=tmp_path / "keys" / "server.pem")
    assert time.monotonic() - start < 10


def test_sigterm_to_the_server_ends_every_service_in_order(tmp_path):
    from secure_auc.session import MPCSession

    procs = _small_deployment(tmp_path, 30.0)
    try:
        session = MPCSession.connect(tmp_path / "deploy.toml", key=tmp_path / "keys" / "server.pem")
        stopped = time.monotonic()
        procs["server"].send_signal(signal.SIGTERM)
        errs = {}
        for role, p in procs.items():
            _, errs[role] = p.communicate(timeout=60)
        took = time.monotonic() - stopped
        lines = {role: err.strip().splitlines()[-1] for role, err in errs.items()}
        assert {role: p.returncode for role, p in procs.items()} == dict.fromkeys(ROLES, 0), lines
        assert lines["server"] == "secure-auc serve (server): stopped by SIGTERM; every service was told to end"
        for role in ROLES[1:]:  # each says so in its own words: "[helper 1] the server was stopped (SIGTERM)"
            assert lines[role].endswith("the server was stopped (SIGTERM)"), (role, errs[role][-800:])
            assert "error" not in errs[role], (role, errs[role][-800:])
        assert took < 10, took
        with pytest.raises(MPCError, match=r"the deployment ended: the server was stopped \(SIGTERM\)"):
            session.evaluate(epoch=0)
    finally:
        bench.stop(procs.values())


def _services_and_a_waiting_session(folder, configs: dict, roles=ROLES):
    """A session connecting to the deployment in ``folder``, then its four services (role ``r`` with the
    configuration file ``configs.get(r, "deploy.toml")``), each run to its end: (processes, the time of
    each one's end, each one's last stderr line, {"session": (when, the session's exception)}).

    The session first: it waits for the server (a session that connects after the deployment has
    ended hears only that the server is not reachable, after join_timeout); what it imports is loaded
    here, so that on a loaded machine it is connecting before the services start."""
    import importlib
    import threading

    from secure_auc.session import MPCSession

    said: dict = {}

    def session():
        try:
            MPCSession.connect(folder / "deploy.toml", key=folder / "keys" / "server.pem")
        except BaseException as exc:  # noqa: BLE001 - checked by the caller
            said["session"] = (time.monotonic(), exc)

    for module in ("secure_auc.deploy.session", "secure_auc.mpc.comm.inlinks", "secure_auc.mpc.comm.runtime"):
        importlib.import_module(module)
    waiting = threading.Thread(target=session)
    waiting.start()
    time.sleep(1.0)
    procs = {role: bench.start_service(folder, role, config_name=configs.get(role, "deploy.toml")) for role in roles}
    try:
        ends, lines = {}, {}
        for role, p in procs.items():
            _, err = p.communicate(timeout=100)  # join_timeout is 120 s
            ends[role], lines[role] = time.monotonic(), err.strip().splitlines()[-1]
        waiting.join(timeout=30)
    finally:
        bench.stop(procs.values())
    return procs, ends, lines, said


def test_a_client_that_cannot_start_is_named_by_every_party_and_the_session_at_once(tmp_path):
    """Client 1's labels file is missing, and client 0's configuration file parses but fails its checks:
    each joins only to say so, and every service and the waiting session name both (by reason codes) as
    soon as the computing parties are up (before: after join_timeout, here 120 s, blaming an unreachable
    party)."""
    cause = f"{tmp_path / 'labels-1.csv'}: cannot open client file (No such file or directory)"
    start = time.monotonic()
    _small_deployment(tmp_path, 30.0, remove=["labels-1.csv"], roles=[])  # written, nothing started
    config = tmp_path / "deploy.toml"
    (tmp_path / "typo.toml").write_text(config.read_text().replace('name = "', 'name = "x', 1))
    procs, ends, lines, said = _services_and_a_waiting_session(tmp_path, {"client-0": "typo.toml"})
    assert lines["client-1"] == f"secure-auc serve (client-1): error: {cause}" and procs["client-1"].returncode == 2
    assert lines["client-0"] == (f"secure-auc serve (client-0): error: {tmp_path / 'typo.toml'}: mechanism.name must "
                                 "be one of none, rr, laplace, gaussian, distributed, got 'xlaplace'")
    assert procs["client-0"].returncode == 2
    # the others hear a reason code, never the client's path or error text (that stays in its own log)
    told = ("client 0 refused: its configuration file is not valid (configuration); "
            "client 1 refused: it could not read its own inputs (inputs)")
    for role in ROLES[:-2]:
        assert lines[role].endswith(told), (role, lines[role])
        assert str(tmp_path) not in lines[role]
        assert procs[role].returncode == 1
    assert isinstance(said.get("session", (0, None))[1], MPCError), said
    assert str(said["session"][1]) == f"the deployment did not start: {told}"
    assert max(ends.values()) - min(ends.values()) < 5.0, {r: round(t - start, 1) for r, t in ends.items()}


def test_a_server_that_cannot_start_tells_the_clients_the_helpers_and_the_session_at_once(tmp_path):
    """The server's configuration file parses but fails its checks: it tells the helper at the roll
    call, each client from its client port (without its path or error text, as for a client that
    cannot start) and the waiting session (its own operator) the reason itself, as soon as each
    connects (before: every other party waited out join_timeout, here 120 s, then blamed an
    unreachable server)."""
    _small_deployment(tmp_path, 30.0, roles=[])  # written, nothing started
    config = tmp_path / "deploy.toml"
    (tmp_path / "server.toml").write_text(config.read_text().replace('sort = "radix"', 'sort = "radx"'))
    cause = f"{tmp_path / 'server.toml'}: deployment.sort must be one of radix, network, got 'radx'"
    procs, ends, lines, said = _services_and_a_waiting_session(tmp_path, {"server": "server.toml"})
    assert lines["server"] == f"secure-auc serve (server): error: {cause}" and procs["server"].returncode == 2
    for role in ROLES[2:]:
        assert lines[role] == (f"secure-auc serve ({role}): error: the deployment did not start: the server cannot "
                               "start: its configuration file is not valid (the detail is in its own log)"), lines[role]
        assert procs[role].returncode == 1 and ends[role] - ends["server"] < 5.0, ends
    assert "server (rank 0) cannot start" in lines["helper-1"] and str(tmp_path) not in lines["helper-1"], lines
    assert procs["helper-1"].returncode == 1 and ends["helper-1"] - ends["server"] < 5.0, ends
    assert isinstance(said.get("session", (0, None))[1], MPCError), said
    assert str(said["session"][1]) == f"the deployment did not start: the server cannot start: {cause}"
    assert said["session"][0] - ends["server"] < 5.0


def test_a_helper_that_never_starts_is_named_to_the_clients_and_the_session_by_the_server(tmp_path):
    """Helper 1 never starts (join_timeout = 6 s): the server, which listens for its clients and the
    session from its start, names it to each of them once its roll call expires (before: each gave up
    at its own join_timeout, blaming the server, which was running)."""
    _small_deployment(tmp_path, 1.5, roles=[])  # written, nothing started; join_timeout = 6 s
    procs, ends, lines, said = _services_and_a_waiting_session(tmp_path, {}, roles=["server", "client-0", "client-1"])
    never = "helper 1 (rank 1) never joined within 6 s (deployment.join_timeout = 6 s)"
    assert lines["server"] == f"secure-auc serve (server): error: {never}", lines
    for role in ("client-0", "client-1"):
        assert lines[role] == f"secure-auc serve ({role}): error: the deployment did not start: {never}", lines
        assert procs[role].returncode == 1 and abs(ends[role] - ends["server"]) < 5.0, ends
    assert procs["server"].returncode == 1
    assert isinstance(said.get("session", (0, None))[1], MPCError), said
    assert str(said["session"][1]) == f"the deployment did not start: {never}"
    assert abs(said["session"][0] - ends["server"]) < 5.0


def test_a_computing_party_that_cannot_start_is_named_at_the_roll_call_at_once(tmp_path):
    """Helper 1 was given another party's key: it checks in at the roll-call only to say so, and
    the server names it at once (before: after join_timeout, here 120 s, "never joined"); the
    server tells the clients and the session waiting for it (before: each waited out
    join_timeout, then blamed the unreachable server)."""
    import shutil
    import threading

    from secure_auc.session import MPCSession

    procs, said = {}, {}

    def session():
        try:
            MPCSession.connect(tmp_path / "deploy.toml", key=tmp_path / "keys" / "server.pem")
        except BaseException as exc:  # noqa: BLE001 - checked below
            said["session"] = (time.monotonic(), exc)

    waiting = threading.Thread(target=session)
    try:
        _small_deployment(tmp_path, 30.0, roles=[])  # written, nothing started
        shutil.copy(tmp_path / "keys" / "client-0.pem", tmp_path / "keys" / "helper-1.pem")
        waiting.start()  # the session first: it waits for the server
        procs = {role: bench.start_service(tmp_path, role) for role in ROLES}
        ends, lines = {}, {}
        for role, p in procs.items():
            _, err = p.communicate(timeout=100)
            ends[role], lines[role] = time.monotonic(), err.strip().splitlines()[-1]
        waiting.join(timeout=30)
    finally:
        bench.stop(procs.values())
    cause = f"this key is not the one the roster {tmp_path / 'roster.json'} lists for the helper 1"
    assert lines["helper-1"] == f"secure-auc serve (helper-1): error: {cause}" and procs["helper-1"].returncode == 2
    assert lines["server"] == f"secure-auc serve (server): error: helper 1 (rank 1) cannot start: {cause}", lines
    assert procs["server"].returncode == 1 and abs(ends["server"] - ends["helper-1"]) < 5.0
    for role in ROLES[2:]:  # as when another client cannot start: the cause, status 1
        assert lines[role] == (f"secure-auc serve ({role}): error: the deployment did not start: helper 1 (rank 1) "
                               f"cannot start: {cause}"), lines[role]
        assert procs[role].returncode == 1 and ends[role] - ends["helper-1"] < 5.0, ends
    assert isinstance(said["session"][1], MPCError), said
    assert str(said["session"][1]) == f"the deployment did not start: helper 1 (rank 1) cannot start: {cause}"
    assert said["session"][0] - ends["helper-1"] < 5.0


def test_a_server_that_listens_and_never_answers_is_named_with_the_setting():
    """A client or session waits twice join_timeout and a margin for a server that listens (it answers once the
    others have joined); if it never answers, the error names that setting."""
    import socket

    from secure_auc.mpc.comm.inlinks import InputLinkError, connect
    from secure_auc.mpc.comm.roster import generate_identity, public_bytes
    from secure_auc.mpc.roles.control import answer_within

    seconds, setting = answer_within(0.25, "deployment.join_timeout = 0.25 s")
    assert seconds == 10.5 and setting == "twice deployment.join_timeout = 0.25 s, and 10 s to say why"
    with socket.socket() as silent:  # listens, never accepts
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        start = time.monotonic()
        with pytest.raises(InputLinkError, match=r"^no answer from the server within 1 s \(twice deployment"
                                                 r"\.join_timeout = 0\.25 s, and 10 s to say why\)$"):
            connect(0, generate_identity(), [("127.0.0.1", silent.getsockname()[1], public_bytes(generate_identity()))],
                    timeout=0.25, describe_party=lambda p: "the server", describe_me="the session",
                    answer_within=(1.0, setting))
        assert 0.9 < time.monotonic() - start < 5
