"""Process faults of the local MPC launcher, measured: for each fault, the seconds until
every party process (and the dealer) has exited, the launcher's exit code and its last
stderr line.

    python scripts/process_faults.py [--samples 20000] [--clients 3] [--timeout 10]

Seconds: for a fault of the launcher or a party, from the fault until every party process
has exited; for the port cases, the wall time of the (second) run.
Faults: the launcher stopped by SIGINT (Ctrl-C), SIGTERM, SIGHUP and SIGKILL while the
parties compute; one client party stopped (SIGSTOP) or killed (SIGKILL); a re-run on the
same --port right after a clean run; two runs started together on one --port; --port 0.
Times include Python's and CrypTen's start-up, so they are noisy on a busy machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            out.append(int(p.name))
    return out


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _cmd(args, *extra):
    return [sys.executable, "-m", "secure_auc", "evaluate", "--protocol", "mpc", "--samples", str(args.samples),
            "--clients", str(args.clients), "--timeout", str(args.timeout), "--mechanism", "laplace", *extra]


def _env():
    return dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


AFTER = [3.0]  # seconds between the parties' start and the fault (--after)


def _party_pids(launcher: int, expect: int, wait: float = 60.0) -> list[int]:
    """The launcher's party processes (python children that are not the resource tracker), once all started."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        kids = [p for p in _descendants(launcher) if "resource_tracker" not in _cmdline(p)]
        if len(kids) >= expect and all(_cmdline(p) for p in kids):
            time.sleep(AFTER[0])  # let them import CrypTen and meet
            return [p for p in _descendants(launcher)]
        time.sleep(0.1)
    raise RuntimeError("the parties did not start")


def _role(pid: int) -> str:
    c = _cmdline(pid)
    return "resource tracker" if "resource_tracker" in c else f"pid {pid}"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1] if lines else ""


def launcher_killed(args, sig) -> tuple:
    proc = subprocess.Popen(_cmd(args), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parties = args.clients + 2
    pids = _party_pids(proc.pid, parties)
    names = {p: _role(p) for p in pids}
    t0 = time.monotonic()
    os.kill(proc.pid, sig)
    ends = {}
    while len(ends) < len(pids) and time.monotonic() - t0 < 90:
        for p in pids:
            if p not in ends and not _alive(p):
                ends[p] = time.monotonic() - t0
        time.sleep(0.02)
    out, err = proc.communicate(timeout=60)
    party_ends = [t for p, t in ends.items() if names[p] != "resource tracker"]
    detail = ", ".join(f"{names[p]} {t:.2f}" for p, t in sorted(ends.items(), key=lambda x: x[1]))
    return max(party_ends, default=float("nan")), proc.returncode, _last_line(err), detail


def party_stopped(args, sig, which: int) -> tuple:
    proc = subprocess.Popen(_cmd(args), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = _party_pids(proc.pid, args.clients + 2)
    parties = sorted(p for p in pids if "resource_tracker" not in _cmdline(p))
    victim = parties[which]
    t0 = time.monotonic()
    os.kill(victim, sig)
    out, err = proc.communicate(timeout=args.timeout * 4 + 60)
    launcher = time.monotonic() - t0
    while any(_alive(p) for p in pids) and time.monotonic() - t0 < 120:
        time.sleep(0.02)
    if sig == signal.SIGSTOP and _alive(victim):
        os.kill(victim, signal.SIGKILL)
    return time.monotonic() - t0, proc.returncode, _last_line(err), None


def _run(args, *extra) -> tuple:
    start = time.monotonic()
    proc = subprocess.run(_cmd(args, *extra), env=_env(), capture_output=True, text=True, timeout=600)
    return time.monotonic() - start, proc.returncode, _last_line(proc.stderr) if proc.returncode else "ok"


def port_reused(args) -> tuple:
    from secure_auc.mpc.launch import free_port

    port = str(free_port())
    first = _run(args, "--port", port)
    second = _run(args, "--port", port)  # right after: the first run's connections are in TIME_WAIT
    return second[0], second[1], f"first run: {first[2]}; second run: {second[2]}", None


def same_port_together(args) -> tuple:
    from secure_auc.mpc.launch import free_port

    port = str(free_port())
    start = time.monotonic()
    procs = [subprocess.Popen(_cmd(args, "--port", port), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    lines = [("ok" if p.returncode == 0 else _last_line(e)) for p, (o, e) in zip(procs, outs)]
    return time.monotonic() - start, max(p.returncode for p in procs), " | ".join(lines), None


def port_zero(args) -> tuple:
    return (*_run(args, "--port", "0"), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--only", nargs="*", default=None, help="run only the faults whose name contains one of these")
    ap.add_argument("--after", type=float, default=3.0,
                    help="seconds from the parties' start to the fault (default 3: while they import and meet)")
    args = ap.parse_args()
    AFTER[0] = args.after
    rows = []
    tests = {
        "launcher SIGINT": lambda: launcher_killed(args, signal.SIGINT),
        "launcher SIGTERM": lambda: launcher_killed(args, signal.SIGTERM),
        "launcher SIGHUP": lambda: launcher_killed(args, signal.SIGHUP),
        "launcher SIGKILL": lambda: launcher_killed(args, signal.SIGKILL),
        "client party SIGSTOP": lambda: party_stopped(args, signal.SIGSTOP, 2),
        "client party SIGKILL": lambda: party_stopped(args, signal.SIGKILL, 2),
        "same --port re-run": lambda: port_reused(args),
        "same --port together": lambda: same_port_together(args),
        "--port 0": lambda: port_zero(args),
    }
    for name, fn in tests.items():
        if args.only and not any(o in name for o in args.only):
            continue
        res = fn()
        rows.append((name, *res))
        print(f"{name:<22} {res[0]:6.2f} s  exit {res[1]:>4}  {res[2]}", flush=True)
        if isinstance(res[3], str):
            print(f"{'':<22} ({res[3]})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
