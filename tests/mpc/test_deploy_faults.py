"""Deployed services' faults in the middle of an evaluation: a service stopped (SIGTERM) during the
rank step charges the stopped client's ledger nothing (nothing of its labels had left it, the
aggregate was never opened), and with the server stopped no client's; every service says why
it ends (the server's stop: each says so and exits 0).  And a party that cannot start keeps
telling the others why for the whole ``join_timeout``.
(tests/mpc/test_service_stops.py: the start-up's faults and the orderly end between evaluations.)"""

import re
import signal
import threading
import time

from secure_auc.mpc import MPCError

from .test_service_stops import ROLES, _small_deployment, bench

SIZES = (40000, 40000)  # a rank step of about 0.9 s on a quiet machine, seconds on a busy one: long enough to stop it midway


def test_a_party_that_cannot_start_tries_to_say_why_for_the_whole_join_timeout(tmp_path, monkeypatch):
    """A computing party (and a client) whose configuration fails its checks joins only to say why:
    it keeps trying for the whole ``join_timeout`` (here 80 s), not 30 s at most (the others may be
    started later than that)."""
    from secure_auc.deploy.service import refuse_to_start
    from secure_auc.mpc.comm import runtime
    from secure_auc.mpc.launch import free_port
    from secure_auc.mpc.roles import host
    from secure_auc.mpc.comm.roster import read_identity

    bench.write_deployment(tmp_path, [5, 5], epochs=1, ports=(free_port(), free_port(span=4), free_port()),
                           timeout=20.0)  # join_timeout = 80 s
    tries = []
    monkeypatch.setattr(runtime, "refuse_roll_call", lambda *args, identity=None: tries.append(("rank", args[5])))
    monkeypatch.setattr(host, "client_service",
                        lambda plan, k, identity, inputs, refusal=None: tries.append(("client", plan.join_timeout)))
    for role in ("helper-1", "dealer", "client-0"):
        refuse_to_start(tmp_path / "deploy.toml", role, read_identity(tmp_path / "keys" / f"{role}.pem"), "a typo")
    assert tries == [("rank", 80.0), ("rank", 80.0), ("client", 80.0)]


class _Deployment:
    """The four services of :func:`.test_service_stops._small_deployment` with ``SIZES`` rows, their
    stderr lines with times, and a session that has run two evaluations (the first one loads the
    compiled code and may take twice as long as the next: the second one's time sets the signal's)."""

    def __init__(self, folder):
        from secure_auc.session import MPCSession

        self.folder = folder
        self.procs = _small_deployment(folder, 20.0, sizes=SIZES, epochs=3)
        self.lines = {role: [] for role in ROLES}
        for role in ROLES:
            threading.Thread(target=self._read, args=(role,), daemon=True).start()
        self.session = MPCSession.connect(folder / "deploy.toml", key=folder / "keys" / "server.pem")
        self.session.evaluate(epoch=0)
        self.warm = self.session.evaluate(epoch=1)

    def _read(self, role):
        for line in self.procs[role].stderr:
            self.lines[role].append((time.monotonic(), line.rstrip()))

    def stop_mid_rank_step(self, role):
        """Ask for a third evaluation and send ``role`` SIGTERM once every client has charged its
        ledger for it and its rank step runs; the session's error, the time of the signal."""
        said = {}

        def evaluate():
            try:
                said["result"] = self.session.evaluate(epoch=2)
            except BaseException as exc:  # noqa: BLE001 - checked by the caller
                said["error"] = exc

        asking = threading.Thread(target=evaluate)
        asking.start()
        end = time.monotonic() + 30
        while time.monotonic() < end and self._charged() < 3 * len(SIZES) and "error" not in said:
            time.sleep(0.02)
        # the clients have reserved their budget: their inputs follow, then the rank step, which takes most of
        # an evaluation (the second one's time here, on this machine at this load)
        time.sleep(0.4 * self.warm.seconds)
        signalled = time.monotonic()
        self.procs[role].send_signal(signal.SIGTERM)
        for p in self.procs.values():
            p.wait(timeout=60)
        asking.join(timeout=30)
        time.sleep(0.2)  # the readers take the last lines
        return said, signalled

    def _charged(self):
        from secure_auc.dp.accountant import Ledger

        try:
            return sum(len(Ledger(self.folder / f"ledger-{k}.db").releases()) for k in range(len(SIZES)))
        except Exception:  # noqa: BLE001 - a ledger being written
            return 0

    def ledger(self, k):
        from secure_auc.dp.accountant import Ledger

        return [(r["evaluation"], r["state"]) for r in Ledger(self.folder / f"ledger-{k}.db").releases()]

    def last(self, role):
        return self.lines[role][-1]

    def stop(self):
        bench.stop(self.procs.values())


def test_sigterm_to_the_server_mid_rank_step_ends_the_deployment_and_charges_nothing(tmp_path):
    deployment = _Deployment(tmp_path)
    try:
        said, signalled = deployment.stop_mid_rank_step("server")
    finally:
        deployment.stop()
    server = "\n".join(line for _, line in deployment.lines["server"])
    assert not re.search(r"evaluation 3 \(epoch 2\)", server), server[-600:]  # stopped before its end
    codes = {role: p.returncode for role, p in deployment.procs.items()}
    lines = {role: deployment.last(role) for role in ROLES}
    assert lines["server"][1] == "secure-auc serve (server): stopped by SIGTERM; every service was told to end"
    assert codes["server"] == 0
    for k in range(len(SIZES)):  # each client says so and exits 0; its ledger holds the first two evaluations only
        assert lines[f"client-{k}"][1] == f"[client {k}] the server was stopped (SIGTERM)", lines
        assert codes[f"client-{k}"] == 0, codes
        assert deployment.ledger(k) == [(1, "released"), (2, "released")]
    # the helper, mid-step, reads the server's last word when its links close
    assert lines["helper-1"][1] == "[helper 1] the server was stopped (SIGTERM)" and codes["helper-1"] == 0, lines
    assert isinstance(said.get("error"), MPCError) and "result" not in said, said
    assert str(said["error"]) == "the deployment ended: the server was stopped (SIGTERM)"
    took = {r: round(t - signalled, 2) for r, (t, _) in lines.items()}
    print(f"\nSIGTERM to the server mid rank step: each service's last line after {took} s")
    assert max(took.values()) < 5.0, took


def test_sigterm_to_a_client_mid_rank_step_charges_its_ledger_nothing(tmp_path):
    deployment = _Deployment(tmp_path)
    try:
        said, signalled = deployment.stop_mid_rank_step("client-0")
    finally:
        deployment.stop()
    codes = {role: p.returncode for role, p in deployment.procs.items()}
    lines = {role: deployment.last(role) for role in ROLES}
    assert lines["client-0"][1] == "secure-auc serve (client-0): stopped by SIGTERM" and codes["client-0"] == 143
    assert deployment.ledger(0) == [(1, "released"), (2, "released")]  # its labels never left it: the reservation was withdrawn
    for role in ("server", "helper-1", "client-1"):  # every other service names it and stops
        assert "client 0 disconnected" in lines[role][1] and codes[role] == 1, (role, lines[role], codes[role])
    assert isinstance(said.get("error"), MPCError) and "client 0 disconnected" in str(said["error"]), said
    took = {r: round(t - signalled, 2) for r, (t, _) in lines.items()}
    print(f"\nSIGTERM to client 0 mid rank step: each service's last line after {took} s")
    assert max(took.values()) < 10.0, took
