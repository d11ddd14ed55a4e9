"""The TCP sockets a process listens on, read as ``ss -ltnp`` reads them (``/proc/PID/net/tcp*``
and the process's file descriptors), and the documented table of the services' listeners.

The table (docs/deployment-security.md, "Listeners") says, per role, which configured address
each listener binds and which listeners have an ephemeral port; :func:`check_listeners`
compares it with what the running services hold.
"""

import ipaddress
import os

WILDCARDS = {"0.0.0.0", "::"}


def _address(hex_address: str) -> tuple[str, int]:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        ip = ipaddress.IPv4Address(raw[::-1])
    else:  # four little-endian 32-bit words
        ip = ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
        if ip.ipv4_mapped:
            ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def listening(pid: int) -> list[tuple[str, int]]:
    """The (address, port) of every TCP socket process ``pid`` listens on."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    found = []
    for name in ("tcp", "tcp6"):
        try:
            lines = open(f"/proc/{pid}/net/{name}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[9]) in inodes:  # LISTEN
                found.append(_address(fields[1]))
    return sorted(found)


def expected_listeners(config, role: str) -> tuple[set, bool]:
    """The documented table for ``role`` of a deployment ``config`` once every client joined:
    its fixed (address, port) listeners, and whether it has ephemeral ones (none: the links'
    listeners close once the links stand, and no process group listens).  The rendezvous
    listens only until every computing party has checked in, the clients' ports only until
    every client joined."""
    if role == "server":
        return {config.session_address}, False
    return set(), False  # a helper, the dealer and a client listen on nothing


def check_listeners(config, procs: dict, hosts: dict) -> dict:
    """Compare every role's listening sockets with the table; returns the table measured
    ({role: [(address, port), ...]}).  ``hosts[role]``: the address of that role's host."""
    measured = {}
    for role, proc in procs.items():
        held = listening(proc.pid)
        measured[role] = held
        assert not [a for a in held if a[0] in WILDCARDS], f"{role} listens on a wildcard address: {held}"
        fixed, ephemeral = expected_listeners(config, role)
        assert fixed <= set(held), f"{role}: expected {fixed} among {held}"
        started_only = {config.rendezvous, (config.rendezvous[0], config.rendezvous[1] + 1), *config.client_addresses}
        assert not started_only & set(held), f"{role} still listens on a start-up port: {held}"
        others = [a for a in held if a not in fixed]
        assert ephemeral or not others, f"{role} listens, and the table says it does not: {held}"
        assert all(a[0] == hosts[role] for a in others), f"{role}: a listener off its host's address: {held}"
    return measured
