"""The label owners' privacy ledger: every release charged to each record it contains (SQLite).

A user who evaluates every epoch spends budget every time, and label-DP protects
each person's label: the ledger charges every release to each *record* (person)
whose label it uses, and refuses a release that would take any record past the
budget.  It reports the spending with the tightest of basic composition, the RDP
and the PLD accountants of Google's ``dp-accounting`` (:func:`.events.compose`),
per record.

Records.  When a client's data carries a record identifier (an ``id`` column,
``--id-column``, a deployed client's ``id_column``; :attr:`secure_auc.ClientData.ids`,
``MPCSession(ids=...)``, :class:`Records`), each identifier is a record (every path
hands :meth:`Ledger.reserve` the same labels and identifiers): reordered, filtered,
grown and overlapping datasets are charged exactly on the records they contain,
whatever else changed.  Identifiers are stored
keyed, never in the clear: a 64-bit tag under the ledger's own 256-bit key
(drawn from :mod:`secrets` when the ledger is created, kept in it), by
length-prefixed CBC-MAC with AES-128 under a subkey derived from it with
HMAC-SHA-256 (a pseudo-random function of the identifier's text; vectorised, so
10^7 identifiers take about a second).  An identifier is its text: the integer
7 and the text ``"7"`` are one record, ``"07"`` another.  A repeated identifier
in one dataset is refused (the record's label would count twice).

Datasets without identifiers.  Then a client's labels are one unit, identified
by :func:`label_commitment`: the number of labels and of positives, which does
not depend on the order of the rows (stored keyed, like identifiers).  Such an
identity cannot follow a dropped or added row (the smaller or larger dataset is
another unit with a budget of its own), and two datasets with equal sizes and
counts of positives are one unit to the ledger (charged together: more, never
less).

Storage.  Records that share a release history share one *group*: a row of
``groups``, its members' tags as sorted blobs of up to 2^20 tags
(``members``), and one row of ``history`` per release charged to it.  A release
that covers a whole group adds one history row; one that covers part of it
splits it in two.  1,000 releases of the same 10^7 records hold 80 MB of tags
and 1,000 history rows.

Reserve, then release.  :meth:`Ledger.reserve` checks the budget of every record
and records the release *before* it happens, in one SQLite transaction
(``BEGIN IMMEDIATE``: one writer at a time; rollback journal, ``synchronous =
FULL``): concurrent runs cannot overspend, and a kill at any point leaves
either no trace of the reservation or all of it.  :meth:`Ledger.finish` marks it
released or failed; a failed run stays charged (its aggregate may have been
opened).  The file is created complete (in a private temporary file, mode
0600, linked into place), so a ledger is never empty; a ledger path that is a
symbolic link is refused.

What is refused (:class:`InputError`, one line):

* a release that would take any record (or dataset) over the budget;
* ``none`` (the exact AUC) in a ledger with a budget; without a budget it is
  recorded with eps = inf, after which no budget can be met;
* a noise mechanism whose seed was already used for noise on any of the
  records (same seed, same noise: two releases then reveal their exact
  difference);
* randomized response with a seed already used for RR at another eps on any of
  the records: with the same stream the flips at two eps are two dependent
  draws, not independent releases whose costs add, and their joint privacy loss
  is not what either eps accounts for;
* a budget that differs from the recorded one unless changed explicitly
  (:meth:`Ledger.set_budget` with ``change=True``; ``secure-auc ledger budget``);
* a file that is not a ledger of this version (an earlier version's JSON
  ledger, an empty or foreign file) or whose entries are not well-formed:
  nothing is charged against a ledger that cannot be read in full.

Randomized response reuse.  Client k's flips are a function of its stream
(seed, k), eps and its labels in row order; the ledger stores the seed's keyed
tag, never the seed.  A later RR release with the same seed, eps, client index,
and the same labels (and identifiers) in the same order reuses the same flipped
labels: post-processing, free.  Anything else is charged.

    secure-auc ledger show LEDGER.db           # spending per record
    secure-auc ledger budget LEDGER.db --epsilon E [--delta D]
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import os
import secrets
import sqlite3
import stat
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..validation import InputError
from .events import NONE_EVENT, NOOP_EVENT, check_event, compose
from .registry import flips_labels, seeded_noise

__all__ = ["Ledger", "BudgetExceeded", "Spent", "Reservation", "KeyedData", "Records", "label_commitment"]

FORMAT = "secure-auc privacy ledger 3 (per record, SQLite)"
STATES = ("reserved", "released", "failed")
REPORT_DELTA = 1e-6  # delta at which (eps, delta) events are reported when the budget has no delta
CHUNK = 1 << 20  # tags per row of ``members``
BUSY_SECONDS = 600.0  # how long a run waits for another one's transaction
SQLITE_MAGIC = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE meta(name TEXT PRIMARY KEY, value);
CREATE TABLE charges(
    id INTEGER PRIMARY KEY, evaluation INTEGER NOT NULL, client INTEGER NOT NULL, time TEXT NOT NULL,
    mechanism TEXT NOT NULL, state TEXT NOT NULL, epsilon REAL, delta REAL NOT NULL,
    requested_epsilon REAL, event TEXT NOT NULL, seed_tag TEXT, rr_key TEXT, name TEXT, note TEXT,
    units INTEGER NOT NULL);
CREATE TABLE groups(id INTEGER PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('record', 'dataset')),
    size INTEGER NOT NULL, digest BLOB NOT NULL);
CREATE TABLE members(id INTEGER PRIMARY KEY, group_id INTEGER NOT NULL, tags BLOB NOT NULL);
CREATE INDEX members_group ON members(group_id);
CREATE TABLE history(group_id INTEGER NOT NULL, charge_id INTEGER NOT NULL,
    PRIMARY KEY (group_id, charge_id)) WITHOUT ROWID;
"""


def label_commitment(labels) -> str:
    """The dataset-level identity of one client's labels, independent of row order.

    The number of labels and of positives: all that labels without identifiers
    say about who they are.  The ledger stores it keyed, never in the clear.

    Examples
    --------
    >>> from secure_auc.dp.accountant import label_commitment
    >>> label_commitment([0, 1, 1]) == label_commitment([1, 0, 1.0])
    True
    >>> label_commitment([0, 1, 1]), label_commitment([0, 1])
    ('labels n=3 positives=2', 'labels n=2 positives=1')
    """
    y = np.asarray(labels)
    return f"labels n={len(y)} positives={int(np.count_nonzero(y))}"


@dataclass(frozen=True)
class Records:
    """One client's labels as its ledger charges them, without scores: each record when
    ``ids`` are given (one per label), else the labels as one dataset
    (:func:`label_commitment`).  What a path that holds labels apart from scores (a
    session, a deployed client) hands to :meth:`Ledger.reserve` or :meth:`Ledger.keyed`,
    as :func:`secure_auc.evaluate` hands its :class:`secure_auc.ClientData`: the ledger
    reads the same ``labels``, ``ids`` and ``source`` of either.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from secure_auc import ClientData, make_mechanism
    >>> from secure_auc.dp.accountant import Ledger, Records
    >>> tmp = tempfile.TemporaryDirectory()
    >>> a, b = Ledger(Path(tmp.name) / "a.db"), Ledger(Path(tmp.name) / "b.db")
    >>> _ = a.reserve([Records([0, 1, 1], ids=["x", "y", "z"])], make_mechanism("laplace", 1.0))
    >>> _ = b.reserve([ClientData([0.2, 0.9, 0.4], [0, 1, 1], ids=["x", "y", "z"])], make_mechanism("laplace", 1.0))
    >>> a.histories() == b.histories()
    True
    >>> a.histories()[0]["kind"], a.histories()[0]["count"]
    ('record', 3)
    >>> tmp.cleanup()
    """

    labels: object
    ids: object = None
    source: str = "<memory>"

    def __post_init__(self):
        if self.ids is not None and len(self.ids) != len(self.labels):
            raise InputError(f"{self.source}: {len(self.ids)} record identifiers for {len(self.labels)} labels")


class BudgetExceeded(InputError):
    """A release that would take a record (or dataset) over its ledger's privacy budget."""


@dataclass(frozen=True)
class Spent:
    """What the most charged record (of a dataset, or of the ledger) has spent: (eps, delta) of the
    tightest accountant, its number of releases, and basic composition."""

    epsilon: float
    delta: float
    releases: int
    accountant: str = "basic"
    basic_epsilon: float = 0.0
    basic_delta: float = 0.0


@dataclass(frozen=True)
class Reservation:
    """The charges recorded before a run (one per client), and each client's most charged record after it."""

    entries: tuple
    spent: tuple


# ---- keyed identities ---------------------------------------------------------------------------------
def _int_codepoints(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decimal text of int64 values as code points (n, w) and lengths, without a loop over elements."""
    a = a.astype(np.int64)
    neg = a < 0
    rest = np.where(neg, -(a + 1), a).astype(np.uint64) + neg.astype(np.uint64)  # |a|, also for -2^63
    low = []  # the digits, least significant first
    digits = np.ones(len(a), dtype=np.int64)
    for _ in range(20):
        rest, d = np.divmod(rest, np.uint64(10))
        low.append(d.astype(np.uint32) + np.uint32(ord("0")))
        if not rest.any():
            break
        digits += rest > 0
    lens = digits + neg
    out = np.zeros((len(a), int(lens.max(initial=1))), dtype=np.uint32)
    stack = np.stack(low[::-1])  # most significant first
    for d in np.unique(digits):  # a loop over the lengths (at most 20), not the elements
        for sign in (0, 1):
            rows = np.flatnonzero((digits == d) & (neg == bool(sign)))
            if rows.size:
                out[rows, sign:sign + d] = stack[len(low) - d:, rows].T
    out[neg, 0] = ord("-")
    return out, lens


def _codepoints(ids) -> tuple[np.ndarray, np.ndarray]:
    """Identifiers as their text: code points (n, w), uint32, zero-padded, and lengths."""
    a = np.asarray(ids)
    if a.ndim != 1:
        raise InputError(f"record identifiers must be one value per record (shape (n,)), got shape {a.shape}")
    if a.dtype.kind == "O":
        if not all(isinstance(v, (str, int, np.integer)) and not isinstance(v, bool) for v in a):
            raise InputError("record identifiers must be integers or text")
        a = a.astype(np.str_)
    if a.dtype.kind in "iu":
        if a.dtype.kind == "u" and a.size and a.max() > np.iinfo(np.int64).max:
            a = a.astype(np.str_)
        else:
            return _int_codepoints(a)
    if a.dtype.kind != "U":
        raise InputError(f"record identifiers must be integers or text, got {a.dtype}")
    lens = np.strings.str_len(a).astype(np.int64)
    if a.size and lens.min() == 0:
        raise InputError(f"record identifier {int(np.argmin(lens)) + 1} is empty")
    w = max(1, a.dtype.itemsize // 4)
    return np.ascontiguousarray(a).view(np.uint32).reshape(len(a), w), lens


def _record_tags(key: bytes, ids) -> np.ndarray:
    """64-bit keyed tags of identifiers, in their order: length-prefixed AES-CBC-MAC (a PRF)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    cps, lens = _codepoints(ids)
    n, w = cps.shape
    blocks = (w + 1 + 3) // 4  # 4 little-endian uint32 words per 16-byte block: the length, then the text
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    tags = np.empty(n, dtype="<i8")
    step = 1 << 18  # rows at a time: bounded memory
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        m = hi - lo
        msg = np.zeros((m, 4 * blocks), dtype="<u4")
        msg[:, 0] = lens[lo:hi]
        msg[:, 1:1 + w] = cps[lo:hi]
        words = msg.view("<u8").reshape(m, blocks, 2)
        own = (lens[lo:hi] + 1 + 3) // 4  # each identifier's own number of blocks: its MAC ends there
        x = np.zeros((m, 2), dtype="<u8")
        out = np.empty(2 * m + 2, dtype="<u8")  # update_into wants 15 bytes of room
        for j in range(blocks):
            y = x ^ words[:, j]
            enc.update_into(memoryview(y).cast("B"), memoryview(out).cast("B"))
            e = out[:2 * m].reshape(m, 2)
            x = e.copy() if j == 0 or own.min() > j else np.where((own > j)[:, None], e, x)
        tags[lo:hi] = x[:, 0].view("<i8")
    return tags


def _hmac(key: bytes, *parts) -> bytes:
    return hmac.new(key, b"|".join(p if isinstance(p, bytes) else str(p).encode() for p in parts),
                    hashlib.sha256).digest()


def _digest(kind: str, tags: np.ndarray) -> bytes:
    """SHA-256 of a sorted set of tags: a group whose members are exactly a dataset's is found by it."""
    return hashlib.sha256(kind.encode() + b"|" + np.ascontiguousarray(tags, dtype="<i8").tobytes()).digest()


@dataclass(frozen=True)
class KeyedData:
    """One client's data as a ledger sees it (:meth:`Ledger.keyed`): the sorted keyed tags of its records
    (or of its one dataset), with nothing in the clear.  Reserving with it again skips the keying."""

    kind: str  # "record" or "dataset"
    tags: np.ndarray
    order: str | None  # keyed digest of the labels (and identifiers) in row order, for RR reuse
    what: str
    digest: bytes
    ledger_key: bytes  # which ledger's key (a digest of it)


# ---- checks of a stored ledger ------------------------------------------------------------------------------
def _fail(path, msg: str):
    raise InputError(f"{path}: not a valid privacy ledger: {msg}")


def _check_charge(row, path) -> dict:
    (cid, evaluation, client, stamp, mech, state, eps, delta, req, event, seed_tag, rr_key, name, note, units) = row
    where = f"release {cid}"
    if not isinstance(mech, str):
        _fail(path, f"{where}: mechanism must be text")
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps)
                            or eps < 0):
        _fail(path, f"{where}: epsilon must be a finite number >= 0 (or null for a non-private run), got {eps!r}")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0.0 <= delta < 1.0):
        _fail(path, f"{where}: delta must be in [0, 1), got {delta!r}")
    if state not in STATES:
        _fail(path, f"{where}: state must be one of {', '.join(STATES)}")
    try:
        ev = check_event(json.loads(event, parse_constant=lambda c: _fail(path, f"{where}: {c} is not a number")))
    except (TypeError, json.JSONDecodeError):
        _fail(path, f"{where}: the privacy event is not JSON")
    except ValueError as exc:
        _fail(path, f"{where}: {exc}")
    if (eps is None) != (ev["kind"] == NONE_EVENT["kind"]):
        _fail(path, f"{where}: epsilon null must go with a non-private event")
    for key, value in (("seed_tag", seed_tag), ("rr_key", rr_key)):
        if value is not None and not isinstance(value, str):
            _fail(path, f"{where}: {key} must be text")
    return {"id": cid, "evaluation": evaluation, "client": client, "time": stamp, "mechanism": mech, "state": state,
            "epsilon": eps, "delta": float(delta), "requested_epsilon": req, "event": ev, "seed_tag": seed_tag,
            "rr_key": rr_key, "name": name, "note": note, "units": units}


@contextlib.contextmanager
def finishing(ledger, reservation):
    """Mark ``reservation`` released when the block ends, or failed when it raises (still
    charged: the aggregate may have been opened), or withdraw it when the exception says
    the run never started (its ``started`` is False: :class:`secure_auc.MPCError`, a busy
    port); nothing without a reservation."""
    if reservation is None:
        yield
        return
    try:
        yield
    except BaseException as exc:
        if getattr(exc, "started", True) is False:
            ledger.cancel(reservation)  # nothing was computed: nothing to charge
        else:
            ledger.finish(reservation, ok=False)
        raise
    ledger.finish(reservation)


class Ledger:
    """One privacy ledger file, SQLite (see the module docstring).

    Parameters
    ----------
    path : str or pathlib.Path
        The ledger file, created (mode 0600) on the first write.

    Raises
    ------
    InputError
        If the file exists but is not a ledger of this version, or is a symbolic link.

    Examples
    --------
    A budget of eps = 2 per record; two Laplace evaluations of 5 records, then 3 of
    them with 2 new ones: the 3 are at the budget, the new ones at 1:

    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from secure_auc import ClientData, Ledger, make_mechanism
    >>> tmp = tempfile.TemporaryDirectory()
    >>> ledger = Ledger(Path(tmp.name) / "ledger.db")
    >>> ledger.set_budget(2.0)
    >>> day1 = ClientData(np.zeros(5), np.array([0, 1, 1, 0, 1]), ids=["ann", "bob", "cy", "dee", "eve"])
    >>> res = ledger.reserve([day1], make_mechanism("laplace", 1.0))
    >>> ledger.finish(res)
    >>> day2 = ClientData(np.zeros(5), np.array([1, 0, 1, 1, 0]), ids=["eve", "cy", "bob", "fay", "gus"])
    >>> ledger.reserve([day2], make_mechanism("laplace", 1.0)).spent[0]
    Spent(epsilon=2.0, delta=0.0, releases=2, accountant='basic', basic_epsilon=2.0, basic_delta=0.0)
    >>> ledger.reserve([day1], make_mechanism("laplace", 0.5))
    Traceback (most recent call last):
        ...
    secure_auc.dp.accountant.BudgetExceeded: privacy budget would be exceeded for 3 of client 0's 5 records: ...
    >>> ledger.reserve([day1], make_mechanism("none"))
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: ...: the ledger has a privacy budget: --mechanism none ...
    >>> tmp.cleanup()
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._key: bytes | None = None
        self._budget: dict | None = None
        self._cache: dict = {}
        if self._exists():
            with self._connect() as db:
                self._check(db)

    # -- file ---------------------------------------------------------------------------------------------
    def _exists(self) -> bool:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read the privacy ledger ({exc.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise InputError(f"{self.path}: the privacy ledger is a symbolic link; give the file itself")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{self.path}: not a privacy ledger (not a regular file)")
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read the privacy ledger ({exc.strerror})") from None
        if not head:
            raise InputError(f"{self.path}: the privacy ledger is empty (a written ledger never is): restore it, "
                             "or remove it only if it never recorded a release")
        if head.lstrip()[:1] == b"{":
            raise InputError(
                f"{self.path}: a privacy ledger of an earlier version (JSON, one budget per hash of a dataset's "
                "labels in row order), which cannot be carried over to per-record accounts: keep it as the "
                "record of what was spent, and give a new ledger file whose budget is what is left "
                "(--ledger NEW.db --budget E)")
        if head != SQLITE_MAGIC:
            raise InputError(f"{self.path}: not a privacy ledger (not an SQLite database)")
        return True

    def _create(self) -> None:
        """Write a complete empty ledger to a private temporary file and link it into place (never empty)."""
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        except OSError as exc:
            raise InputError(f"{self.path}: cannot create the privacy ledger ({exc.strerror})") from None
        os.close(fd)
        try:
            db = sqlite3.connect(tmp, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=DELETE")
                db.execute("BEGIN")
                for stmt in _SCHEMA.strip().split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.executemany("INSERT INTO meta VALUES (?, ?)",
                               [("format", FORMAT), ("key", secrets.token_bytes(32)), ("budget_epsilon", None),
                                ("budget_delta", None), ("created", time.strftime("%Y-%m-%dT%H:%M:%S%z"))])
                db.execute("COMMIT")
            finally:
                db.close()
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            try:
                os.link(tmp, self.path)  # atomic, and never replaces a ledger another run created meanwhile
            except FileExistsError:
                pass
        except OSError as exc:
            raise InputError(f"{self.path}: cannot create the privacy ledger ({exc.strerror})") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        with contextlib.suppress(OSError):
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    @contextlib.contextmanager
    def _connect(self):
        try:
            db = sqlite3.connect(self.path.absolute().as_uri() + "?mode=rw", uri=True, timeout=BUSY_SECONDS,
                                 isolation_level=None)
        except sqlite3.Error as exc:
            raise InputError(f"{self.path}: cannot open the privacy ledger ({exc})") from None
        try:
            db.execute("PRAGMA synchronous=FULL")
            yield db
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise InputError(f"{self.path}: the privacy ledger stayed locked by another run for "
                                 f"{BUSY_SECONDS:g} s") from None
            raise InputError(f"{self.path}: cannot use the privacy ledger ({exc})") from None
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: not a valid privacy ledger ({exc})") from None
        finally:
            db.close()

    @contextlib.contextmanager
    def _transaction(self):
        """One write transaction (``BEGIN IMMEDIATE``): committed in full, or rolled back in full."""
        if not self._exists():
            self._create()
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._check(db)
                yield db
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already
                    db.execute("ROLLBACK")
                raise
            try:
                db.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                raise InputError(f"{self.path}: cannot write the privacy ledger ({exc})") from None

    def _check(self, db) -> None:
        try:
            meta = dict(db.execute("SELECT name, value FROM meta"))
        except sqlite3.DatabaseError:
            _fail(self.path, "no 'meta' table")
        if meta.get("format") != FORMAT:
            _fail(self.path, f"format {meta.get('format')!r}, this program reads {FORMAT!r}")
        key = meta.get("key")
        if not isinstance(key, bytes) or len(key) != 32:
            _fail(self.path, "its key is missing or not 32 bytes")
        self._key = key
        e, d = meta.get("budget_epsilon"), meta.get("budget_delta")
        if e is not None and (not isinstance(e, (int, float)) or not (math.isfinite(e) and e > 0)):
            _fail(self.path, f"budget epsilon must be a finite number > 0, got {e!r}")
        if e is not None and (not isinstance(d, (int, float)) or not (0.0 <= d < 1.0)):
            _fail(self.path, f"budget delta must be in [0, 1), got {d!r}")
        self._budget = None if e is None else {"epsilon": float(e), "delta": float(d)}

    # -- reading -----------------------------------------------------------------------------------------
    def _charges(self, db) -> dict:
        return {row[0]: _check_charge(row, self.path) for row in db.execute(
            "SELECT id, evaluation, client, time, mechanism, state, epsilon, delta, requested_epsilon, event, "
            "seed_tag, rr_key, name, note, units FROM charges")}

    def _groups(self, db, charges, members: bool = True) -> dict:
        """{group: (kind, sorted tags, [charge ids])}; without ``members``: (kind, size, [charge ids], digest)."""
        groups = {gid: [kind, size, [], [], digest]
                  for gid, kind, size, digest in db.execute("SELECT id, kind, size, digest FROM groups")}
        for gid, cid in db.execute("SELECT group_id, charge_id FROM history"):
            if gid not in groups or cid not in charges:
                _fail(self.path, f"history row ({gid}, {cid}) names a missing group or release")
            groups[gid][3].append(cid)
        held = dict.fromkeys(charges, 0)
        for gid, (kind, size, parts, hist, digest) in groups.items():
            for c in hist:
                held[c] += size
        for c, n in held.items():  # every record a release was charged to is still charged with it
            if n != charges[c]["units"]:
                _fail(self.path, f"release {c} was charged to {charges[c]['units']} records, its groups hold {n}")
        if not members:
            return {gid: (kind, size, sorted(hist), digest) for gid, (kind, size, _, hist, digest) in groups.items()}
        for gid, blob in db.execute("SELECT group_id, tags FROM members ORDER BY group_id, id"):
            if gid not in groups or not isinstance(blob, bytes) or len(blob) % 8:
                _fail(self.path, f"members of group {gid} are not a list of 64-bit tags")
            groups[gid][2].append(np.frombuffer(blob, dtype="<i8"))
        out = {}
        for gid, (kind, size, parts, hist, digest) in groups.items():
            tags = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            if len(tags) != size:
                _fail(self.path, f"group {gid} should have {size} members, has {len(tags)}")
            out[gid] = (kind, tags, sorted(hist))
        return out

    def _keyed_data(self, kind, tags, order, what) -> KeyedData:
        return KeyedData(kind, tags, order, what, _digest(kind, tags), _hmac(self._key, b"which key")[:8])

    def keyed(self, data, client: int = 0) -> KeyedData:
        """``data`` keyed for this ledger (:meth:`reserve` does it for every call; a caller that charges the
        same records every epoch keys them once).

        Parameters
        ----------
        data : ClientData, array of labels, or str
            As an element of :meth:`reserve`'s ``datasets``.
        client : int, default 0
            The client's index, for messages.
        """
        if not self._exists():
            self._create()
        with self._connect() as db:
            self._check(db)
        return self._unit(data, client)

    def _unit(self, data, client: int) -> KeyedData:
        """Client ``client``'s data as keyed tags: a ClientData (records if it has ids), labels, or an identity."""
        key = self._key
        if isinstance(data, KeyedData):
            if data.ledger_key != _hmac(key, b"which key")[:8]:
                raise InputError(f"{self.path}: data keyed for another ledger")
            return data
        if isinstance(data, str):
            if not data:
                raise InputError("a dataset identity (label_commitment of the client's labels) is needed")
            tag = np.frombuffer(_hmac(key, b"dataset", data)[:8], dtype="<i8").copy()
            return self._keyed_data("dataset", tag, None, f"client {client}'s dataset")
        ids = getattr(data, "ids", None)
        labels = np.asarray(getattr(data, "labels", data))
        y = np.packbits(labels.astype(np.uint8) & 1).tobytes()
        if ids is None:
            tag = np.frombuffer(_hmac(key, b"dataset", label_commitment(labels))[:8], dtype="<i8").copy()
            order = _hmac(key, b"order", len(labels), y).hex()
            return self._keyed_data("dataset", tag, order, f"client {client}'s dataset")
        ids = np.asarray(ids)
        source = getattr(data, "source", "<memory>")
        who = f"client {client}" + ("" if source in ("<memory>", f"client {client}") else f" ({source})")
        if len(ids) != len(labels):
            raise InputError(f"{who}: {len(ids)} record identifiers for {len(labels)} labels")
        raw = _record_tags(_hmac(key, b"record identifiers")[:16], ids)
        tags = np.sort(raw)
        dup = np.flatnonzero(tags[1:] == tags[:-1])
        if dup.size:
            row = int(np.flatnonzero(raw == tags[dup[0]])[1]) + 1
            raise InputError(f"{who}: record identifier {str(ids[row - 1])!r} (row {row}) appears more than "
                             "once; each record's label may count once per release")
        order = _hmac(key, b"order", len(labels), y, raw.tobytes()).hex()
        return self._keyed_data("record", tags, order, f"client {client}'s {len(tags):,} records")

    def _spent_of(self, hist, charges, extra=None) -> Spent:
        """Spent of one history (charge ids), with an ``extra`` (event, eps, delta) of a release to come."""
        items = [(json.dumps(charges[c]["event"], sort_keys=True),
                  math.inf if charges[c]["epsilon"] is None else charges[c]["epsilon"], charges[c]["delta"])
                 for c in hist]
        if extra is not None:
            items.append((json.dumps(extra[0], sort_keys=True), extra[1], extra[2]))
        b = self._budget
        key = (tuple(sorted(items)), None if b is None else b["delta"])
        if key not in self._cache:
            self._cache[key] = self._compose(items)
        return self._cache[key]

    def _compose(self, items) -> Spent:
        if not items:
            return Spent(0.0, 0.0, 0, "basic", 0.0, 0.0)
        events = [json.loads(e) for e, _, _ in items]
        nominal = [(e, d) for _, e, d in items]
        b = self._budget
        basic = (math.fsum(n[0] for n in nominal), math.fsum(n[1] for n in nominal))
        target = b["delta"] if b and b.get("delta") else (0.0 if basic[1] == 0 else REPORT_DELTA)
        if basic[1] > 0 and target == 0:
            target = REPORT_DELTA
        if target == 0 and all(e["kind"] in ("pure", "noop") for e in events):
            return Spent(basic[0], 0.0, len(events), "basic", basic[0], 0.0)  # pure DP at delta 0: exactly the sum
        try:
            c = compose(events, target, nominal)
        except ValueError:  # (eps, delta) events at delta 0: only basic composition applies
            return Spent(basic[0], basic[1], len(events), "basic", basic[0], basic[1])
        return Spent(c.epsilon, c.delta, len(events), c.accountant, basic[0], basic[1])

    # -- queries -------------------------------------------------------------------------------------------
    def _state(self, members: bool = True):
        if not self._exists():
            return {}, {}
        with self._connect() as db:
            self._check(db)
            charges = self._charges(db)
            return charges, self._groups(db, charges, members)

    def budget(self, dataset=None) -> dict | None:
        """The budget ``{"epsilon": ..., "delta": ...}`` of every record, or None (``dataset`` is ignored:
        the budget is the ledger's)."""
        if self._exists():
            with self._connect() as db:
                self._check(db)
        return self._budget

    def spent(self, dataset=None) -> Spent:
        """What the most charged record has spent: of ``dataset`` (a ClientData, labels, or a
        :func:`label_commitment`), or of the whole ledger.  A record the ledger never saw has spent nothing."""
        charges, groups = self._state(members=dataset is not None)
        if not groups:
            return Spent(0.0, 0.0, 0, "basic", 0.0, 0.0)
        hists = [g[2] for g in groups.values()]
        if dataset is not None:
            u = self._unit(dataset, 0)
            hists = [h for _, (kind, tags, h) in groups.items() if kind == u.kind and np.isin(u.tags, tags).any()]
        return max((self._spent_of(h, charges) for h in hists), key=lambda s: (s.epsilon, s.delta, s.releases),
                   default=Spent(0.0, 0.0, 0, "basic", 0.0, 0.0))

    # -- budget ---------------------------------------------------------------------------------------------
    def set_budget(self, epsilon, delta: float = 0.0, *args, name: str | None = None, change: bool = False) -> None:
        """Set the total (eps, delta) allowed for every record and dataset of the ledger.

        A ledger without a budget gets it; a different budget replaces the
        recorded one only with ``change=True`` (an explicit decision of the label
        owner: ``secure-auc ledger budget``).  The earlier form
        ``set_budget(dataset, epsilon, delta)`` is accepted (the dataset is
        ignored: the budget is every record's).

        Raises
        ------
        InputError
            On a budget out of range, or a change without ``change=True``.
        """
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating, np.integer)):
            epsilon, delta = delta, (args[0] if args else 0.0)  # set_budget(dataset, epsilon[, delta])
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise InputError(f"budget epsilon must be a finite number > 0, got {epsilon}")
        if not (isinstance(delta, (int, float)) and 0.0 <= delta < 1.0):
            raise InputError(f"budget delta must be in [0, 1), got {delta}")
        new = {"epsilon": float(epsilon), "delta": float(delta)}
        with self._transaction() as db:
            old = self._budget
            if old is not None and old != new and not change:
                raise InputError(
                    f"the ledger already has the budget eps = {old['epsilon']:g}, delta = {old['delta']:g} per "
                    f"record; change it explicitly with: secure-auc ledger budget {self.path} --epsilon "
                    f"{epsilon:g} --delta {delta:g}")
            db.executemany("UPDATE meta SET value = ? WHERE name = ?",
                           [(new["epsilon"], "budget_epsilon"), (new["delta"], "budget_delta")])
            self._budget = new

    # -- releases ----------------------------------------------------------------------------------------------
    @staticmethod
    def _refusals(u: KeyedData, hist_charges, mech_name: str, cost, tag, evaluation: int) -> None:
        if tag is None:
            return
        for r in hist_charges:
            if r["evaluation"] == evaluation:  # another client of this run: its noise key is its own
                continue
            # the families declare whether their noise comes from the seeded noise keys (registry)
            if seeded_noise(mech_name) and seeded_noise(r["mechanism"]) and r["seed_tag"] == tag:
                raise InputError(
                    f"{u.what}: this seed was already used for {r['mechanism']} noise on some of them (release "
                    f"{r['id']}, {r['time']}); the same seed gives the same noise, and two releases with the "
                    "same noise reveal their exact difference. Use another seed or none")
            asked = r["requested_epsilon"] if r["requested_epsilon"] is not None else r["epsilon"]
            if flips_labels(mech_name) and r["mechanism"] == mech_name and r["seed_tag"] == tag and r["epsilon"] is not None \
                    and asked != cost.epsilon:
                raise InputError(
                    f"{u.what}: this seed was already used for randomized response at eps = "
                    f"{r['requested_epsilon']:g} on some of them (release {r['id']}); flips of one stream at two "
                    "eps are dependent draws, not independent releases whose costs add. Use another seed")

    def reserve(self, datasets, mechanism, *, seed: int | None = None, total: int | None = None,
                sizes=None, name: str | None = None, note: str = "", clients=None) -> Reservation:
        """Check and record one evaluation for each client's records, before it runs (atomically).

        Parameters
        ----------
        datasets : list
            Each client's data, in client order: a :class:`secure_auc.ClientData`
            (charged per record when it has ``ids``, otherwise as one dataset),
            an array of labels, or a :func:`label_commitment`.
        mechanism : Mechanism
            Its :attr:`~.base.Mechanism.cost` and :meth:`~.base.Mechanism.privacy_event`
            are recorded.
        seed : int, optional
            The user's seed of the noise keys, if any (only a keyed tag of it is kept).
        total : int, optional
            M or a lower bound (events that depend on it: Skellam shares).
        sizes : list of int, optional
            The clients' sizes n_k, for randomized response reuse.
        name : str, optional
            A name of the clients' datasets for reports.
        note : str, optional
        clients : list of int, optional
            The clients' indices in the run (default 0, 1, ...): a client that charges
            its own ledger gives its own.

        Returns
        -------
        Reservation

        Raises
        ------
        InputError
            If any client's release is refused (nothing is recorded then), or
            the ledger cannot be created, read or written.
        """
        datasets = list(datasets)
        cost = mechanism.cost
        mech_name = mechanism.name
        private = cost.epsilon != math.inf
        event = mechanism.privacy_event(total) if private else dict(NONE_EVENT)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        if not self._exists():
            self._create()
        with self._connect() as db:
            self._check(db)  # the key, to tag the data before the transaction
        clients = list(range(len(datasets))) if clients is None else [int(c) for c in clients]
        units = [self._unit(d, k) for k, d in zip(clients, datasets)]
        tag = None if seed is None else _hmac(self._key, b"seed", int(seed)).hex()[:32]
        with self._transaction() as db:
            budget = self._budget
            if not private and budget is not None:
                raise InputError(f"{self.path}: the ledger has a privacy budget: --mechanism none releases the exact "
                                 "AUC, which no budget covers; choose a private mechanism")
            charges = self._charges(db)
            heads = self._groups(db, charges, members=False)
            exact = {digest: gid for gid, (kind, size, hist, digest) in heads.items()}
            groups = None
            if len(units) == 1 and units[0].digest in exact:  # one dataset, exactly one group's records
                gid = exact[units[0].digest]
                groups = {gid: (heads[gid][0], units[0].tags, heads[gid][2])}
            elif heads:
                groups = self._groups(db, charges)
            else:
                groups = {}
            evaluation = 1 + (db.execute("SELECT max(evaluation) FROM charges").fetchone()[0] or 0)
            entries, spent = [], []
            for k, u in zip(clients, units):
                touched, found = {}, np.zeros(len(u.tags), dtype=bool)
                for gid, (kind, tags, hist) in groups.items():
                    if kind != u.kind or not len(tags):
                        continue
                    if len(tags) == len(u.tags) and np.array_equal(tags, u.tags):
                        touched[gid] = None  # the whole group, and nothing else
                        found[:] = True
                        break
                    idx = np.minimum(np.searchsorted(u.tags, tags), len(u.tags) - 1)
                    hit = u.tags[idx] == tags
                    if hit.any():
                        touched[gid] = None if hit.all() else hit
                        found[idx[hit]] = True
                new = u.tags[~found]
                hist_ids = {c for gid in touched for c in groups[gid][2]}
                self._refusals(u, [charges[c] for c in sorted(hist_ids)], mech_name, cost, tag, evaluation)
                rr_key = None
                if flips_labels(mech_name) and tag is not None and sizes is not None and u.order is not None:
                    n_k = int(sizes[clients.index(k)])
                    rr_key = f"eps={float(cost.epsilon)!r}|seed={tag}|client={k}|n={n_k}|labels={u.order}"
                free = rr_key is not None and not new.size and any(charges[c]["rr_key"] == rr_key for c in hist_ids)
                rec = {"evaluation": evaluation, "client": k, "time": stamp, "mechanism": mech_name,
                       "state": "reserved", "epsilon": None if not private else (0.0 if free else float(cost.epsilon)),
                       "delta": 0.0 if free else float(cost.delta),
                       "requested_epsilon": None if not private else float(cost.epsilon),
                       "event": dict(NOOP_EVENT) if free else event, "seed_tag": tag, "rr_key": rr_key,
                       "name": name, "units": len(u.tags),
                       "note": "; ".join(filter(None, [
                           "reuses labels already flipped with this seed, eps and labels: free" if free else "",
                           note]))}
                extra = (rec["event"], math.inf if rec["epsilon"] is None else rec["epsilon"], rec["delta"])
                # the budget: every distinct history among the touched groups, and the new records' (empty)
                by_hist: dict = {}
                for gid, hit in touched.items():
                    n = len(groups[gid][1]) if hit is None else int(hit.sum())
                    h = tuple(groups[gid][2])
                    by_hist[h] = by_hist.get(h, 0) + n
                if new.size:
                    by_hist[()] = by_hist.get((), 0) + int(new.size)
                afters = {h: self._spent_of(h, charges, extra) for h in by_hist}
                if budget is not None and private and not free:
                    over = [h for h, s in afters.items() if s.epsilon > budget["epsilon"] * (1 + 1e-9)
                            or s.delta > budget["delta"] * (1 + 1e-9)]
                    if over:
                        h = max(over, key=lambda h: afters[h].epsilon)
                        now, after = self._spent_of(h, charges), afters[h]
                        count = sum(by_hist[x] for x in over)
                        whom = (f"{count:,} of {u.what}" if u.kind == "record" else u.what)
                        raise BudgetExceeded(
                            f"privacy budget would be exceeded for {whom}: spent eps = {now.epsilon:.6g}"
                            + (f", delta = {now.delta:g}" if now.delta else "")
                            + f" in {now.releases} release(s); with this run eps = {after.epsilon:.6g}"
                            + (f", delta = {after.delta:g}" if after.delta else "")
                            + f" ({after.accountant}); budget eps = {budget['epsilon']:g}"
                            + (f", delta = {budget['delta']:g}" if budget["delta"] or after.delta else "")
                            + ("" if u.kind == "record" else
                               " (without record identifiers a dataset is known only by its number of labels and "
                               "of positives, so datasets alike in both count as one; --id-column charges each "
                               "record)"))
                cid = self._insert_charge(db, rec)
                charges[cid] = dict(rec, id=cid)
                entries.append(cid)
                spent.append(max(afters.values(), key=lambda s: (s.epsilon, s.delta, s.releases)))
                self._apply(db, groups, touched, new, u.kind, cid)
        return Reservation(tuple(entries), tuple(spent))

    @staticmethod
    def _insert_charge(db, rec) -> int:
        cur = db.execute(
            "INSERT INTO charges (evaluation, client, time, mechanism, state, epsilon, delta, requested_epsilon, "
            "event, seed_tag, rr_key, name, note, units) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (rec["evaluation"], rec["client"], rec["time"], rec["mechanism"], rec["state"], rec["epsilon"],
             rec["delta"], rec["requested_epsilon"], json.dumps(rec["event"], allow_nan=False), rec["seed_tag"],
             rec["rr_key"], rec["name"], rec["note"] or None, rec["units"]))
        return cur.lastrowid

    @staticmethod
    def _write_members(db, gid: int, kind: str, tags: np.ndarray) -> None:
        db.execute("DELETE FROM members WHERE group_id = ?", (gid,))
        db.executemany("INSERT INTO members (group_id, tags) VALUES (?, ?)",
                       ((gid, tags[i:i + CHUNK].astype("<i8").tobytes()) for i in range(0, len(tags), CHUNK)))
        db.execute("UPDATE groups SET size = ?, digest = ? WHERE id = ?", (len(tags), _digest(kind, tags), gid))

    def _new_group(self, db, groups, kind: str, tags: np.ndarray, hist: list) -> None:
        gid = db.execute("INSERT INTO groups (kind, size, digest) VALUES (?, 0, x'')", (kind,)).lastrowid
        self._write_members(db, gid, kind, tags)
        db.executemany("INSERT INTO history VALUES (?, ?)", ((gid, c) for c in hist))
        groups[gid] = (kind, tags, list(hist))

    def _apply(self, db, groups, touched, new, kind: str, cid: int) -> None:
        """Charge ``cid`` to the touched groups (split where it covers part of one) and to the new records."""
        for gid, hit in touched.items():
            gkind, tags, hist = groups[gid]
            if hit is None:  # the whole group: one history row
                db.execute("INSERT INTO history VALUES (?, ?)", (gid, cid))
                hist.append(cid)
                continue
            self._new_group(db, groups, gkind, tags[hit], hist + [cid])
            rest = tags[~hit]
            self._write_members(db, gid, gkind, rest)
            groups[gid] = (gkind, rest, hist)
        if new.size:
            self._new_group(db, groups, kind, new, [cid])

    def finish(self, reservation: Reservation, ok: bool = True) -> None:
        """Mark a reservation's releases ``released`` (or ``failed``: still charged)."""
        with self._transaction() as db:
            db.executemany("UPDATE charges SET state = ? WHERE id = ? AND state = 'reserved'",
                           (("released" if ok else "failed", cid) for cid in reservation.entries))

    def cancel(self, reservation: Reservation) -> None:
        """Withdraw a reservation whose evaluation never started (nothing was released:
        another client refused it); releases already marked stay."""
        with self._transaction() as db:
            ids = [cid for cid in reservation.entries
                   if db.execute("SELECT 1 FROM charges WHERE id = ? AND state = 'reserved'", (cid,)).fetchone()]
            db.executemany("DELETE FROM history WHERE charge_id = ?", ((cid,) for cid in ids))
            db.executemany("DELETE FROM charges WHERE id = ?", ((cid,) for cid in ids))

    # -- report -----------------------------------------------------------------------------------------------
    def datasets(self) -> list[tuple]:
        """The groups of equal release history: ``(kind, records, releases)`` each (kind ``"record"`` or
        ``"dataset"``), the most charged first; empty when nothing was charged."""
        charges, groups = self._state(members=False)
        return sorted(((kind, size, len(hist)) for kind, size, hist, _ in groups.values()), key=lambda g: -g[2])

    def releases(self) -> list[dict]:
        """Every charge: one per client and evaluation (time, mechanism, state, eps, delta, event, ...)."""
        charges, _ = self._state(members=False)
        return [charges[c] for c in sorted(charges)]

    def histories(self) -> list[dict]:
        """One entry per release history, the most charged first: ``kind`` (``"record"`` or
        ``"dataset"``), ``count`` (records, or datasets without identifiers), ``names`` (the
        datasets' names), and what each of them spent (the fields of :class:`Spent`)."""
        charges, groups = self._state(members=False)
        rows: dict = {}
        for kind, size, hist, _ in groups.values():
            s = self._spent_of(hist, charges)
            names = sorted({charges[c]["name"] for c in hist if charges[c]["name"]})
            key = (s, kind, tuple(names) if kind == "dataset" else ())
            rows[key] = rows.get(key, 0) + size
        ordered = sorted(rows.items(), key=lambda kv: (-kv[0][0].epsilon, -kv[0][0].delta, kv[0][1]))
        return [{"kind": kind, "count": n, "names": list(names)} | asdict(s) for (s, kind, names), n in ordered]

    def report(self, lines_max: int = 12) -> str:
        """The budget, then one line per release history: how many records (or datasets) have it and
        what they spent, the most charged first."""
        charges, groups = self._state(members=False)
        head = f"privacy ledger {self.path} (per record; tightest of basic composition, RDP and PLD accounting)"
        b = self._budget
        lines = [head, f"  budget per record: eps = {b['epsilon']:g}, delta = {b['delta']:g}" if b
                 else "  no budget set"]
        if not groups:
            lines.append("  no releases recorded")
            return "\n".join(lines)
        evaluations = len({c["evaluation"] for c in charges.values()})
        lines.append(f"  {evaluations} evaluation(s), {len(charges)} client release(s)")
        ordered = self.histories()
        for h in ordered[:lines_max]:
            n, names = h["count"], h["names"]
            what = f"{n:,} record(s)" if h["kind"] == "record" else (
                f"{n} dataset(s) without identifiers" + (f" ({', '.join(names)})" if names else ""))
            line = (f"  {what}: eps = {h['epsilon']:.6g}, delta = {h['delta']:g} ({h['accountant']}) in "
                    f"{h['releases']} release(s); basic composition eps = {h['basic_epsilon']:.6g}")
            if b:
                line += f"; left eps = {max(0.0, b['epsilon'] - h['epsilon']):.6g}"
            lines.append(line)
        if len(ordered) > lines_max:
            lines.append(f"  ... and {len(ordered) - lines_max} more histories")
        return "\n".join(lines)
