"""Identity keys and the roster that binds every role to its public key.

A roster is a JSON file listing the Ed25519 public key (64 hex digits) of every
role::

    {
      "server":  "3b6a27bc...",
      "clients": ["8f0d...", "c41e..."],
      "dealer":  "77aa..."
    }

Ranks follow the protocol's layout.  When every client computes, the server
is rank 0, client k is rank k + 1, the dealer (with ``--provider ttp``) is
rank K + 1.  In the helpers layout the roster also has ``"helpers"``: the
computing parties are the server (rank 0) and helper i (rank i), the dealer
follows them, and ``"clients"`` lists the input parties' keys (client host
h), which only talk to the computing parties (:mod:`.inlinks`).  ``secure-auc
keygen FILE`` writes an identity key (PKCS#8 PEM, mode 0600) and prints its
public key for the roster.  Local runs use ephemeral keys and an in-memory
roster (:func:`ephemeral_roster`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ...validation import InputError
from .channel import public_bytes

__all__ = ["describe_rank", "describe_helpers_rank", "describe_host", "local_link_key", "Roster", "generate_identity", "write_identity", "read_identity", "ephemeral_roster", "ephemeral_helpers_roster",
           "identity_from_bytes", "identity_bytes"]


def describe_rank(rank: int, clients: int) -> str:
    """The role of ``rank`` among ``clients`` clients: "server (rank 0)", "client 0 (rank 1)", "dealer (rank K+1)"."""
    if rank == 0:
        return "server (rank 0)"
    if rank <= clients:
        return f"client {rank - 1} (rank {rank})"
    return f"dealer (rank {rank})"


def describe_helpers_rank(rank: int, helpers: int) -> str:
    """The role of ``rank`` in the helpers layout: "server (rank 0)", "helper 1 (rank 1)", "dealer (rank w)"."""
    if rank == 0:
        return "server (rank 0)"
    if rank <= helpers:
        return f"helper {rank} (rank {rank})"
    return f"dealer (rank {rank})"


def describe_host(h: int, clients: list[int] | range | None = None) -> str:
    """Client host ``h`` (an input party's process), with the clients it hosts."""
    if clients is None:
        return f"client host {h}"
    clients = list(clients)
    if len(clients) == 1:
        return f"client {clients[0]}"
    return f"client host {h} (clients {clients[0]}..{clients[-1]})"


def distinct_keys(server: bytes, clients, helpers, dealer, where: str = "") -> None:
    """Refuse two roles with one key, naming both (each role must be a party of its own)."""
    roles = [("server", server), *((f"clients[{i}]", k) for i, k in enumerate(clients)),
             *((f"helpers[{i}]", k) for i, k in enumerate(helpers or ()))] + ([("dealer", dealer)] if dealer else [])
    first: dict[bytes, str] = {}
    for role, k in roles:
        if k in first:
            raise InputError(f"{where}{first[k]} and {role} have the same key (each role needs its own)")
        first[k] = role


@dataclass(frozen=True)
class Roster:
    """Public identity keys (32 raw bytes each) of the server, the clients and the dealer;
    in the helpers layout also of the helpers (``helpers`` is not None), and then the
    clients are input parties, not ranks."""

    server: bytes
    clients: tuple
    dealer: bytes | None = None
    helpers: tuple | None = None

    def key(self, rank: int) -> bytes:
        if self.helpers is not None:
            w = 1 + len(self.helpers)
            if rank == 0:
                return self.server
            if 1 <= rank < w:
                return self.helpers[rank - 1]
            if rank == w and self.dealer is not None:
                return self.dealer
            raise InputError(f"the roster has no role for rank {rank} ({len(self.helpers)} helpers"
                             f"{', a dealer' if self.dealer is not None else ', no dealer'})")
        k = len(self.clients)
        if rank == 0:
            return self.server
        if 1 <= rank <= k:
            return self.clients[rank - 1]
        if rank == k + 1 and self.dealer is not None:
            return self.dealer
        raise InputError(f"the roster has no role for rank {rank} ({k} clients"
                         f"{', a dealer' if self.dealer is not None else ', no dealer'})")

    def members(self) -> tuple:
        """Every key of the roster (the server's, the helpers', the clients', the dealer's)."""
        return tuple(k for k in (self.server, *self.clients, *(self.helpers or ()), self.dealer) if k is not None)

    def describe(self, rank: int) -> str:
        """The role of ``rank``, for error messages: "client 0 (rank 1)"."""
        if self.helpers is not None:
            return describe_helpers_rank(rank, len(self.helpers))
        return describe_rank(rank, len(self.clients))

    @classmethod
    def from_ranks(cls, keys: list[bytes], clients: int, dealer: bool) -> "Roster":
        """The roster of public keys given in rank order (server, clients, then the dealer)."""
        return cls(keys[0], tuple(keys[1 : 1 + clients]), keys[1 + clients] if dealer else None)

    def ranks(self) -> int:
        """The number of processes in the computing world (the dealer included)."""
        computing = 1 + len(self.helpers) if self.helpers is not None else 1 + len(self.clients)
        return computing + (self.dealer is not None)

    @classmethod
    def load(cls, path) -> "Roster":
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read the roster {path}: {getattr(exc, 'strerror', None) or exc}") from None
        except json.JSONDecodeError as exc:
            raise InputError(f"roster {path}: not JSON ({exc.msg}, line {exc.lineno})") from None
        if not isinstance(data, dict) or not isinstance(data.get("clients"), list) or "server" not in data:
            raise InputError(f"roster {path}: expected an object with 'server', 'clients' (a list) and "
                             "optionally 'dealer'")

        def key(value, where):
            try:
                raw = bytes.fromhex(str(value))
            except ValueError:
                raw = b""
            if len(raw) != 32:
                raise InputError(f"roster {path}: {where}: expected an Ed25519 public key of 64 hex digits")
            return raw

        clients = tuple(key(v, f"clients[{i}]") for i, v in enumerate(data["clients"]))
        if not clients:
            raise InputError(f"roster {path}: no clients")
        helpers = None
        if data.get("helpers") is not None:
            if not isinstance(data["helpers"], list) or not 1 <= len(data["helpers"]) <= 2:
                raise InputError(f"roster {path}: 'helpers' must be a list of 1 or 2 keys")
            helpers = tuple(key(v, f"helpers[{i}]") for i, v in enumerate(data["helpers"]))
        dealer = key(data["dealer"], "dealer") if data.get("dealer") is not None else None
        server = key(data["server"], "server")
        distinct_keys(server, clients, helpers, dealer, f"roster {path}: ")
        return cls(server, clients, dealer, helpers)

    @classmethod
    def load_helpers(cls, path, *, helpers: int, clients: int, dealer: bool) -> "Roster":
        """A roster of the helpers layout, checked against the run: ``helpers`` helpers,
        ``clients`` clients, and a dealer key exactly when ``dealer``."""
        roster = cls.load(path)
        if roster.helpers is None or len(roster.helpers) != helpers:
            raise InputError(f"roster {path}: the helpers layout with {helpers + 1} computing parties needs "
                             f"'helpers' with {helpers} key(s)")
        if len(roster.clients) != clients:
            raise InputError(f"roster {path} lists {len(roster.clients)} clients; --clients is {clients}")
        if (roster.dealer is not None) != dealer:
            raise InputError(f"roster {path}: a dealer key is needed with --provider ttp, and only then")
        return roster

    def to_json(self) -> str:
        out = {"server": self.server.hex(), "clients": [c.hex() for c in self.clients]}
        if self.helpers is not None:
            out["helpers"] = [c.hex() for c in self.helpers]
        if self.dealer is not None:
            out["dealer"] = self.dealer.hex()
        return json.dumps(out, indent=2)


def generate_identity() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def write_identity(path, key: Ed25519PrivateKey) -> str:
    """Write ``key`` to ``path`` (PKCS#8 PEM, created with mode 0600, never overwritten);
    return its public key in hex."""
    path = Path(path)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise InputError(f"{path} exists: an identity key is never overwritten") from None
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return public_bytes(key).hex()


def read_identity(path) -> Ed25519PrivateKey:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the identity key {path}: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, Ed25519PrivateKey):  # said first: a file given by mistake (a roster, a public key)
        raise InputError(f"{path} is not an Ed25519 private key (make one with secure-auc keygen)")
    if os.stat(path).st_mode & 0o077:
        raise InputError(f"identity key {path} is readable by others: chmod 600 it")
    return key


def ephemeral_roster(clients: int, dealer: bool) -> tuple[Roster, list[Ed25519PrivateKey]]:
    """Fresh identity keys for every rank of a local run, and their roster."""
    keys = [generate_identity() for _ in range(1 + clients + int(dealer))]
    return Roster.from_ranks([public_bytes(k) for k in keys], clients, dealer), keys


def ephemeral_helpers_roster(helpers: int, dealer: bool, hosts: int):
    """Fresh identity keys for a local run of the helpers layout: the computing world's
    (server, helpers, dealer, in rank order), the client hosts', and their roster."""
    world = [generate_identity() for _ in range(1 + helpers + int(dealer))]
    host_keys = [generate_identity() for _ in range(hosts)]
    pub = [public_bytes(k) for k in world]
    roster = Roster(pub[0], tuple(public_bytes(k) for k in host_keys), pub[1 + helpers] if dealer else None,
                    tuple(pub[1 : 1 + helpers]))
    return roster, world, host_keys


def identity_bytes(key: Ed25519PrivateKey) -> bytes:
    """The raw 32-byte private key (to hand a local party its ephemeral identity)."""
    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())


def identity_from_bytes(raw: bytes) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(raw)


def local_link_key() -> bytes:
    """This OS user's 32-byte secret for single-host runs without a roster:
    ``$XDG_CONFIG_HOME/secure-auc/local-link.key`` (or ``~/.config/...``), created once
    with mode 0600; refused if another user owns it or others can read it."""
    import secrets
    import time

    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "secure-auc"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = base / "local-link.key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
    except FileExistsError:
        pass
    for _ in range(50):  # another party of this run may be writing it right now
        st = os.stat(path, follow_symlinks=False)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise InputError(f"{path} must belong to this user with mode 0600")
        data = path.read_bytes()
        if len(data) == 32:
            return data
        time.sleep(0.02)
    raise InputError(f"{path} does not hold a 32-byte key")
