"""Start the MPC parties as local processes (``secure-auc evaluate --protocol mpc``).

One process per party: the server (rank 0), one per client (ranks 1..K, each
given only its own data), and with ``provider="ttp"`` a dealer (rank K + 1).
They rendezvous over TCP on 127.0.0.1 exactly as torchrun-launched parties do
(``parties/mpc_party.py``), so the two launch modes run the same code.

Failure handling: every party's communicator has a timeout (default 60 s), so a
party that stops answering makes the others fail within that bound; this
launcher also watches the processes and, as soon as one exits abnormally or
reports an error, stops all the others and raises :class:`MPCError` naming the
party.  Ctrl-C stops every party.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import queue as queue_mod
import signal
import socket
import time
import traceback

from ..data.io import ClientData
from ..validation import InputError
from .errors import MPCError
from .forkserver import PARTY, context, ensure_running, starting
from .party import PartyConfig, role_name, run_party

log = logging.getLogger(__name__)

__all__ = ["MPCError", "launch_local", "run_parties", "spawn_parties", "HelpersPlan", "free_port", "check_port_free", "announce",
           "cost_summary"]


_LOCAL = "127.0.0.1"  # the address of every local run


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the source ports of outgoing connections (Linux), else IANA's."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(v) for v in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 49152, 65535


def free_port(host: str = _LOCAL, span: int = 2) -> int:
    """A free port with the ``span - 1`` next ones free too (a local run uses two: the
    rendezvous and the run's claim, :func:`.comm.runtime._claim_port`).

    Drawn at random outside the kernel's ephemeral range: a port from inside it could be
    taken, between this check and the parties' listen, as the source port of any outgoing
    connection on the machine (every party of every run opens dozens)."""
    import secrets

    low, high = _ephemeral_range()
    # the registered ports below the ephemeral range (10000 up), else those above it
    spaces = [(lo, hi) for lo, hi in ((10000, low - span), (high + 1, 65535 - span)) if hi - lo > 1000]
    for _ in range(200):
        if spaces:
            lo, hi = spaces[secrets.randbelow(len(spaces))]
            port = lo + secrets.randbelow(hi - lo + 1)
        else:  # an unusual kernel setting: whatever the kernel hands out
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
            if port + span > 65536:
                continue
        try:
            for p in range(port, port + span):
                check_port_free(host, p)
            return port
        except InputError:
            continue
    raise InputError(f"no {span} consecutive free ports on {host}")


def check_port_free(host: str, port: int) -> None:
    """Refuse a port another process listens on; a port left in TIME_WAIT by a finished
    run is free (SO_REUSEADDR, as torch's own listener binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            err = InputError(f"port {port} on {host} is busy ({exc.strerror}); choose another with --port")
            err.started = False  # checked before any party starts: a reservation for the run is withdrawn
            raise err from None


def _die_with_parent(launcher: int | None = None) -> None:
    """Linux: the kernel kills this party when its parent dies, however it dies
    (SIGKILL included), so no party goes on computing on private data, orphaned.

    The parent is the launcher (``spawn``) or the launcher's fork server, which
    itself dies with the launcher (:func:`.forkserver.context`).  If the parent changed
    before the request took effect, or the launcher (``launcher``, its pid) is
    gone, the process exits at once.  Where ``setpriv`` exists,
    :func:`.forkserver.spawn_executable` has already made the kernel's request for a spawned
    process before Python started, which covers its start-up too."""
    import ctypes

    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent or parent == 1:  # the parent died before the request took effect
        os._exit(1)
    if launcher is not None:
        try:
            os.kill(launcher, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:
            pass


class _Stdio:
    """The launcher's standard output and error as they are when a party starts.

    A party forked from the fork server would otherwise write to the fork server's
    (those of the moment it started, which a later redirection of the launcher's
    does not change); pickled for the party, it carries duplicates of the
    launcher's file descriptors 1 and 2, which :meth:`apply` puts in place."""

    def __init__(self, fds=None):
        self.fds = fds

    def __reduce__(self):
        from multiprocessing.reduction import DupFd

        return (_Stdio, ([DupFd(1), DupFd(2)],))

    def apply(self) -> None:
        for target, dup in zip((1, 2), self.fds or ()):
            fd = dup.detach()
            os.dup2(fd, target)
            os.close(fd)


def _started(stdio: _Stdio, body, *args) -> None:
    """A party's process: the launcher's stdout and stderr, then ``body(*args)``."""
    stdio.apply()
    body(*args)


@dataclasses.dataclass(frozen=True)
class JobRef:
    """A party's job named by its module and function: the launcher hands it to the parties without
    importing that module (and with it torch and CrypTen, about 4 CPU s); the party imports it (the
    fork server already has).

    Examples
    --------
    >>> JobRef("secure_auc.mpc.party", "role_name")(0, 2)
    'server (rank 0)'
    """
    module: str
    name: str

    def __call__(self, *args, **kwargs):
        import importlib

        return getattr(importlib.import_module(self.module), self.name)(*args, **kwargs)


def _log_to_stderr(level: int | None) -> None:
    """In a spawned party: send the package's log records to stderr, as the parent does."""
    if level is None:
        return
    logger = logging.getLogger("secure_auc")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False  # CrypTen's module-level logging calls give the root logger a handler too


def _parent_log_level() -> int | None:
    logger = logging.getLogger("secure_auc")
    return logger.getEffectiveLevel() if logger.handlers else None


def _party_process(rank, parties, addr, port, provider, timeout, job, args, after_dealer, record, results,
                   log_level=None, identity=None, roster=None, launcher=None, run_token=None, beats=None,
                   threads=None):
    """Body of one party's process: ``job(rank, *args)``, or the dealer's service; with
    ``record``, also every buffer the process receives (:func:`.audit.record_received`)."""
    try:
        _die_with_parent(launcher)
        _start_heartbeat(beats, rank)
        _log_to_stderr(log_level)
        from .audit import record_received
        from .comm.roster import identity_from_bytes
        from .roles.world import WorldPlan, take_part

        plan = WorldPlan(rank=rank, parties=parties, address=addr, port=port, provider=provider, timeout=timeout,
                         identity=None if identity is None else identity_from_bytes(identity), roster=roster,
                         insecure=roster is None, on_ready=lambda: _mark_ready(beats, rank), run_token=run_token,
                         threads=threads)
        received: list = []
        result = take_part(plan, lambda: job(rank, *args), on_joined=lambda: _mark_joined(beats, rank),
                           during=(lambda: record_received(received)) if record else None)
        if plan.dealer:  # the dealer served correlated randomness until told to stop
            result = after_dealer() if after_dealer is not None else None
        results.put(("done", rank, result, received if record else None))
    except KeyboardInterrupt:
        os._exit(130)
    except BaseException as exc:  # noqa: BLE001 - reported, then exit non-zero
        _report_and_exit(results, rank, exc)


def _report_and_exit(results, key: int, exc: BaseException) -> None:
    """Send the launcher one line about ``exc`` (and the traceback), flush it, exit with 1."""
    from .comm.runtime import explain

    results.put(("error", key, explain(exc), traceback.format_exc(), type(exc).__name__))
    results.close()
    results.join_thread()  # flush the report before leaving
    os._exit(1)


def _host_process(h, job, args, results, record, log_level=None, launcher=None, beats=None, slot=None):
    """Body of a client host's process (an input party of the helpers layout): no
    CrypTen world, only links to the computing parties; ``job(h, *args)``.  Its key
    among the results is ``-(h + 1)``."""
    key = -(h + 1)
    try:
        import contextlib

        _die_with_parent(launcher)
        _start_heartbeat(beats, slot)
        _log_to_stderr(log_level)
        from .audit import forbid_crypten_randomness, record_received

        _mark_ready(beats, slot)
        received: list = []
        with forbid_crypten_randomness(), (record_received(received) if record else contextlib.nullcontext()):
            result = job(h, *args)
        results.put(("done", key, result, received if record else None))
    except KeyboardInterrupt:
        os._exit(130)
    except BaseException as exc:  # noqa: BLE001 - reported, then exit non-zero
        _report_and_exit(results, key, exc)


HEARTBEAT = 0.5  # seconds between a party's signs of life to the launcher


def _start_heartbeat(beats, rank: int) -> None:
    """A sign of life to the launcher every HEARTBEAT seconds, from a thread of its own, so that
    a party that stops (SIGSTOP, a debugger, a frozen host process) is named by the launcher.
    Each party writes the time (CLOCK_MONOTONIC, system-wide on Linux) into its own slot of a
    shared array: no lock, so a party stopped at any instant cannot hold up another's beats
    (a shared queue's lock could)."""
    import threading

    if beats is None:
        return

    def beat():
        while True:
            beats[rank] = time.monotonic()
            time.sleep(HEARTBEAT)

    threading.Thread(target=beat, name="secure-auc-heartbeat", daemon=True).start()


def _slot(key: int, parties: int) -> int:
    """A process's place in the heartbeat array: its rank, then the client hosts (keys -1, -2, ...)."""
    return key if key >= 0 else parties + (-key)


def _read_beats(beats, keys, parties: int, last_seen: dict, ready: set) -> None:
    """Copy the processes' last signs of life and readiness out of the shared array."""
    half = len(beats) // 2
    for r in keys:
        i = _slot(r, parties)
        if beats[i] > 0:
            last_seen[r] = beats[i]
        if beats[half + i] > 0:
            ready.add(r)


def _mark_ready(beats, rank: int) -> None:
    """This party has its modules loaded and now waits for the others: its slot in the
    second half of ``beats`` (see :func:`_start_heartbeat`)."""
    if beats is not None:
        beats[len(beats) // 2 + rank] = 1.0


def _mark_joined(beats, rank: int) -> None:
    """This party met every other one (rendezvous and links done): from now on the run may
    compute, and release, something (:func:`_all_joined`)."""
    if beats is not None:
        beats[len(beats) // 2 + rank] = 2.0


def _all_joined(beats, ranks) -> bool:
    """Whether every computing party in ``ranks`` got past the rendezvous (:func:`_mark_joined`):
    until then nothing was computed, so nothing was released."""
    half = len(beats) // 2
    return all(beats[half + r] >= 2.0 for r in ranks)


def _process_state(pid: int) -> str | None:
    """The kernel's one-letter state of ``pid`` (Linux ``/proc``; None elsewhere): T = stopped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _silent_parties(procs: dict, last_seen: dict, started: float, quiet_for: float, describe) -> list[str]:
    """The parties, still running, that are stopped or have sent no sign of life for ``quiet_for``
    seconds, each named with its rank and role and how long it has been silent."""
    now = time.monotonic()
    out = []
    for r, p in sorted(procs.items()):
        if p.exitcode is not None:
            continue
        if r not in last_seen:  # still importing its modules (a minute on a busy machine): named, if it
            continue            # never gets further, when the others give up waiting at the rendezvous
        silent, limit, what = now - last_seen[r], quiet_for, "no sign of life"
        if silent > limit:
            stopped = " (the process is stopped: SIGSTOP or a debugger)" if _process_state(p.pid) == "T" else ""
            out.append(f"{describe(r)} stopped answering: {what} for {silent:.0f} s{stopped}")
    return out


_CONSEQUENTIAL = ("another party disconnected", "no answer from another party", "not all")


def _consequential(text: str) -> bool:
    """Whether an error is only the consequence of another party's failure."""
    return text.startswith(_CONSEQUENTIAL) or "parties joined at" in text or " disconnected (" in text


def errors_are_consequential(errors: dict) -> bool:
    return all(_consequential(m[2]) for m in errors.values())


def _failure(results, errors: dict, dead: list, procs: dict, k: int, last_seen: dict | None = None,
             started: float | None = None, ready: set | None = None, beats=None, describe=None) -> MPCError:
    """Collect the reports that arrive within a moment and name the root cause.

    When one party fails, the others fail too ("another party disconnected", "no
    answer", "not all parties joined"); the error to show is the one that is not such
    a consequence, else a party that died without a report, else a party that is
    stopped or silent (no heartbeat) while the others gave up waiting for it.
    """
    if describe is None:
        def describe(r):
            return role_name(r, k)
    last_seen = {} if last_seen is None else last_seen
    ready = set(procs) if ready is None else ready
    started = time.monotonic() if started is None else started
    deadline = time.monotonic() + (0.5 if errors and not errors_are_consequential(errors) else 2.0)
    while time.monotonic() < deadline:
        try:
            msg = results.get(timeout=0.1)
        except queue_mod.Empty:
            continue
        if msg[0] == "error":
            errors.setdefault(msg[1], msg)
        elif msg[0] in ("alive", "ready"):
            last_seen[msg[1]] = time.monotonic()
            if msg[0] == "ready":
                ready.add(msg[1])
    if os.environ.get("SECURE_AUC_DEBUG"):
        for r, p in procs.items():
            log.debug("%s: exit code %s; %s", describe(r), p.exitcode, errors[r][2] if r in errors else "no report")
    causes = [m for m in errors.values() if not _consequential(m[2])]
    # a process that died without reporting (a signal, an abort in native code) is the cause
    silent = sorted((r for r, p in procs.items() if r not in errors and p.exitcode not in (None, 0)),
                    key=lambda r: (procs[r].exitcode != -signal.SIGKILL, procs[r].exitcode >= 0))  # signals first
    if beats is not None:
        _read_beats(beats, procs, k + 1, last_seen, ready)
    if not causes and not silent:
        quiet = _silent_parties({r: p for r, p in procs.items() if r not in errors}, last_seen, started,
                                3 * HEARTBEAT + 1.0, describe)
        if quiet:
            return MPCError("; ".join(quiet) + "; the other parties gave up waiting for it")
        late = [r for r, p in sorted(procs.items()) if r not in ready and r not in errors and p.exitcode is None]
        if late and any("parties joined at" in m[2] for m in errors.values()):
            names = ", ".join(describe(r) for r in late)
            return MPCError(f"{names} never reached the rendezvous within the timeout (still starting up: "
                            "on a busy machine, raise --timeout)")
    # SIGKILL comes from outside (the OOM killer, kill -9), never as a consequence of a peer's failure,
    # while the others' reports may be only their waits for it running out
    if any(procs[r].exitcode == -signal.SIGKILL for r in silent):
        causes = []
    if errors and (causes or not silent):
        _, r, text, tb = (causes or list(errors.values()))[0][:4]
        if os.environ.get("SECURE_AUC_DEBUG"):
            log.debug("%s", tb)
        err = MPCError(f"{describe(r)} failed: {text}")
        err.details = tb
        return err
    r = (silent or dead)[0]
    code = procs[r].exitcode
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"died with exit code {code}"
    return MPCError(f"{describe(r)} {how}")


def rank_step_estimate(m: int, parties: int, method: str) -> float:
    """Rough seconds of the rank step on the 2-core reference machine (docs/benchmarks.md):
    the sort's own estimate (:meth:`.sort.registry.RankSort.seconds`)."""
    from .sort.registry import rank_sort

    return rank_sort(method).seconds(m, parties)


def announce(m: int, parties: int, method: str) -> None:
    """Tell the user up front what the rank step will cost."""
    estimate = rank_step_estimate(m, parties, method)
    when = f"{estimate / 60:.1f} min" if estimate >= 90 else f"{max(1, round(estimate))} s"
    log.info("[secure-auc] MPC rank step: %s sort of %s scores among %d parties; expect roughly %s "
             "(plus a few seconds to start the parties, more on a busy machine)", method, f"{m:,}", parties, when)


def cost_summary(done: dict, config: PartyConfig, seconds: float) -> dict:
    """The run's cost: seconds, and per computing party (and client host) bytes and rounds."""
    out = {"mpc_seconds": round(seconds, 3), "rank_step_seconds": round(done[0].rank_seconds, 3),
           "provider": config.provider, "sort": config.sort,
           "layout": "helpers" if config.computing else "clients"}
    computing = range(config.computing or config.clients + 1)
    if config.computing:
        hosts = sorted((r for r in done if r < 0), reverse=True)
        out |= {"computing_parties": config.computing, "client_hosts": len(hosts)}
    out["bytes_per_party"] = [done[r].bytes_sent for r in computing]
    if config.computing:
        out["bytes_from_clients_per_party"] = [done[r].client_bytes for r in computing]
    out["rounds_per_party"] = [done[r].rounds for r in computing]
    if config.computing:
        out["bytes_per_host"] = [done[r]["bytes"] for r in hosts]
    return out


def launch_local(clients: list[ClientData], config: PartyConfig, *, timeout: float = 60.0,
                 port: int | None = None, noise_keys: list[int] | None = None,
                 received: dict | None = None, record_ranks=None, hosts: int | None = None,
                 keep_ranks: bool = False, threads: int | None = None) -> dict:
    """Start every party as a local process; return each computing party's result by rank.

    Each process gets only its own arguments: client k its data and
    ``noise_keys[k]``, the server and the dealer neither.  With a ``received``
    dict, every process (the dealer included) records each buffer it receives
    (:func:`.audit.record_received`) into ``received[rank]`` (only the ranks in
    ``record_ranks``, if given).

    Helpers layout (``config.computing`` = w > 0): the w computing parties and the
    dealer are processes of the computing world, and the clients are split into
    ``hosts`` client-host processes (default 1; contiguous groups), each connecting
    to every computing party (:mod:`.input_parties`).  Client host h's result
    (:class:`.input_hosts.HostResult`) is under key ``-(h + 1)``; with
    ``keep_ranks`` it holds its clients' 2 x mid-ranks.  ``threads``: each computing
    party's threads for its local work (default: the cores it may use)."""
    k = len(clients)
    if noise_keys is not None and len(noise_keys) != k:
        raise InputError(f"{len(noise_keys)} noise keys for {k} clients")
    keys = noise_keys if noise_keys is not None else [None] * k
    if config.computing:
        return _launch_helpers(clients, config, keys, timeout=timeout, port=port, received=received,
                               record_ranks=record_ranks, hosts=hosts, keep_ranks=keep_ranks, threads=threads)
    per_rank = {0: (config, None)} | {r: (config, clients[r - 1], keys[r - 1]) for r in range(1, k + 1)}
    done = spawn_parties(run_party, per_rank, k + 1, provider=config.provider, timeout=timeout, port=port,
                         received=received, record_ranks=record_ranks, threads=threads)
    return {r: res for r, res in done.items() if r <= k}  # the dealer returns nothing


def _launch_helpers(clients, config, keys, *, timeout, port, received, record_ranks, hosts, keep_ranks,
                    threads=None) -> dict:
    from .input_parties import computing_job, host_job

    plan = HelpersPlan.draw(config.computing, len(clients), hosts, config.provider)
    per_rank = {r: (config, *plan.rank_args(r), timeout, plan.names) for r in range(plan.computing)}
    per_host = [(clients[a:b], a, keys[a:b], config, *plan.host_args(h), timeout, keep_ranks)
                for h, (a, b) in enumerate(plan.groups)]
    done = plan.spawn(computing_job, per_rank, host_job, per_host, provider=config.provider, timeout=timeout,
                      port=port, received=received, record_ranks=record_ranks, threads=threads)
    return {r: res for r, res in done.items() if r < plan.computing}


class HelpersPlan:
    """The processes of one local run of the helpers layout, drawn once for every launcher of it
    (:func:`launch_local`, :class:`.session.LocalSession`, :func:`.selection.run_selection_local`).

    ``computing`` computing parties (rank 0 the server) and the dealer with the TTP provider,
    and ``len(groups)`` client hosts, host h holding clients ``groups[h][0] .. groups[h][1] - 1``
    (contiguous blocks); an ephemeral identity key for every process and the roster of their
    public keys (:func:`.comm.roster.ephemeral_helpers_roster`); each computing party's listener
    on a port the OS gives, published on a board (:class:`.comm.inlinks.PortBoard`).

    Examples
    --------
    >>> plan = HelpersPlan.draw(3, clients=5, hosts=2, provider="ttp")
    >>> plan.groups, plan.names
    ([(0, 3), (3, 5)], ['client host 0 (clients 0..2)', 'client host 1 (clients 3..4)'])
    >>> plan.describe(0), plan.describe(-2)
    ('server (rank 0)', 'client host 1 (clients 3..4)')
    """

    def __init__(self, computing: int, groups: list[tuple[int, int]], provider: str):
        from .comm.inlinks import PortBoard
        from .comm.roster import describe_host, ephemeral_helpers_roster

        self.computing, self.groups = computing, groups
        self.roster, self.world_keys, self.host_keys = ephemeral_helpers_roster(computing - 1, provider == "ttp",
                                                                                len(groups))
        self.board = PortBoard(computing)  # each computing party's listener publishes the port the OS gave it
        self.names = [describe_host(h, range(a, b)) for h, (a, b) in enumerate(groups)]

    @classmethod
    def draw(cls, computing: int, clients: int, hosts: int | None, provider: str) -> "HelpersPlan":
        """``clients`` clients split into ``hosts`` client hosts (default 1, at most one per client)."""
        import numpy as np

        hosts = max(1, min(int(hosts or 1), clients))
        groups = [(int(g[0]), int(g[-1]) + 1) for g in np.array_split(np.arange(clients), hosts)]
        return cls(computing, groups, provider)

    def rank_args(self, r: int) -> tuple:
        """Computing party ``r``'s: where it listens for the hosts, its identity key (raw bytes) and
        the hosts' public keys."""
        from .comm.roster import identity_bytes

        return (_LOCAL, self.board), identity_bytes(self.world_keys[r]), list(self.roster.clients)

    def host_args(self, h: int) -> tuple:
        """Client host ``h``'s: every computing party's address, port board and public key, and its
        own identity key (raw bytes)."""
        from .comm.roster import identity_bytes

        parties = [(_LOCAL, self.board, self.roster.key(r)) for r in range(self.computing)]
        return parties, identity_bytes(self.host_keys[h])

    def describe(self, key: int) -> str:
        """A process as errors name it: a computing party by rank, client host h by key ``-(h + 1)``."""
        from .comm.roster import describe_helpers_rank

        return self.names[-key - 1] if key < 0 else describe_helpers_rank(key, self.computing - 1)

    def spawn(self, job, per_rank: dict, host_job, per_host: list, *, provider: str, timeout: float,
              port: int | None = None, received: dict | None = None, record_ranks=None, stop=None,
              threads: int | None = None) -> dict:
        """:func:`spawn_parties` with this plan's identities and names: ``job(rank, *per_rank[rank])``
        at each computing party, ``host_job(h, *per_host[h])`` at each client host."""
        return spawn_parties(job, per_rank, self.computing, provider=provider, timeout=timeout, port=port,
                             received=received, record_ranks=record_ranks, identities=(self.roster, self.world_keys),
                             describe=self.describe, host_job=host_job, per_host=per_host, stop=stop,
                             threads=threads)


def run_parties(job, per_rank: dict[int, tuple], parties: int, *, provider: str = "ttp", timeout: float = 60.0,
                port: int | None = None, deadline: float | None = None, after_dealer=None,
                threads: int | None = None) -> dict:
    """Run ``job(rank, *per_rank[rank])`` in one local process per computing party, CrypTen
    initialised among them, plus the dealer with ``provider="ttp"``: the public launcher
    (scripts, benchmarks, examples).

    Each process gets only its own arguments; every message between the parties travels
    over authenticated, encrypted links (ephemeral keys drawn by the launcher); CrypTen's
    own random generators are refused in every process.

    Parameters
    ----------
    job : callable
        ``job(rank, *args)``, a module-level function (pickled for the process); a job
        defined in the caller's script needs the script's ``if __name__ == "__main__":``
        guard, as with :mod:`multiprocessing`.
    per_rank : dict of int to tuple
        Party ``rank``'s arguments (ranks 0 .. parties - 1; a missing rank gets none).
    parties : int
        The number of computing parties.
    provider : {"ttp", "tfp"}, default "ttp"
        The source of correlated randomness: the dealer (an extra process) or rank 0.
    timeout : float, default 60.0
        Seconds that bound each wait of a party for another.
    port : int, optional
        The rendezvous port (and the next one); default a free one drawn here.
    deadline : float, optional
        Seconds for the whole run.
    after_dealer : callable, optional
        The dealer's result: called in the dealer's process once the run has ended.
    threads : int, optional
        Each process's threads for its local work (the compiled kernels');
        default the cores this process may use, divided among the processes.

    Returns
    -------
    dict of int to object
        Each party's ``job`` result by rank (the dealer's under rank ``parties``).

    Raises
    ------
    secure_auc.MPCError
        Naming the party at the root of a failure (an exception, a crash, a signal,
        a deadline); every process is stopped in any case.

    Examples
    --------
    Not run here (it starts processes)::

        from secure_auc.mpc.launch import run_parties

        from secure_auc.mpc.comm import backend

        def job(rank, x):                # a module-level function, run in each computing party
            return backend.world_size() * x          # CrypTen's world joined: 3 parties here

        done = run_parties(job, {r: (r,) for r in range(3)}, 3)   # {0: 0, 1: 3, 2: 6, 3: None}
    """
    return spawn_parties(job, per_rank, parties, provider=provider, timeout=timeout, port=port, deadline=deadline,
                         after_dealer=after_dealer, threads=threads)


def spawn_parties(job, per_rank: dict[int, tuple], parties: int, *, provider: str = "ttp",
                  timeout: float = 60.0, port: int | None = None, deadline: float | None = None,
                  after_dealer=None, received: dict | None = None, record_ranks=None,
                  insecure_links: bool = False, identities=None, describe=None,
                  host_job=None, per_host: list | None = None, stop=None,
                  threads: int | None = None) -> dict:
    """Run ``job(rank, *per_rank[rank])`` in one spawned process per computing party (ranks
    0..parties-1, each receiving only its own arguments), plus CrypTen's dealer (rank
    ``parties``) with ``provider="ttp"``; return the results by rank (the dealer's:
    ``after_dealer()``, or None).

    ``timeout`` bounds each wait of a party for another; ``deadline`` (seconds, optional)
    the whole run.  With a ``received`` dict, each process records every buffer it
    receives into ``received[rank]`` (:func:`.audit.record_received`; only the ranks
    in ``record_ranks``, if given).  In every
    process CrypTen's own random generators are refused
    (:func:`.audit.forbid_crypten_randomness`).  Raises :class:`MPCError` naming
    the party at the root of a failure (an exception, a crash, a signal); every
    process is stopped in any case.

    Links: the launcher draws an ephemeral identity key per process and hands each
    its own key and the roster of all public keys (:mod:`.comm.roster`); every
    message then travels encrypted and authenticated (:mod:`.comm.secure`).
    ``insecure_links=True`` (tests of the unprotected transport only) skips that;
    ``identities=(roster, keys)`` gives the roster and the keys by rank instead.

    Client hosts (the helpers layout): ``host_job(h, *per_host[h])`` runs in one more
    process per host, outside the computing world; its result is under key
    ``-(h + 1)``.  ``describe(key)`` names a process in errors.

    ``stop`` (a :class:`threading.Event`, for a launcher running in a thread of its own): once
    set, every process is stopped within about a second, mid-step, and :class:`MPCError` is raised.
    In the calling thread a KeyboardInterrupt (Ctrl-C, or SIGTERM/SIGHUP turned into one) stops
    every process the same way; it carries ``started``: whether the server's result, and so the
    opened aggregate, had reached the launcher.

    ``threads``: each
    computing party's threads for its local work (:func:`.kernels.set_threads`; default:
    the cores this process may use divided among the processes started, at least 1, as
    they all run on this machine).
    """
    if provider not in ("tfp", "ttp"):
        raise InputError(f"provider must be 'tfp' or 'ttp', got {provider!r}")
    if not timeout > 0:
        raise InputError(f"timeout must be > 0 seconds, got {timeout}")
    run = functools.partial(_spawn, job, per_rank, parties, provider=provider, timeout=timeout, deadline=deadline,
                            after_dealer=after_dealer, received=received, record_ranks=record_ranks,
                            insecure_links=insecure_links, identities=identities, describe=describe,
                            host_job=host_job, per_host=per_host, stop=stop)
    from .threads import check_threads, default_threads

    if context().get_start_method() != "forkserver":
        from .kernels import warm_up

        warm_up()  # compiled once here, into the user's cache, before the spawned parties load them
    # otherwise the fork server loads them (compiling them first where the cache lacks them) before it
    # forks the first party: one load for every party, and a Ctrl-C meanwhile kills it (interrupt_starts)
    if threads is not None:
        check_threads(threads)
    else:  # every process of a local run shares this machine's cores
        threads = max(1, default_threads() // (parties + (provider == "ttp") + len(per_host or [])))
    run = functools.partial(run, threads=threads)
    if port is not None:
        if port >= 65535:
            raise InputError(f"port {port}: a local run uses --port and the next one; choose one below 65535")
        check_port_free(_LOCAL, port)
        check_port_free(_LOCAL, port + 1)
        return run(port=port, retry=False)
    for attempt in range(3):  # a port this launcher drew was taken before the parties listened: draw again
        try:
            return run(port=free_port(_LOCAL), retry=True)
        except _PortTaken as exc:
            log.info("%s; starting the parties again on other ports", exc)
    err = MPCError("three ports drawn in a row were taken by other processes before the parties listened on "
                   "them; give a free one with --port")
    err.started = False
    raise err


class _PortTaken(Exception):
    """The launcher's own port choice lost a race with another process before anything was computed."""


def _spawn(job, per_rank: dict[int, tuple], parties: int, *, provider: str, timeout: float, port: int,
           retry: bool, deadline, after_dealer, received, record_ranks, insecure_links, identities, describe,
           host_job, per_host, stop=None, threads=None) -> dict:
    """One start of :func:`spawn_parties` on ``port``; ``retry``: a port conflict at the start raises
    :class:`_PortTaken` (the caller draws another port) instead of :class:`MPCError`."""
    k = parties - 1
    addr = _LOCAL
    from .comm.roster import ephemeral_roster, identity_bytes

    roster, keys = identities if identities is not None else ephemeral_roster(k, provider == "ttp")
    if describe is None:
        def describe(r):
            return role_name(r, k)
    import secrets

    run_token = secrets.token_hex(16)  # this run's claim on the port (comm.runtime._claim_port)
    ctx = context()
    results = ctx.Queue()
    # per rank: the last sign of life (time.monotonic), then whether it reached the rendezvous
    beats = ctx.Array("d", 2 * (parties + 1 + len(per_host or [])), lock=False)
    ranks = list(range(parties)) + ([parties] if provider == "ttp" else [])
    procs = {}
    host_keys: list = []
    main = "+main" if any(getattr(f, "__module__", None) == "__main__" for f in (job, host_job, after_dealer)) else ""
    with starting():
        if stop is not None and stop.is_set():  # asked before the first start (interrupt_starts covers the rest)
            raise MPCError("the run was stopped")
        ensure_running(ctx)
        # the client hosts first: their start messages (the clients' data) are the long ones, and a stop
        # while one is being written would leave the host reading a cut-off message
        for h, args in enumerate(per_host or []):
            p = ctx.Process(target=_started, name=f"{PARTY}host-{h}{main}",
                            args=(_Stdio(), _host_process, h, host_job, args, results, received is not None and
                                  (record_ranks is None or -(h + 1) in record_ranks), _parent_log_level(),
                                  os.getpid(), beats, _slot(-(h + 1), parties)), daemon=True)
            p.start()
            procs[-(h + 1)] = p
            host_keys.append(-(h + 1))
        for r in ranks:
            p = ctx.Process(target=_started, name=f"{PARTY}party-{r}{main}",
                            args=(_Stdio(), _party_process, r, parties, addr, port, provider, timeout, job, per_rank.get(r, ()),
                                  after_dealer, received is not None and (record_ranks is None or r in record_ranks),
                                  results, _parent_log_level(),
                                  None if insecure_links else identity_bytes(keys[r]),
                                  None if insecure_links else roster, os.getpid(), run_token, beats, threads),
                            daemon=True)
            p.start()
            procs[r] = p
        ranks += host_keys
    done: dict = {}
    started = time.monotonic()
    last_seen: dict = {}
    ready: set = set()
    end = None if deadline is None else started + deadline
    next_check = started
    try:
        while len(done) < len(ranks):
            try:
                msg = results.get(timeout=0.2)
            except queue_mod.Empty:
                msg = None
            if msg is not None and msg[0] in ("alive", "ready"):
                last_seen[msg[1]] = time.monotonic()
                if msg[0] == "ready":
                    ready.add(msg[1])
            elif msg is not None and msg[0] == "error":
                if retry and msg[4:] == ("PortBusyError",):
                    raise _PortTaken(f"{describe(msg[1])}: {msg[2]}")
                raise _failure(results, {msg[1]: msg}, [], procs, k, last_seen, started, ready, beats,
                               describe) from None
            elif msg is not None:
                done[msg[1]] = msg[2]
                if received is not None and msg[3] is not None:
                    received[msg[1]] = msg[3]
            if stop is not None and stop.is_set():
                raise MPCError("the run was stopped") from None
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + 0.2
            _read_beats(beats, ranks, parties, last_seen, ready)
            dead = [r for r, p in procs.items() if r not in done and p.exitcode not in (None, 0)]
            if dead:
                raise _failure(results, {}, dead, procs, k, last_seen, started, ready, beats, describe) from None
            # a party that stopped, or never started, for as long as the others wait for it: named now
            quiet = _silent_parties({r: p for r, p in procs.items() if r not in done}, last_seen, started, timeout,
                                    describe)
            if quiet:
                raise MPCError("; ".join(quiet)) from None
            if end is not None and time.monotonic() > end:
                late = ", ".join(describe(r) for r in ranks if r not in done)
                raise MPCError(f"{late} did not finish within {deadline:g} s") from None
    except MPCError as err:  # nothing was computed unless every computing party got past the rendezvous
        err.started = _all_joined(beats, [r for r in procs if r >= 0])
        raise
    except KeyboardInterrupt as stop_asked:  # released only if the server's result (the opened aggregate) came
        stop_asked.started = 0 in done
        raise
    finally:
        for p in procs.values():
            if p.is_alive():
                p.terminate()
                with contextlib.suppress(OSError):
                    os.kill(p.pid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
        grace = time.monotonic() + 1.0  # then SIGKILL: a process still starting holds SIGTERM back
        for p in procs.values():
            p.join(timeout=max(0.0, grace - time.monotonic()))
        for p in procs.values():
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    return done
