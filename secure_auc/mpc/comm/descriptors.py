"""A party's room for connections: its limit of open files raised before it listens.

A flood of connections at a listener during the start-up (the rendezvous, the link
listeners, the services' ports) holds one descriptor per connection until the handshake
deadline closes it; with the common default of 1,024 open files a flood could use them up
and make the party's own links fail.  Each party therefore raises its soft limit to the
most the system allows it before it listens.
"""

from __future__ import annotations

__all__ = ["more_descriptors"]


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
