"""Strangers on the ports of the services, in-process (threads, no CrypTen world):

* silent connections to the session port, one after another, do not stop the server from keeping
  the helpers' and the dealer's waits alive (its ticks stay a timeout's third apart), and a real
  session still connects meanwhile;
* a flood of idle connections from another address at a computing party's client port does not
  push the rostered clients out: they get through (per-source limits; they retry a connection
  closed unread), and a key that is not the roster's is still refused at once.
"""

import importlib.util
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from secure_auc.deploy.config import load_config
from secure_auc.deploy.service import service_plan
from secure_auc.mpc.roles.server import ServerService
from secure_auc.deploy.session import DeployedSession
from secure_auc.mpc.comm import tls
from secure_auc.mpc.comm.channel import public_bytes
from secure_auc.mpc.comm.inlinks import InputLinkError, accept_hosts, connect, listen
from secure_auc.mpc.comm.roster import generate_identity, read_identity
from secure_auc.mpc.launch import free_port

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_deploy", ROOT / "scripts" / "bench_deploy.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


class _Stop(Exception):
    pass


def _silent_connections(address, stop, every=0.2, source="127.0.0.2"):
    """One connection that says nothing every ``every`` seconds (each kept open) until ``stop``."""
    held = []
    while not stop.is_set():
        try:
            s = socket.socket()
            s.bind((source, 0))
            s.connect(address)
            held.append(s)
        except OSError:
            pass
        time.sleep(every)
    for s in held:
        s.close()


def test_silent_connections_on_the_session_port_do_not_stall_the_helpers(tmp_path):
    folder = tmp_path / "deployment"
    bench.write_deployment(folder, [5], epochs=1, ports=(free_port(), free_port(), free_port()), timeout=1.5)
    config = load_config(folder / "deploy.toml")
    identity = read_identity(folder / "keys" / "server.pem")
    server = ServerService(service_plan(config, 0, identity, "server"), identity, str, time.perf_counter())
    assert server.interval == 0.5
    ticks = []
    attack = threading.Event()

    def tick():  # the keep-alive broadcast to the helpers and the dealer, recorded
        ticks.append(time.monotonic())
        if ticks[-1] - ticks[0] > 3.5:
            raise _Stop

    server.tick = tick
    control = listen(*config.session_address)
    stranger = threading.Thread(target=_silent_connections, args=(config.session_address, attack), daemon=True)
    stranger.start()
    outcome = []
    looping = threading.Thread(target=lambda: outcome.append(pytest.raises(_Stop, server.loop, control)), daemon=True)
    looping.start()
    try:
        time.sleep(1.0)
        session = DeployedSession(config, key=folder / "keys" / "server.pem")  # a real session gets through
        assert session.clients == 0
        session.close()
        looping.join(15)
    finally:
        attack.set()
        stranger.join(5)
        control.close()
    assert outcome, "the server loop did not end"
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert len(ticks) >= 5 and max(gaps) < 2 * server.interval + 0.3, gaps


def _party(hosts, timeout, result, listener=None, start=None):
    identity = generate_identity()
    listener = listener or listen("127.0.0.1", 0)

    def run():
        if start is not None:
            start.wait(10)
        try:
            result["links"] = accept_hosts(listener, 1, identity, [public_bytes(k) for k in hosts], timeout=timeout,
                                           describe_me="helper 1", describe_host=lambda h: f"client {h}")
        except Exception as exc:  # noqa: BLE001 - checked by the test
            result["links"] = exc
        listener.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return identity, listener.getsockname(), t


FLOOD = """
import socket, sys, time
host, port, held = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = []
while True:
    s = socket.socket()
    s.setblocking(False)
    try:
        s.bind(("127.0.0.2", 0))
        s.connect_ex((host, port))
    except OSError:
        s.close()
        continue
    socks.append(s)
    if len(socks) > held:
        socks.pop(0).close()
"""


def _flood(address, held=400):
    """A process of its own opening idle connections from 127.0.0.2 as fast as it can, the last
    ``held`` kept open, until it is killed."""
    return subprocess.Popen([sys.executable, "-c", FLOOD, address[0], str(address[1]), str(held)])


def test_rostered_clients_get_through_a_flood_of_idle_connections(monkeypatch):
    """400 idle connections wait in the backlog when the party starts to accept (it takes clients
    only once the computing parties have met), more keep coming, and the clients are among them
    (room for 4 handshakes at once here, so that the flood of one process fills it)."""
    monkeypatch.setattr(tls, "MAX_PENDING", 4)
    hosts = [generate_identity() for _ in range(2)]
    result, start = {}, threading.Event()
    identity, address, party = _party(hosts, 40.0, result, start=start)
    flood = _flood(address)
    time.sleep(1.0)
    links, errors = {}, []

    def client(h):
        try:
            links[h] = connect(h, hosts[h], [(*address, public_bytes(identity))], timeout=30.0,
                               describe_party=lambda p: "helper 1", describe_me=f"client {h}")[0]
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    began = time.monotonic()
    clients = [threading.Thread(target=client, args=(h,)) for h in range(2)]
    for c in clients:
        c.start()
    time.sleep(0.3)
    start.set()
    for c in clients:
        c.join(30)
    party.join(30)
    flood.kill()
    flood.wait()
    assert not errors, errors
    assert sorted(result["links"]) == [0, 1] and time.monotonic() - began < 30
    for link in links.values():
        link.close()


def test_a_key_the_roster_does_not_list_is_refused_at_once_not_retried():
    hosts = [generate_identity()]
    result = {}
    identity, address, party = _party(hosts, 1.0, result)
    start = time.monotonic()
    with pytest.raises(InputLinkError, match=r"closed the connection during the handshake \(does its roster list"):
        connect(0, generate_identity(), [(*address, public_bytes(identity))], timeout=10.0,
                describe_party=lambda p: "helper 1", describe_me="client 0")
    assert time.monotonic() - start < 2.0
    party.join(10)
    assert isinstance(result["links"], InputLinkError)
    assert tls.PER_SOURCE < tls.MAX_PENDING
