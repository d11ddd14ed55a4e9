"""Uniform integers from many clients' own SHAKE-128 streams at once.

The exact samplers of :mod:`.discrete` and randomized response draw their
randomness through one small interface, :class:`Uniforms`: ``below(owner,
high)`` returns one exactly uniform integer in ``[0, high_i)`` for every entry
``i``, drawn from the stream of its owner ``owner_i``.  Two sources implement it:

* :class:`KeyStreams`: one named stream per client key, the output of the
  extendable-output function SHAKE-128 (FIPS 202, :mod:`hashlib`) on the
  client's 128-bit noise key and the stream's name, read as 64-bit words.  It
  serves every client a host process runs, all at once, with vectorised numpy
  code (one SHAKE call per client and stream, about 1 us).
* :class:`GeneratorUniforms`: a numpy ``Generator`` (analysis and simulation,
  no secret).

Determinism per client.  Within one call the entries of the same owner take
consecutive 64-bit words of its stream in entry order; an entry whose word
is rejected (see below) draws again in the next pass, after the other entries
of the pass.  What a client draws therefore depends only on its own entries
and its own stream, never on the other clients served by the same call: a
client run alone (one process per client, a torchrun rank) and the same
client among 458,407 hosted together release bit-identical noise.

Exactly uniform.  A word ``w`` (uniform on [0, 2^64)) is accepted when
``w >= 2^64 mod h`` and then gives ``w mod h``: the accepted range holds a
multiple of ``h`` words, so every residue is equally likely (the rejection
probability is below h / 2^64).

Examples
--------
Two clients served together draw what each draws alone:

>>> import numpy as np
>>> from secure_auc.dp.streams import KeyStreams
>>> both = KeyStreams([11, 12], "noise").below(np.array([0, 1, 1, 0]), np.full(4, 1000))
>>> alone = [KeyStreams([k], "noise").below(np.zeros(2, dtype=np.int64), np.full(2, 1000)) for k in (11, 12)]
>>> both.tolist() == [alone[0][0], alone[1][0], alone[1][1], alone[0][1]]
True
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["Uniforms", "KeyStreams", "GeneratorUniforms", "as_uniforms", "stream_bytes", "TWO53"]

TWO53 = 1 << 53


def stream_bytes(key: int, name: str, size: int) -> bytes:
    """The first ``size`` bytes of client stream ``name``: SHAKE-128(noise key || name).

    A longer read of the same stream starts with the same bytes (an XOF); other
    names, or other keys, give independent streams.

    Examples
    --------
    >>> from secure_auc.dp.streams import stream_bytes
    >>> stream_bytes(7, "noise", 64)[:16] == stream_bytes(7, "noise", 16)
    True
    >>> stream_bytes(7, "noise", 16) != stream_bytes(7, "labels", 16)
    True
    """
    return hashlib.shake_128(int(key).to_bytes(16, "little") + b"secure-auc stream|" + name.encode()).digest(size)


class Uniforms:
    """Exactly uniform integers, one per entry, each from its owner's stream."""

    streams: int = 1

    def below(self, owner, high) -> np.ndarray:
        """Uniform integers in ``[0, high_i)`` (int64), one per entry.

        Parameters
        ----------
        owner : array-like of int
            The stream of each entry (0 <= owner < :attr:`streams`).
        high : int or array-like of int
            Upper bounds, 1 <= high <= 2^63, broadcast against ``owner``.

        Returns
        -------
        numpy.ndarray of int64, the shape of ``owner`` flattened
        """
        raise NotImplementedError

    def owners(self, shape) -> np.ndarray:
        """The owner of each entry of an array of ``shape`` whose last axis runs
        over the streams (one statistic per client), flattened."""
        size = int(np.prod(shape, dtype=np.int64))
        if self.streams == 1:
            return np.zeros(size, dtype=np.int64)
        if not shape or shape[-1] != self.streams:
            raise ValueError(f"an array of shape {tuple(shape)} does not have one entry per stream "
                             f"({self.streams}) on its last axis")
        return np.arange(size, dtype=np.int64) % self.streams

    def random(self, owner) -> np.ndarray:
        """Uniform doubles k / 2^53 in [0, 1), one per entry."""
        return self.below(owner, TWO53).astype(np.float64) / TWO53

    def open_unit(self, owner) -> np.ndarray:
        """Uniform doubles (k + 1/2) / 2^53 in (0, 1), one per entry (for inversion of a
        distribution function, which 0 and 1 would send to its ends)."""
        return (self.below(owner, TWO53) + 0.5) / TWO53

    def permutation_keys(self, owner) -> np.ndarray:
        """Uniform 63-bit sort keys, one per entry (a stable sort by them is a uniform
        shuffle up to ties of probability below n^2 / 2^64)."""
        return self.below(owner, 1 << 63)


class GeneratorUniforms(Uniforms):
    """:class:`Uniforms` from a numpy ``Generator`` (``owner`` only fixes the count).

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc.dp.streams import GeneratorUniforms
    >>> u = GeneratorUniforms(np.random.default_rng(0)).below(np.zeros(5, dtype=np.int64), 10)
    >>> u.dtype, bool(((0 <= u) & (u < 10)).all())
    (dtype('int64'), True)
    """

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def below(self, owner, high) -> np.ndarray:
        n = np.size(owner)
        high = np.broadcast_to(np.asarray(high), (n,))
        if high.dtype == object:
            high = high.astype(np.uint64)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        return self.rng.integers(0, high, dtype=np.int64) if high.max() <= np.iinfo(np.int64).max else \
            self.rng.integers(0, high.astype(np.uint64), dtype=np.uint64).astype(np.int64)

    def random(self, owner) -> np.ndarray:
        return self.rng.random(np.size(owner))


class KeyStreams(Uniforms):
    """Stream ``name`` of each of ``len(keys)`` clients (:func:`stream_bytes`).

    Parameters
    ----------
    keys : sequence of int
        The clients' 128-bit noise keys (stream k belongs to ``keys[k]``).
    name : str
        Which stream (e.g. ``"noise|..."``): different names give independent streams.
    words : int, default 32
        64-bit words read per client up front; a client that needs more reads
        further into the same stream (twice as far as it needs, at least 8 x
        ``words`` words, and again at twice the length when that is used up).
        With one key the stream is read in prefixes that double (at least 16 x
        ``words`` words) and each draw takes the next words as one slice.

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc.dp.streams import KeyStreams
    >>> s = KeyStreams([5], "labels")
    >>> a = s.below(np.zeros(3, dtype=np.int64), 6)
    >>> b = KeyStreams([5], "labels").below(np.zeros(3, dtype=np.int64), 6)
    >>> a.tolist() == b.tolist(), bool(((0 <= a) & (a < 6)).all())
    (True, True)
    """

    def __init__(self, keys, name: str, words: int = 32):
        self._keys = [int(k) for k in keys]
        self.streams = len(self._keys)
        self.name = name
        self._width = int(words)
        self._buf: np.ndarray | None = None
        self._pos = np.zeros(self.streams, dtype=np.int64)
        self._far: np.ndarray | None = None  # the longer reads, one after another (_beyond)
        self._far_used = 0
        self._start: np.ndarray | None = None  # where each owner's longer read starts in _far
        self._cap: np.ndarray | None = None  # and its length (0: not read)
        self._long: dict[int, np.ndarray] = {}

    def _read(self, owner: int, words: int) -> np.ndarray:
        return np.frombuffer(stream_bytes(self._keys[owner], self.name, 8 * words), dtype="<u8")

    def _fill(self) -> None:
        size = 8 * self._width
        raw = b"".join(stream_bytes(k, self.name, size) for k in self._keys)
        self._buf = np.frombuffer(raw, dtype="<u8").reshape(self.streams, self._width)

    def _beyond(self, owner: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Words past the first ``words``: each owner's stream is read to at least twice the
        farthest word it needs (8 x ``words`` words at least), kept in one flat buffer, and
        read again at twice the length only when a draw goes past it; the words are then
        gathered at once (no step per owner, but for the reads)."""
        if self._cap is None:
            self._start = np.zeros(self.streams, dtype=np.int64)
            self._cap = np.zeros(self.streams, dtype=np.int64)
        over = at >= self._cap[owner]
        if over.any():  # the owners whose reads end before a word they need now
            grow, which = np.unique(owner[over], return_inverse=True)
            need = np.zeros(grow.size, dtype=np.int64)
            np.maximum.at(need, which, at[over] + 1)
            caps = np.maximum(2 * need, 8 * self._width)
            raw = np.frombuffer(b"".join(stream_bytes(self._keys[int(o)], self.name, 8 * int(c))
                                         for o, c in zip(grow.tolist(), caps.tolist())), dtype="<u8")
            used = self._far_used
            if self._far is None or used + raw.size > self._far.size:  # grow by doubling
                grown = np.empty(max(2 * (used + raw.size), 1 << 12), dtype=np.uint64)
                if self._far is not None:
                    grown[:used] = self._far[:used]
                self._far = grown
            self._far[used : used + raw.size] = raw
            self._start[grow] = used + np.cumsum(caps) - caps
            self._cap[grow] = caps
            self._far_used = used + raw.size
        return self._far[self._start[owner] + at]

    def _prefix(self, owner: int, words: int) -> np.ndarray:
        """At least the first ``words`` words of ``owner``'s stream, read again at twice the
        length when more are needed (at least 16 x ``words`` of the constructor)."""
        long = self._long.get(owner)
        if long is None or long.size < words:
            long = self._long[owner] = self._read(owner, max(2 * words, 16 * self._width))
        return long

    def _take(self, owner: np.ndarray) -> np.ndarray:
        """One fresh word per entry; entries of one owner take consecutive words in order."""
        n = owner.size
        if n == 0:
            return np.zeros(0, dtype=np.uint64)
        if self.streams == 1:  # one stream: the next n words, a slice (the same words as below)
            start = int(self._pos[0])
            self._pos[0] += n
            return self._prefix(0, start + n)[start : start + n].copy()
        if self._buf is None:
            self._fill()
        counts = np.bincount(owner, minlength=self.streams)
        if counts.max() <= 1:
            rank = 0
        else:
            order = np.argsort(owner, kind="stable")
            sorted_owner = owner[order]
            rank = np.empty(n, dtype=np.int64)
            rank[order] = np.arange(n) - np.searchsorted(sorted_owner, sorted_owner, side="left")
        at = self._pos[owner] + rank
        self._pos += counts
        out = np.empty(n, dtype=np.uint64)
        inside = at < self._width
        out[inside] = self._buf[owner[inside], at[inside]]
        if not inside.all():
            out[~inside] = self._beyond(owner[~inside], at[~inside])
        return out

    def below(self, owner, high) -> np.ndarray:
        owner = np.asarray(owner, dtype=np.int64).ravel()
        h = np.broadcast_to(np.asarray(high), owner.shape).astype(np.uint64)
        if h.size and (h.min() == 0 or h.max() > np.uint64(1 << 63)):
            raise ValueError("bounds must be in [1, 2^63]")
        reject_below = (~h + np.uint64(1)) % h  # 2^64 mod h
        out = np.empty(owner.size, dtype=np.int64)
        todo = np.arange(owner.size)
        while todo.size:
            w = self._take(owner[todo])
            ok = w >= reject_below[todo]
            out[todo[ok]] = (w[ok] % h[todo[ok]]).astype(np.int64)
            todo = todo[~ok]
        return out


def as_uniforms(rng) -> Uniforms:
    """``rng`` itself if it is a :class:`Uniforms`, else a numpy ``Generator`` wrapped."""
    return rng if isinstance(rng, Uniforms) else GeneratorUniforms(rng)
