r"""Listeners that no one may reach any more: gloo's, once the TLS links stand.

torch's gloo backend opens a listening socket per process group (an ephemeral port
on the parties' interface) and keeps it for the process's life.  It authenticates
no one, and it keeps every connection that sent it a few bytes, even after the
peer closed it: a stranger that connects to it again and again uses up the
party's file descriptors, and once they are gone gloo's listener thread aborts
the whole process (``accept: Too many open files``), which the other parties
then report as a crash of that party.  After :func:`.secure.establish` nothing
travels over gloo (every message goes over the TLS links), so its listeners are
made deaf: each gets a socket filter that drops every packet (``SO_ATTACH_FILTER``
with ``ret 0``), SYNs included, so that no connection reaches gloo at all.  The
sockets stay open (gloo owns them and closes them when its process group ends).

Until then (the start-up: gloo's set-up and the TLS links, seconds) gloo's
listeners take anyone's connections, and each keeps a descriptor: so a party
first raises its own limit of open files to the most the system allows it
(:func:`more_descriptors`), which a flood during those seconds does not reach.

Examples
--------
>>> import socket
>>> def reaches(address):
...     try:
...         socket.create_connection(address, timeout=0.2).close()
...         return True
...     except OSError:
...         return False
>>> before = listening_sockets()
>>> s = socket.create_server(("127.0.0.1", 0))
>>> reaches(s.getsockname())
True
>>> deafen(set(listening_sockets()) - set(before))
1
>>> reaches(s.getsockname())
False
>>> s.close()
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct

__all__ = ["listening_sockets", "deafen", "more_descriptors"]

SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)
# one classic BPF instruction, BPF_RET | BPF_K with k = 0: accept no byte of any packet
_DROP_ALL = (ctypes.c_uint8 * 8).from_buffer_copy(struct.pack("=HBBI", 0x06, 0, 0, 0))


def listening_sockets() -> dict[int, int]:
    """The TCP sockets this process listens on: {socket inode: file descriptor} (Linux
    ``/proc``; empty elsewhere)."""
    inodes: dict[int, int] = {}
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return {}
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes[int(target[8:-1])] = int(fd)
    found = {}
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/self/net/{name}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[9]) in inodes:  # LISTEN
                found[int(fields[9])] = inodes[int(fields[9])]
    return found


def deafen(inodes) -> int:
    """Attach a drop-everything filter to each of this process's listening sockets whose
    inode is in ``inodes`` (see the module docstring); returns how many were deafened."""
    count = 0
    for inode, fd in listening_sockets().items():
        if inode not in inodes:
            continue
        sock = socket.socket(fileno=os.dup(fd))  # the same socket, through a descriptor of its own
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("@HP", 1, ctypes.addressof(_DROP_ALL)))
            count += 1
        except OSError:  # not Linux, or no socket filters: the listener stays as it is
            pass
        finally:
            sock.close()
    return count


def more_descriptors() -> int:
    """Raise this process's soft limit of open files (``RLIMIT_NOFILE``) to its hard limit;
    returns the limit now in force (0 where there is none to read).

    >>> more_descriptors() >= 256
    True
    """
    try:
        import resource
    except ImportError:  # not a POSIX system
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # some systems cap it lower (macOS: OPEN_MAX)
            pass
    return soft
