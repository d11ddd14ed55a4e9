"""A stranger on the network: another local user (uid 65534) on another host than the services
(the test's own network namespace), holding silent connections and sending garbage to the ports
it is given, until it is stopped; with ``writes``, also a client of torch's ``TCPStore`` writing
1 MB values and a forged roll-call verdict to each port (what grew a party's memory by 400 MB and
stopped a start-up when the parties met at such a store)."""

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

WRITES = r"""
import datetime, os, sys, threading, time
import torch.distributed as dist
targets = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in sys.argv[1:]]
value = b"x" * (1 << 20)

def write(host, port):
    while True:
        try:
            store = dist.TCPStore(host, port, None, False, timeout=datetime.timedelta(seconds=2))
            store.set("secure-auc/missing", "the dealer (rank 3)")
            for i in range(400):
                store.set(f"stranger/{os.getpid()}/{i}", value)
        except Exception:
            time.sleep(0.05)

for host, port in targets:
    threading.Thread(target=write, args=(host, port), daemon=True).start()
print("ready", flush=True)
exec(compile(HOLD, "hold", "exec"))
"""


def start(targets, uid: int = 65534, writes: bool = False):
    """The stranger's process, attacking ``targets`` ((host, port), ...) as user ``uid`` (None:
    this process's user, where it cannot switch); with
    ``writes``, also writing to each as a client of torch's ``TCPStore``: with this project's
    Python (for torch), as this process's user (another user may not run that Python here)."""
    if writes:
        uid = None
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") and not writes else sys.executable
    code = f"HOLD = {SCRIPT!r}\n{WRITES}" if writes else SCRIPT
    as_user = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
    proc = subprocess.Popen([python, "-c", code, *(f"{h}:{p}" for h, p in targets)], **as_user,
                            stdout=subprocess.PIPE if writes else subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd="/", env={"PATH": "/usr/bin:/bin", "HOME": "/"})
    if writes:  # torch is imported (seconds, on a loaded machine): it writes from now on
        proc.stdout.readline()
    return proc


def resident_mb(pid: int) -> float:
    """The resident memory of process ``pid`` (VmRSS), in MB."""
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024
