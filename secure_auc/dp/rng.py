"""Randomness for DP noise.

Every client's noise, label flips and score shuffle come from SHAKE-128
streams (:class:`.streams.KeyStreams`, a cryptographic XOF) of the client's own
128-bit *noise key*.  Real runs draw that key from the operating
system's cryptographic source (:mod:`secrets`); a fixed key is used only when
the user asks for reproducibility.

Each client has independent streams derived from its key: for flipping its
labels (randomized response), for shuffling the scores it sends, for the
noise on its statistics (one label and one noise stream per mechanism of a run).  Keeping them apart is what makes
the plain and the MPC protocol, which shuffle differently, add exactly the
same noise for the same key.

``--seed S`` (plain protocol, simulator) gives client ``k`` the key
:func:`client_key` ``(S, k)``, a one-way function (BLAKE2b): client ``k``'s key
reveals neither ``S`` nor any other client's key.  In the MPC protocol a key
only ever reaches its own client's process.

Analysis code that needs no secret (:func:`make_rng`: the simulator, data
generation) uses numpy's PCG64.
"""

from __future__ import annotations

import hashlib
import secrets

import numpy as np

from .streams import KeyStreams

__all__ = ["make_rng", "ClientRngs", "client_rngs", "client_key", "release_seed", "release_key", "new_noise_key",
           "parse_noise_key", "read_noise_key_file"]


def make_rng(seed: int | None = None) -> np.random.Generator:
    """A PCG64 generator (analysis and simulation, not secrets): seeded from
    :mod:`secrets` when ``seed`` is None.

    Parameters
    ----------
    seed : int, optional

    Returns
    -------
    numpy.random.Generator

    Examples
    --------
    >>> from secure_auc.dp.rng import make_rng
    >>> bool(make_rng(5).random() == make_rng(5).random())
    True
    """
    if seed is None:
        seed = secrets.randbits(128)
    return np.random.Generator(np.random.PCG64(seed))


def new_noise_key() -> int:
    """A fresh 128-bit noise key from :mod:`secrets`."""
    return secrets.randbits(128)


def client_key(seed: int, client: int) -> int:
    """Client ``client``'s 128-bit noise key derived from a user's ``seed``
    (BLAKE2b, one-way: the key reveals neither the seed nor other clients' keys).

    Parameters
    ----------
    seed : int
        The user's seed, >= 0.
    client : int
        The client's index k, >= 0.

    Returns
    -------
    int
        A key in [0, 2^128).

    Raises
    ------
    ValueError
        If ``seed`` or ``client`` is negative.

    Examples
    --------
    >>> from secure_auc.dp.rng import client_key
    >>> client_key(7, 0) != client_key(7, 1), client_key(7, 0) == client_key(7, 0)
    (True, True)
    >>> 0 <= client_key(7, 0) < 2**128
    True
    """
    if int(seed) < 0 or int(client) < 0:
        raise ValueError(f"seed and client index must be >= 0, got {seed}, {client}")
    msg = f"secure-auc noise key|{int(seed)}|{int(client)}".encode()
    return int.from_bytes(hashlib.blake2b(msg, digest_size=16).digest(), "little")


def release_seed(seed: int, release: int) -> int:
    """The seed of release number ``release`` made under a user's ``seed`` (reproducible runs
    that never share noise).

    Release 0 uses ``seed`` itself; release i > 0 a 256-bit seed derived by BLAKE2b (keyed
    by the seed, one-way: it reveals neither ``seed`` nor another release's seed), with its
    top bit set, so it is a valid secret seed of the MPC protocol
    (:func:`secure_auc.validation.check_secret_seed`) whatever ``seed`` was.  A metric object
    or a session that evaluates again under one seed takes the next index, so no two of its
    releases add the same noise (the difference of two releases is never exact).

    Parameters
    ----------
    seed : int
        The user's seed, >= 0.
    release : int
        The release's index under that seed (0, 1, ...).

    Returns
    -------
    int

    Examples
    --------
    >>> from secure_auc.dp.rng import release_seed
    >>> release_seed(7, 0), release_seed(7, 1) == release_seed(7, 1), release_seed(7, 1) != release_seed(7, 2)
    (7, True, True)
    >>> 2**255 <= release_seed(7, 1) < 2**256
    True
    """
    seed, release = int(seed), int(release)
    if seed < 0 or release < 0:
        raise ValueError(f"seed and release index must be >= 0, got {seed}, {release}")
    if release == 0:
        return seed
    digest = hashlib.blake2b(f"secure-auc release|{release}".encode(), digest_size=32,
                             key=hashlib.blake2b(seed.to_bytes((seed.bit_length() + 8) // 8, "little"),
                                                 digest_size=32).digest()).digest()
    return int.from_bytes(digest, "little") | 1 << 255


def release_key(key: int, release: int) -> int:
    """Release ``release``'s 128-bit noise key of a client whose given key is ``key``
    (:func:`release_seed` cut to 128 bits for release i > 0; ``key`` itself for release 0).

    Examples
    --------
    >>> from secure_auc.dp.rng import release_key
    >>> release_key(5, 0), 0 <= release_key(5, 1) < 2**128, release_key(5, 1) != release_key(5, 2)
    (5, True, True)
    """
    return int(key) if int(release) == 0 else release_seed(key, release) & ((1 << 128) - 1)


def parse_noise_key(text: str, where: str = "noise key") -> int:
    """A noise key written as 32 hexadecimal digits (what ``--noise-key-file`` holds).

    Parameters
    ----------
    text : str
        32 hexadecimal digits, optionally prefixed ``0x``; surrounding
        whitespace and case are ignored.
    where : str, default "noise key"
        Where the text came from, for the error message.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If the text is not 32 hexadecimal digits.

    Examples
    --------
    >>> from secure_auc.dp.rng import parse_noise_key
    >>> parse_noise_key("0x" + "0" * 31 + "F\\n")
    15
    """
    t = text.strip().lower().removeprefix("0x")
    if len(t) != 32 or any(c not in "0123456789abcdef" for c in t):
        raise ValueError(f"{where}: expected 32 hexadecimal digits (128 bits), got {len(t)} characters")
    return int(t, 16)


class ClientRngs:
    """A client's noise key and its independent streams (``labels``,
    ``shuffle``, ``noise``; :class:`~.streams.KeyStreams` of one client).

    Each property access gives the stream from its start: the protocol's
    clients name their streams per mechanism (``labels|<m>``, ``noise|<m>``, see
    :mod:`secure_auc.protocol.client`).

    Parameters
    ----------
    key : int
        The client's 128-bit noise key; use :meth:`from_key` to check it or
        draw a fresh one.

    Examples
    --------
    The same key gives the same streams; the streams differ from each other:

    >>> import numpy as np
    >>> from secure_auc.dp.rng import ClientRngs
    >>> one = np.zeros(1, dtype=np.int64)
    >>> a, b = ClientRngs.from_key(42), ClientRngs.from_key(42)
    >>> int(a.noise.below(one, 1 << 30)[0]) == int(b.noise.below(one, 1 << 30)[0])
    True
    >>> int(a.labels.below(one, 1 << 30)[0]) != int(a.shuffle.below(one, 1 << 30)[0])
    True
    """

    __slots__ = ("key",)

    def __init__(self, key: int):
        self.key = int(key)

    @classmethod
    def from_key(cls, key: int | None) -> "ClientRngs":
        """The streams of a client with noise key ``key`` (None: a fresh key)."""
        key = new_noise_key() if key is None else int(key)
        if not 0 <= key < 1 << 128:
            raise ValueError("a noise key has 128 bits")
        return cls(key)

    def stream(self, name: str) -> KeyStreams:
        """The client's stream ``name``, from its start."""
        return KeyStreams([self.key], name)

    labels = property(lambda self: self.stream("labels"))
    shuffle = property(lambda self: self.stream("shuffle"))
    noise = property(lambda self: self.stream("noise"))


def client_rngs(seed: int | None, client: int) -> ClientRngs:
    """Client ``client``'s own streams: from :func:`client_key` ``(seed, client)``, or a
    fresh key when ``seed`` is None (independent of every other client's).

    Parameters
    ----------
    seed : int, optional
    client : int

    Returns
    -------
    ClientRngs

    Examples
    --------
    >>> from secure_auc.dp.rng import client_rngs
    >>> import numpy as np
    >>> one = np.zeros(1, dtype=np.int64)
    >>> client_rngs(3, 0).noise.random(one) == client_rngs(3, 0).noise.random(one)
    array([ True])
    >>> client_rngs(3, 0).noise.random(one) != client_rngs(3, 1).noise.random(one)
    array([ True])
    """
    return ClientRngs.from_key(None if seed is None else client_key(seed, client))


def read_noise_key_file(template: str | None, client: int) -> int | None:
    """Client ``client``'s noise key from its own file (``{client}`` in ``template`` is
    replaced by its index); None without a template (then a fresh key is drawn).

    Raises
    ------
    secure_auc.validation.InputError
        If the file cannot be read, others than its owner may read or write it
        (like identity keys: whoever reads a noise key can subtract the client's
        noise from its release; ``chmod 600``), or it does not hold 32
        hexadecimal digits.
    """
    import os
    import stat

    from ..validation import InputError

    if template is None:
        return None
    path = template.replace("{client}", str(client))
    try:
        with open(path, encoding="ascii") as f:
            mode = os.fstat(f.fileno()).st_mode  # of the file read, not of whatever the path names later
            if stat.S_IMODE(mode) & 0o077:
                raise InputError(f"client {client}: noise key file {path} is readable by others "
                                 f"(mode {stat.S_IMODE(mode):04o}): chmod 600 it")
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"client {client}: cannot read its noise key file {path}: {getattr(exc, 'strerror', exc)}") from None
    try:
        return parse_noise_key(text, f"client {client}: noise key file {path}")
    except ValueError as exc:
        raise InputError(str(exc)) from None
