"""Stop a local run mid rank step with a signal and time the end of every process of the run
(the launcher, its fork server, the parties, the resource tracker).

    python scripts/stop_signals.py SIGINT|SIGTERM|SIGHUP SAMPLES [evaluate options...]

Starts ``secure-auc evaluate --protocol mpc --samples SAMPLES --clients 3 --mechanism none``,
sends the signal to the launcher one second after the server reports the rank step's first
stage, and prints the seconds until the last process is gone, the exit status, whether a result
was printed and the last stderr line (SHOW=1: each process's end and stderr line with its time).
"""
import os, signal, subprocess, sys, time
from pathlib import Path

def descendants(pid):
    kids = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(p.name))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k); todo.append(k)
    return out

def alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

how, samples = sys.argv[1], sys.argv[2]
extra = sys.argv[3:]
def dflt():
    for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)
t0 = time.monotonic()
proc = subprocess.Popen([sys.executable, "-m", "secure_auc", "evaluate", "--protocol", "mpc", "--samples", samples,
                         "--clients", "3", "--mechanism", "none", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True, preexec_fn=dflt, start_new_session=True)
seen = []
for line in proc.stderr:
    seen.append(line)
    if "rank step: stage" in line or "digit" in line or "stage" in line:
        break
procs = descendants(proc.pid)
time.sleep(1.0)
procs = sorted(set(procs + descendants(proc.pid)))
import threading
lines = []
def reader():
    for line in proc.stderr:
        lines.append((time.monotonic(), line))
threading.Thread(target=reader, daemon=True).start()
os.kill(proc.pid, getattr(signal, how))
start = time.monotonic()
died = {}
def cmd(p):
    try: return Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:60].decode(errors="replace")
    except OSError: return "?"
names = {p: cmd(p) for p in procs + [proc.pid]}
while (alive(proc.pid) or any(alive(p) for p in procs)) and time.monotonic() - start < 120:
    for p in procs + [proc.pid]:
        if p not in died and not alive(p):
            died[p] = time.monotonic() - start
    time.sleep(0.02)
for p in procs + [proc.pid]:
    died.setdefault(p, time.monotonic() - start)
if os.environ.get("SHOW"):
    for p, t in sorted(died.items(), key=lambda kv: kv[1]):
        print(f"  {t:5.2f} s  {p} {names[p]}")
gone = time.monotonic() - start
proc.wait(timeout=30)
time.sleep(0.2)
out = proc.stdout.read()
err = "".join(l for _, l in lines)
if os.environ.get("SHOW"):
    for t, l in lines:
        print(f"  {t - start:5.2f} s  stderr: {l.rstrip()[:150]}")
print(f"{how}: every process gone {gone:.2f} s after the signal; exit {proc.returncode}; {len(procs)} processes; "
      f"result printed: {bool(out.strip())}; last line: {err.strip().splitlines()[-1] if err.strip() else ''!r}")
