"""What every link shares: the error a failed link raises, and identity keys' raw bytes.

Identities.  Every party has a long-term Ed25519 identity key; a roster
(:mod:`.roster`) lists the public key of every role.  Nothing else is trusted:
torch's rendezvous lets any process that reaches the master port take a rank,
so every party checks every peer against the roster before any data flows, in
the TLS handshake of each link (:mod:`.tls`).
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization

__all__ = ["ChannelError", "public_bytes"]


class ChannelError(RuntimeError):
    """A link failed: authentication of a peer or of a message."""


def public_bytes(key) -> bytes:
    """The raw 32 bytes of ``key``'s public key."""
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
