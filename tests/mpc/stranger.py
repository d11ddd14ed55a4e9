"""A stranger on the network: another local user (uid 65534) on another host than the services
(the test's own network namespace), holding silent connections and sending garbage to the ports
it is given, until it is stopped."""

import os
import subprocess
import sys

SCRIPT = r"""
import os, socket, sys, time
targets = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in sys.argv[1:]]
held, n = [], 0
while True:
    for host, port in targets:
        try:
            s = socket.create_connection((host, port), timeout=1)
            if n % 2:
                s.sendall(os.urandom(4096))  # garbage where a handshake or a frame should be
            held.append(s)
        except OSError:
            pass
        n += 1
    if len(held) > 200:
        held.pop(0).close()
    time.sleep(0.02)
"""


def start(targets, uid: int = 65534):
    """The stranger's process, attacking ``targets`` ((host, port), ...) as user ``uid``."""
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    return subprocess.Popen([python, "-c", SCRIPT, *(f"{h}:{p}" for h, p in targets)], user=uid, group=uid,
                            extra_groups=[], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")


def resident_mb(pid: int) -> float:
    """The resident memory of process ``pid`` (VmRSS), in MB."""
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024
