"""Process faults of the local launcher, measured: the launcher's death (any signal) takes
every party with it within 2 s, even while the parties are still starting; SIGTERM and SIGHUP
end the run like Ctrl-C (tests/mpc/test_stop_signals.py), with status 143 and 129; a party that stops answering is named with its rank and role; a
port left in TIME_WAIT by a finished run is free again at once."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from secure_auc.data import ClientData
from secure_auc.dp import NoNoise
from secure_auc.mpc.launch import check_port_free, free_port, launch_local
from secure_auc.mpc.party import PartyConfig
from secure_auc.validation import InputError

ROOT = Path(__file__).resolve().parents[2]


def _default_signals():
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _cli(*args):
    """The launcher with every client a computing party (the process layout these tests count)."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    # SIGHUP, SIGINT and SIGTERM as a terminal would leave them, even when the suite runs under nohup
    # or as a background job (which ignores SIGINT): the launcher rightly keeps an ignored signal ignored
    return subprocess.Popen([sys.executable, "-m", "secure_auc", "evaluate", "--protocol", "mpc", "--layout", "clients", *args],
                            preexec_fn=_default_signals,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def _kids(pid):
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
                cmd = (p / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"resource_tracker" not in cmd:
                out.append((int(p.name), cmd))
    return out


def _children(pid):
    """The launcher's party processes: its children, or the children of its fork server."""
    out = []
    for kid, cmd in _kids(pid):
        if b"forkserver" in cmd:
            out += [k for k, _ in _kids(kid)]
        else:
            out.append(kid)
    return sorted(out)  # started in rank order: server, clients, dealer


def _alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for_parties(proc, n, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        kids = _children(proc.pid)
        if len(kids) >= n:
            return kids
        time.sleep(0.05)
    raise AssertionError("the parties did not start")


@pytest.mark.parametrize("how", ["SIGKILL", "SIGHUP", "SIGTERM"])
def test_the_launchers_death_ends_every_party_within_2_s_even_during_start_up(how):
    proc = _cli("--samples", "20000", "--clients", "2", "--mechanism", "none")
    parties = _wait_for_parties(proc, 4)  # server, 2 clients, dealer
    time.sleep(0.05)  # the parties start in milliseconds from the fork server and rank 20,000 scores in about 1 s
    os.kill(proc.pid, getattr(signal, how))
    start = time.monotonic()
    while any(_alive(p) for p in parties) and time.monotonic() - start < 10:
        time.sleep(0.01)
    gone = time.monotonic() - start
    _, err = proc.communicate(timeout=30)
    assert gone < 2.0, f"parties alive {gone:.1f} s after the launcher's {how}"
    if how != "SIGKILL":  # the same clean end as Ctrl-C, with the signal's own status (143, 129)
        assert proc.returncode == 128 + getattr(signal, how), err
        assert err.strip().splitlines()[-1] == f"secure-auc: stopped by {how}", err
        assert "Traceback" not in err


def test_a_stopped_party_is_named_within_the_timeout():
    # once the party is stopped the others wait out the timeout, whatever it is: 5 s proves the
    # bound as 15 s did (the parties started long before; a healthy one is never named: its heartbeat
    # thread keeps beating while it computes or waits)
    timeout = 5
    proc = _cli("--samples", "300000", "--clients", "2", "--mechanism", "none", "--timeout", str(timeout))
    seen = []
    for line in proc.stderr:  # the parties compute once the rank step reports
        seen.append(line)
        if "rank step: stage" in line:
            break
    parties = _children(proc.pid)
    assert len(parties) == 4, "".join(seen)
    os.kill(parties[1], signal.SIGSTOP)  # client 0 (rank 1)
    start = time.monotonic()
    try:
        rest = proc.stderr.read()
        proc.wait(timeout=timeout + 30)
        took = time.monotonic() - start
    finally:
        if _alive(parties[1]):
            os.kill(parties[1], signal.SIGKILL)
    last = rest.strip().splitlines()[-1]
    assert proc.returncode == 1
    assert last.startswith("secure-auc: error: MPC run failed: client 0 (rank 1) stopped answering"), last
    assert "stopped: SIGSTOP or a debugger" in last and "Traceback" not in rest
    assert took < timeout + 10, took  # the others' own timeout, then the launcher stops every process
    end = time.monotonic() + 5
    while any(_alive(p) for p in parties) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(_alive(p) for p in parties)


def test_a_port_is_free_again_right_after_a_clean_run():
    port = free_port()
    c = ClientData(np.array([0.1, 0.7, 0.4]), np.array([0, 1, 1], dtype=np.int8), "c")
    config = PartyConfig(mechanisms=(NoNoise(),), clients=1, provider="tfp", progress=False)
    for _ in range(2):  # the first run leaves connections in TIME_WAIT on the port
        res = launch_local([c], config, timeout=60, port=port)
        assert float(res[0].estimates[0].auc) == 1.0
    check_port_free("127.0.0.1", port)
    check_port_free("127.0.0.1", port + 1)


def test_a_party_of_another_run_is_stopped_at_the_claim():
    from secure_auc.mpc.comm.runtime import PartyStartError, _claim_port

    port = free_port()
    _claim_port(0, "127.0.0.1", port, "run-a", 10)  # this run's server holds port + 1
    _claim_port(1, "127.0.0.1", port, "run-a", 10)  # its own client goes on
    with pytest.raises(PartyStartError, match=f"port {port} on 127.0.0.1 is in use by another run"):
        _claim_port(1, "127.0.0.1", port, "run-b", 10)
    with pytest.raises(PartyStartError, match=f"port {port + 1} on 127.0.0.1 is busy"):
        _claim_port(0, "127.0.0.1", port, "run-b", 10)


def test_a_drawn_port_taken_before_the_parties_listen_is_drawn_again(monkeypatch):
    """The launcher's own port choice can lose a race (another process binds the port, or the
    next one, between the draw and the parties' listen): it starts the parties again on a new
    port and the run is exact; a port the user gave is refused instead."""
    import socket

    import secure_auc.mpc.launch as launch
    from secure_auc.mpc import MPCError

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1] - 1  # the run's claim (port + 1) is held by someone else
    draws = []

    def draw(host="127.0.0.1", span=2):
        draws.append(taken if not draws else free_port(host, span))
        return draws[-1]

    monkeypatch.setattr(launch, "free_port", draw)
    c = ClientData(np.array([0.1, 0.7, 0.4, 0.4]), np.array([0, 1, 0, 1], dtype=np.int8), "c")
    config = PartyConfig(mechanisms=(NoNoise(),), clients=1, provider="tfp", progress=False)
    try:
        res = launch_local([c], config, timeout=30)
        assert float(res[0].estimates[0].auc) == roc_auc_score(c.labels, c.scores)
        assert len(draws) == 2 and draws[0] == taken
        # taken + 1 is held; taken itself may meanwhile be another process's (it is in the ephemeral range)
        with pytest.raises(InputError, match=f"port ({taken}|{taken + 1}) on 127.0.0.1 is busy"):
            launch_local([c], config, timeout=30, port=taken)
        monkeypatch.setattr(launch, "free_port", lambda host="127.0.0.1", span=2: taken)
        with pytest.raises(MPCError, match="three ports drawn in a row were taken"):
            launch_local([c], config, timeout=30)
    finally:
        held.close()


def test_two_runs_on_one_port_never_meet():
    """Started together: where they overlap one stops with a clear line and the other is exact;
    never do both fail, nor does either report a wrong AUC."""
    port = str(free_port())
    procs = [_cli("--samples", "20000", "--clients", "2", "--mechanism", "none", "--port", port, "--json")
             for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes in ([0, 0], [0, 1]), outs
    for p, (out, err) in zip(procs, outs):
        if p.returncode == 0:
            d = json.loads(out)
            assert d["auc"] == d["reference_auc"]
        else:
            last = err.strip().splitlines()[-1]
            assert ("in use by another run started on the same port" in last
                    or f"port {int(port) + 1} on 127.0.0.1 is busy" in last
                    or f"port {port} on 127.0.0.1 is busy" in last), last
