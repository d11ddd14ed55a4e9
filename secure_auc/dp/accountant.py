"""The label owners' privacy ledger: reserve before every release, compose with dp-accounting.

A user who evaluates every epoch spends budget every time.  The ledger is a
JSON file that records, per *dataset*, every release with its time, mechanism,
nominal (eps, delta) and privacy event (:mod:`.events`), and reports the
total with the tightest of basic composition, the RDP and the PLD
accountants of Google's ``dp-accounting`` (:func:`.events.compose`).

Datasets.  A dataset is one client's labels, identified by a content hash of
them (:func:`label_commitment`: SHA-256 of the 0/1 labels in row order), never
by a file name: ``a.csv``, ``./a.csv`` and a copy elsewhere are the same
dataset.  A name is an optional alias shown in reports.  Each client charges
its own dataset (its labels are the ones a release spends); a run over K
clients charges K datasets, atomically.

Reserve, then release.  :meth:`Ledger.reserve` checks the budget and records
the release *before* it happens, under an exclusive lock, and writes the file
atomically (``mkstemp`` in the same directory, mode 0600, ``fsync``,
``os.replace``): concurrent runs cannot overspend, and a kill at any point
leaves either the old file or the new one with the reservation counted.
:meth:`Ledger.finish` marks it released or failed; a failed run stays
charged (its aggregate may have been opened).  The ledger and its lock file
are created with mode 0600, and a ledger path that is a symbolic link is
refused.

What is refused (:class:`InputError`, one line):

* a release that would take a dataset over its budget;
* ``none`` (the exact AUC) on a dataset with a budget; without a budget it is
  recorded with eps = inf, after which no budget can be met;
* a noise mechanism whose seed was already used for noise on the dataset
  (same seed, same noise: two releases then reveal their exact difference);
* randomized response with a seed already used for RR at another eps: with
  the same stream the flips at two eps are nested, and the labels on which the
  two releases differ are revealed exactly;
* a budget that differs from the recorded one unless changed explicitly
  (:meth:`Ledger.set_budget` with ``change=True``; ``secure-auc ledger budget``);
* a ledger file that is empty, not JSON, of another version, or whose entries
  are not well-formed (NaN or negative eps, wrong types): nothing is charged
  against a ledger that cannot be read in full.

Randomized response reuse.  Client k's flips are a function of its stream
(seed, k), eps and its labels; the ledger stores the seed's hash, never the
seed.  A later RR release with the same seed, eps, client index and size on
the same dataset -- the same label hash, so the same labels -- reuses the same
flipped labels: post-processing, free.  Changed labels are another dataset and
are charged anew.

    secure-auc ledger show LEDGER.json           # totals per dataset
    secure-auc ledger budget LEDGER.json DATASET --epsilon E [--delta D]
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..validation import InputError
from .events import NONE_EVENT, NOOP_EVENT, check_event, compose

__all__ = ["Ledger", "Spent", "Reservation", "label_commitment", "seed_tag", "NOISE_MECHANISMS"]

NOISE_MECHANISMS = ("laplace", "gaussian", "distributed")
VERSION = 2
STATES = ("reserved", "released", "failed")
REPORT_DELTA = 1e-6  # delta at which (eps, delta) events are reported when the dataset has no delta budget


def label_commitment(labels) -> str:
    """The dataset identity of one client's labels: SHA-256 of the 0/1 labels in row order (hex).

    Examples
    --------
    >>> from secure_auc.dp.accountant import label_commitment
    >>> label_commitment([0, 1, 1]) == label_commitment([0.0, 1.0, 1.0]), label_commitment([0, 1, 1])[:12]
    (True, '9451dac64fb2')
    >>> label_commitment([0, 1, 1]) != label_commitment([1, 0, 1])
    True
    """
    y = np.asarray(labels).astype(np.uint8)
    h = hashlib.sha256(b"secure-auc labels v1|" + str(len(y)).encode() + b"|")
    h.update(np.packbits(y).tobytes())
    return h.hexdigest()


def seed_tag(seed: int | None) -> str | None:
    """A one-way tag of a noise seed (the ledger detects reuse without storing the seed)."""
    if seed is None:
        return None
    return hashlib.blake2b(f"secure-auc seed|{int(seed)}".encode(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Spent:
    """What a dataset has spent: (eps, delta) of the tightest accountant, and by basic composition."""

    epsilon: float
    delta: float
    releases: int
    accountant: str = "basic"
    basic_epsilon: float = 0.0
    basic_delta: float = 0.0


@dataclass(frozen=True)
class Reservation:
    """Releases recorded before a run: (dataset, index of the release) per client."""

    entries: tuple
    spent: tuple  # Spent per dataset after the reservation


def _fail(path, msg: str):
    raise InputError(f"{path}: not a valid privacy ledger: {msg}")


def _check_budget(b, where, path):
    if b is None:
        return
    if not isinstance(b, dict):
        _fail(path, f"{where}: budget must be an object")
    e, d = b.get("epsilon"), b.get("delta", 0.0)
    if isinstance(e, bool) or not isinstance(e, (int, float)) or not (math.isfinite(e) and e > 0):
        _fail(path, f"{where}: budget epsilon must be a finite number > 0, got {e!r}")
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not (0.0 <= d < 1.0):
        _fail(path, f"{where}: budget delta must be in [0, 1), got {d!r}")


def _check_release(r, where, path):
    if not isinstance(r, dict):
        _fail(path, f"{where}: a release must be an object")
    if not isinstance(r.get("mechanism"), str):
        _fail(path, f"{where}: mechanism must be a string")
    e, d = r.get("epsilon"), r.get("delta")
    if e is not None and (isinstance(e, bool) or not isinstance(e, (int, float)) or not math.isfinite(e) or e < 0):
        _fail(path, f"{where}: epsilon must be a finite number >= 0 (or null for a non-private run), got {e!r}")
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not (0.0 <= d < 1.0):
        _fail(path, f"{where}: delta must be in [0, 1), got {d!r}")
    try:
        check_event(r.get("event"))
    except ValueError as exc:
        _fail(path, f"{where}: {exc}")
    if (e is None) != (r["event"]["kind"] == "none"):
        _fail(path, f"{where}: epsilon null must go with a non-private event")
    if r.get("state") not in STATES:
        _fail(path, f"{where}: state must be one of {', '.join(STATES)}")
    for key in ("seed_tag", "rr_key"):
        if r.get(key) is not None and not isinstance(r[key], str):
            _fail(path, f"{where}: {key} must be a string")


def _validate(data, path) -> dict:
    if not isinstance(data, dict) or not isinstance(data.get("datasets"), dict):
        _fail(path, "no 'datasets' object")
    if data.get("version") != VERSION:
        _fail(path, f"version {data.get('version')!r}, this program reads version {VERSION}")
    for key, ds in data["datasets"].items():
        where = f"dataset {key[:16]}"
        if not isinstance(ds, dict) or not isinstance(ds.get("releases"), list):
            _fail(path, f"{where}: needs a 'releases' list")
        _check_budget(ds.get("budget"), where, path)
        names = ds.get("names", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            _fail(path, f"{where}: names must be a list of strings")
        for i, r in enumerate(ds["releases"]):
            _check_release(r, f"{where} release {i + 1}", path)
    return data


class Ledger:
    """One JSON ledger file (see the module docstring).

    Parameters
    ----------
    path : str or pathlib.Path
        The ledger file (created on the first write); ``<path>.lock`` next to it
        is the lock file.

    Raises
    ------
    InputError
        If the file exists but is not a valid ledger, or is a symbolic link.

    Examples
    --------
    One client's labels, a budget of eps = 2 and two Laplace evaluations:

    >>> import tempfile
    >>> from pathlib import Path
    >>> from secure_auc import Ledger, make_mechanism
    >>> from secure_auc.dp.accountant import label_commitment
    >>> tmp = tempfile.TemporaryDirectory()
    >>> ledger = Ledger(Path(tmp.name) / "ledger.json")
    >>> ds = label_commitment([0, 1, 1, 0, 1])
    >>> ledger.set_budget(ds, 2.0, name="clicks")
    >>> res = ledger.reserve([ds], make_mechanism("laplace", 1.0))
    >>> ledger.finish(res)
    >>> ledger.reserve([ds], make_mechanism("laplace", 1.0)).spent[0]
    Spent(epsilon=2.0, delta=0.0, releases=2, accountant='basic', basic_epsilon=2.0, basic_delta=0.0)
    >>> ledger.reserve([ds], make_mechanism("laplace", 0.5))
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: privacy budget of dataset clicks (26e57e9bef9b...) would be exceeded: ...
    >>> ledger.reserve([ds], make_mechanism("none"))
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: dataset clicks (26e57e9bef9b...) has a privacy budget: --mechanism none ...
    >>> tmp.cleanup()
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.data = self._read()

    # -- file ---------------------------------------------------------------------------------------
    def _read(self) -> dict:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return {"version": VERSION, "datasets": {}}
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read the privacy ledger ({exc.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise InputError(f"{self.path}: the privacy ledger is a symbolic link; give the file itself")
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read the privacy ledger ({exc.strerror})") from None
        if not raw.strip():
            raise InputError(f"{self.path}: the privacy ledger is empty (a written ledger never is): restore it, "
                             "or remove it only if it never recorded a release")
        try:
            data = json.loads(raw, parse_constant=lambda c: _fail(self.path, f"{c} is not a number"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{self.path}: not a privacy ledger (invalid JSON: {getattr(exc, 'msg', exc)})") from None
        return _validate(data, self.path)

    def _write(self) -> None:
        text = json.dumps(self.data, indent=1, allow_nan=False) + "\n"
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")  # 0600, O_EXCL
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)  # atomic: a kill leaves the old or the new file
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(OSError):
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    @contextlib.contextmanager
    def _locked(self):
        """Exclusive lock on LEDGER.lock; reload the file, yield, write it back atomically."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise InputError(f"{self.path}: cannot lock the privacy ledger ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.data = self._read()
            yield
            try:
                self._write()
            except OSError as exc:
                raise InputError(f"{self.path}: cannot write the privacy ledger ({exc.strerror})") from None
        finally:
            os.close(fd)  # releases the lock

    # -- queries ---------------------------------------------------------------------------------------
    def _entry(self, dataset: str) -> dict:
        if not dataset or not isinstance(dataset, str):
            raise InputError("a dataset identity (label_commitment of the client's labels) is needed")
        return self.data["datasets"].setdefault(dataset, {"names": [], "budget": None, "releases": []})

    def _releases(self, dataset: str) -> list:
        return self.data["datasets"].get(dataset, {}).get("releases", [])

    def _label(self, dataset: str) -> str:
        names = self.data["datasets"].get(dataset, {}).get("names") or []
        return (f"{'/'.join(names)} ({dataset[:12]}...)" if names else f"{dataset[:12]}...")

    def datasets(self) -> list[str]:
        """The dataset identities in the ledger, sorted."""
        return sorted(self.data["datasets"])

    def find(self, name_or_prefix: str) -> str:
        """The dataset whose alias is ``name_or_prefix`` or whose hash starts with it."""
        hits = [k for k, v in self.data["datasets"].items()
                if name_or_prefix in v.get("names", []) or k.startswith(name_or_prefix)]
        if len(hits) != 1:
            raise InputError(f"{self.path}: {'no' if not hits else 'more than one'} dataset matches {name_or_prefix!r}")
        return hits[0]

    def budget(self, dataset: str) -> dict | None:
        """The budget ``{"epsilon": ..., "delta": ...}`` of ``dataset``, or None."""
        return self.data["datasets"].get(dataset, {}).get("budget")

    def spent(self, dataset: str, extra_events=(), extra_nominal=()) -> Spent:
        """The dataset's total (the tightest accountant, at the budget's delta or 1e-6 without one)."""
        rel = self._releases(dataset)
        events = [r["event"] for r in rel] + list(extra_events)
        nominal = [(math.inf if r["epsilon"] is None else r["epsilon"], r["delta"]) for r in rel] + list(extra_nominal)
        if not events:
            return Spent(0.0, 0.0, 0, "basic", 0.0, 0.0)
        b = self.budget(dataset)
        basic = (math.fsum(n[0] for n in nominal), math.fsum(n[1] for n in nominal))
        target = b["delta"] if b and b.get("delta") else (0.0 if basic[1] == 0 else REPORT_DELTA)
        if basic[1] > 0 and target == 0:
            target = REPORT_DELTA
        try:
            c = compose(events, target, nominal)
        except ValueError:  # (eps, delta) events at delta 0: only basic composition applies
            return Spent(basic[0], basic[1], len(events), "basic", basic[0], basic[1])
        return Spent(c.epsilon, c.delta, len(events), c.accountant, basic[0], basic[1])

    # -- budgets ------------------------------------------------------------------------------------------
    def set_budget(self, dataset: str, epsilon: float, delta: float = 0.0, *, name: str | None = None,
                   change: bool = False) -> None:
        """Set the total (eps, delta) allowed for ``dataset`` (written at once).

        A dataset without a budget gets it; a different budget replaces the
        recorded one only with ``change=True`` (an explicit decision of the label
        owner: ``secure-auc ledger budget``).

        Raises
        ------
        InputError
            On a budget out of range, or a change without ``change=True``.
        """
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
            raise InputError(f"budget epsilon must be a finite number > 0, got {epsilon}")
        if not (isinstance(delta, (int, float)) and 0.0 <= delta < 1.0):
            raise InputError(f"budget delta must be in [0, 1), got {delta}")
        with self._locked():
            entry = self._entry(dataset)
            if name and name not in entry["names"]:
                entry["names"].append(name)
            new = {"epsilon": float(epsilon), "delta": float(delta)}
            old = entry["budget"]
            if old is not None and old != new and not change:
                raise InputError(
                    f"dataset {self._label(dataset)} already has the budget eps = {old['epsilon']:g}, delta = "
                    f"{old['delta']:g}; change it explicitly with: secure-auc ledger budget {self.path} "
                    f"{dataset[:12]} --epsilon {epsilon:g} --delta {delta:g}")
            entry["budget"] = new

    # -- releases -------------------------------------------------------------------------------------------
    def _refusals(self, dataset: str, mech_name: str, cost, tag, rr_key) -> None:
        rel = self._releases(dataset)
        label = self._label(dataset)
        if mech_name in NOISE_MECHANISMS and tag is not None:
            for i, r in enumerate(rel):
                if r["mechanism"] in NOISE_MECHANISMS and r.get("seed_tag") == tag:
                    raise InputError(
                        f"dataset {label}: this seed was already used for {r['mechanism']} noise (release {i + 1}, "
                        f"{r.get('time', '?')}); the same seed gives the same noise, and two releases with the "
                        "same noise reveal their exact difference. Use another seed or none")
        if mech_name == "rr" and tag is not None:
            for i, r in enumerate(rel):
                if r["mechanism"] == "rr" and r.get("seed_tag") == tag and r["epsilon"] is not None \
                        and r.get("requested_epsilon", r["epsilon"]) != cost.epsilon:
                    raise InputError(
                        f"dataset {label}: this seed was already used for randomized response at eps = "
                        f"{r.get('requested_epsilon', r['epsilon']):g} (release {i + 1}); flips of one stream at two "
                        "eps are nested and together reveal every label on which they differ. Use another seed")

    def reserve(self, datasets, mechanism, *, seed: int | None = None, total: int | None = None,
                sizes=None, name: str | None = None, note: str = "") -> Reservation:
        """Check and record one evaluation for each client's dataset, before it runs (atomically).

        Parameters
        ----------
        datasets : list of str
            Each client's :func:`label_commitment`, in client order.
        mechanism : Mechanism
            Its :attr:`~.base.Mechanism.cost` and :meth:`~.base.Mechanism.privacy_event`
            are recorded.
        seed : int, optional
            The user's seed of the noise keys, if any (only its hash is kept).
        total : int, optional
            M or a lower bound (events that depend on it: Skellam shares).
        sizes : list of int, optional
            The clients' sizes n_k, for randomized response reuse.
        name : str, optional
            An alias of the datasets for reports.
        note : str, optional

        Returns
        -------
        Reservation

        Raises
        ------
        InputError
            If any client's release is refused (nothing is recorded then), or
            the ledger cannot be locked, read or written.
        """
        datasets = list(datasets)
        cost = mechanism.cost
        mech_name = mechanism.name
        tag = seed_tag(seed)
        private = cost.epsilon != math.inf
        event = mechanism.privacy_event(total) if private else dict(NONE_EVENT)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        with self._locked():
            plans = []
            for k, ds in enumerate(datasets):
                entry = self._entry(ds)
                if name and name not in entry["names"]:
                    entry["names"].append(name)
                label = self._label(ds)
                budget = entry["budget"]
                if not private and budget is not None:
                    raise InputError(f"dataset {label} has a privacy budget: --mechanism none releases the exact "
                                     "AUC, which no budget covers; choose a private mechanism")
                rr_key = None
                if mech_name == "rr" and tag is not None and sizes is not None:
                    rr_key = f"eps={float(cost.epsilon)!r}|seed={tag}|client={k}|n={int(sizes[k])}"
                self._refusals(ds, mech_name, cost, tag, rr_key)
                free = rr_key is not None and any(r.get("rr_key") == rr_key for r in entry["releases"])
                rec = {"time": stamp, "mechanism": mech_name, "state": "reserved",
                       "epsilon": None if not private else (0.0 if free else float(cost.epsilon)),
                       "delta": 0.0 if free else float(cost.delta),
                       "requested_epsilon": None if not private else float(cost.epsilon),
                       "event": dict(NOOP_EVENT) if free else event, "seed_tag": tag, "rr_key": rr_key}
                if free:
                    rec["note"] = "reuses labels already flipped with this seed, eps and labels: free"
                if note:
                    rec["note"] = (rec.get("note", "") + "; " if rec.get("note") else "") + note
                if budget is not None and private and not free:
                    after = self.spent(ds, [event], [(float(cost.epsilon), float(cost.delta))])
                    if after.epsilon > budget["epsilon"] * (1 + 1e-9) or after.delta > budget["delta"] * (1 + 1e-9):
                        now = self.spent(ds)
                        raise InputError(
                            f"privacy budget of dataset {label} would be exceeded: spent eps = {now.epsilon:.6g}"
                            + (f", delta = {now.delta:g}" if now.delta else "")
                            + f" in {now.releases} release(s); with this run eps = {after.epsilon:.6g}"
                            + (f", delta = {after.delta:g}" if after.delta else "")
                            + f" ({after.accountant}); budget eps = {budget['epsilon']:g}"
                            + (f", delta = {budget['delta']:g}" if budget["delta"] or after.delta else ""))
                plans.append((ds, rec))
            entries = []
            for ds, rec in plans:
                self._entry(ds)["releases"].append(rec)
                entries.append((ds, len(self._releases(ds)) - 1))
            spent = tuple(self.spent(ds) for ds in datasets)
        return Reservation(tuple(entries), spent)

    def finish(self, reservation: Reservation, ok: bool = True) -> None:
        """Mark a reservation's releases ``released`` (or ``failed``: still charged)."""
        with self._locked():
            for ds, i in reservation.entries:
                rel = self._releases(ds)
                if i < len(rel) and rel[i]["state"] == "reserved":
                    rel[i]["state"] = "released" if ok else "failed"

    def cancel(self, reservation: Reservation) -> None:
        """Withdraw a reservation whose evaluation never started (nothing was released:
        another client refused it); releases already marked stay."""
        with self._locked():
            for ds, i in sorted(reservation.entries, key=lambda e: -e[1]):
                rel = self._releases(ds)
                if i < len(rel) and rel[i]["state"] == "reserved":
                    del rel[i]

    # -- report -----------------------------------------------------------------------------------------
    def report(self) -> str:
        """One line per dataset: spent (eps, delta) and the accountant, basic composition, budget left."""
        lines = [f"privacy ledger {self.path} (tightest of basic composition, RDP and PLD accounting)"]
        if not self.data["datasets"]:
            lines.append("  no releases recorded")
        for ds in self.datasets():
            s = self.spent(ds)
            b = self.budget(ds)
            line = (f"  {self._label(ds)}: eps = {s.epsilon:.6g}, delta = {s.delta:g} ({s.accountant}) in "
                    f"{s.releases} release(s); basic composition eps = {s.basic_epsilon:.6g}")
            if b:
                line += (f"; budget eps = {b['epsilon']:g}, delta = {b['delta']:g}; "
                         f"left eps = {max(0.0, b['epsilon'] - s.epsilon):.6g}")
            lines.append(line)
        return "\n".join(lines)
