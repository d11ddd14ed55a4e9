r"""Encrypted, authenticated links between parties: the handshake and the record layer.

Identities.  Every party has a long-term Ed25519 identity key; a roster
(:mod:`.roster`) lists the public key of every role.  Nothing else is trusted:
torch's rendezvous lets any process that reaches the master port take a rank,
so every party checks every peer against the roster before any data flows.

Handshake (every pair of parties :math:`i < j`, over the unencrypted process
group, all pairs at once):

1. each party draws an ephemeral X25519 key pair and sends its public key
   :math:`E_i` to every peer;
2. each party signs, with its identity key, the transcript
   ``"secure-auc link v1" || i || j || E_i || E_j`` for each peer :math:`j`
   (its own rank first) and sends the signature;
3. each party verifies its peer's signature with the roster's key for the
   peer's rank.  A peer whose key is not the roster's for that rank (a foreign
   process, or one claiming another's rank) fails here, and the run stops
   with an error naming that rank.

Key schedule: :math:`Z = \mathrm{X25519}(e_i, E_j)`, and for each direction
:math:`a \to b` a 128-bit AES-GCM key
``HKDF-SHA256(Z, salt = E_lo || E_hi, info = "secure-auc link key" || a || b)``
(lo/hi = the lower and higher rank of the pair).  Keys are fresh per session
(ephemeral) and per direction; forward secrecy comes from the ephemeral keys.

Record layer (:class:`Link`).  A message is one logical send on one channel:
(process group, tag), between two ranks.  Every message carries a sequence
number counted per channel and direction by both ends (the mesh of
:mod:`.transport` delivers each channel in order).  A message of :math:`n` bytes is sealed in chunks of
:data:`CHUNK` bytes, each with AES-128-GCM under the direction's key, nonce =
channel (4 bytes) || sequence (4 bytes) || chunk index (4 bytes) -- never
reused under one key -- and associated data = (source, destination, channel,
sequence, :math:`n`, chunk index, number of chunks).  A modified, replayed,
reordered, truncated or foreign message fails authentication and raises
:class:`ChannelError` naming the link.  Chunks keep the cipher's input in
cache: about 7 GB/s per core here against 1.1 GB/s for one 64 MB call.
"""

from __future__ import annotations

import struct

import numpy as np
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["ChannelError", "CHUNK", "TAG_OVERHEAD", "sealed_size", "Link", "transcript", "derive_keys",
           "ephemeral", "public_bytes"]

CHUNK = 1 << 20
TAG_OVERHEAD = 16
_AAD = struct.Struct("<iiIIQII")


class ChannelError(RuntimeError):
    """A link failed: authentication of a peer or of a message."""


def sealed_size(n: int) -> int:
    """Bytes on the wire for an ``n``-byte message."""
    chunks = max(1, -(-n // CHUNK))
    return n + TAG_OVERHEAD * chunks


def public_bytes(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def ephemeral() -> tuple[X25519PrivateKey, bytes]:
    key = X25519PrivateKey.generate()
    return key, public_bytes(key)


def transcript(signer: int, peer: int, e_signer: bytes, e_peer: bytes) -> bytes:
    return b"secure-auc link v1" + struct.pack("<ii", signer, peer) + e_signer + e_peer


def verify(identity: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(identity).verify(signature, message)
        return True
    except (InvalidSignature, ValueError):
        return False


def sign(identity: Ed25519PrivateKey, message: bytes) -> bytes:
    return identity.sign(message)


def derive_keys(me: int, peer: int, secret: X25519PrivateKey, e_me: bytes, e_peer: bytes) -> tuple[bytes, bytes]:
    """(key for me -> peer, key for peer -> me)."""
    z = secret.exchange(X25519PublicKey.from_public_bytes(e_peer))
    salt = e_me + e_peer if me < peer else e_peer + e_me

    def key(a: int, b: int) -> bytes:
        return HKDF(algorithm=hashes.SHA256(), length=16, salt=salt,
                    info=b"secure-auc link key" + struct.pack("<ii", a, b)).derive(z)

    return key(me, peer), key(peer, me)


class Link:
    """One party's end of its link with one peer: both directions' keys and sequence numbers."""

    def __init__(self, me: int, peer: int, send_key: bytes, recv_key: bytes, describe):
        self.me, self.peer = me, peer
        self._send, self._recv = AESGCM(send_key), AESGCM(recv_key)
        self._send_seq: dict[int, int] = {}
        self._recv_seq: dict[int, int] = {}
        self.describe = describe  # rank -> "client 0 (rank 1)"

    def next_send(self, channel: int) -> int:
        seq = self._send_seq.get(channel, 0)
        self._send_seq[channel] = seq + 1
        return seq

    def next_recv(self, channel: int) -> int:
        seq = self._recv_seq.get(channel, 0)
        self._recv_seq[channel] = seq + 1
        return seq

    def seal(self, channel: int, seq: int, data: np.ndarray) -> np.ndarray:
        """The sealed form (uint8) of the bytes ``data`` (a uint8 view) for message ``seq``."""
        n = data.size
        chunks = max(1, -(-n // CHUNK))
        out = np.empty(n + TAG_OVERHEAD * chunks, dtype=np.uint8)
        src = memoryview(data)
        dst = memoryview(out)
        for c in range(chunks):
            lo, hi = c * CHUNK, min(n, (c + 1) * CHUNK)
            o = lo + TAG_OVERHEAD * c
            nonce = struct.pack("<III", channel, seq, c)
            aad = _AAD.pack(self.me, self.peer, channel, seq, n, c, chunks)
            self._send.encrypt_into(nonce, src[lo:hi], aad, dst[o : o + (hi - lo) + TAG_OVERHEAD])
        return out

    def open(self, channel: int, seq: int, sealed: np.ndarray, out: np.ndarray) -> None:
        """Authenticate and decrypt message ``seq`` into ``out`` (a uint8 view of n bytes)."""
        n = out.size
        chunks = max(1, -(-n // CHUNK))
        src = memoryview(sealed)
        dst = memoryview(out)
        try:
            if sealed.size != n + TAG_OVERHEAD * chunks:
                raise InvalidTag()
            for c in range(chunks):
                lo, hi = c * CHUNK, min(n, (c + 1) * CHUNK)
                o = lo + TAG_OVERHEAD * c
                nonce = struct.pack("<III", channel, seq, c)
                aad = _AAD.pack(self.peer, self.me, channel, seq, n, c, chunks)
                self._recv.decrypt_into(nonce, src[o : o + (hi - lo) + TAG_OVERHEAD], aad, dst[lo:hi])
        except InvalidTag:
            raise ChannelError(f"a message from {self.describe(self.peer)} to {self.describe(self.me)} failed "
                               "authentication (modified, replayed, reordered, truncated or foreign); "
                               "the run stops") from None
