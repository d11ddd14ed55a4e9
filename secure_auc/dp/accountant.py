"""Privacy accounting across repeated evaluations, persisted in a JSON file the user names.

A user who evaluates every epoch spends budget every time.  The ledger keeps,
per dataset (a name the user chooses for one set of clients' labels), every
release with its time, mechanism, (eps, delta) and seed, and reports the total
by basic composition:

    eps_total = sum_i eps_i,   delta_total = sum_i delta_i.

Basic composition is valid for any mix of the project's mechanisms (Laplace,
Gaussian, randomized response, distributed discrete Laplace / Skellam /
Gaussian), which is why it is what is reported and enforced.  It is an upper
bound: Gaussian-type releases compose more tightly under zCDP/RDP, which this
ledger does not apply.

Randomized response.  The flipped labels are a one-off release: every later
evaluation on the same flipped labels is post-processing and costs nothing
(paper: "all labels are only flipped once").  The clients do not store their
flips; instead the flips are regenerated: client k flips its n_k labels with
its own stream derived from (seed, k) (:mod:`secure_auc.dp.rng`), so with the
same ``--seed``, the same eps and the same client sizes (n_1, ..., n_K) the
flips are bit-identical.  The ledger therefore charges RR once per
(dataset, eps, seed, client sizes) -- the ``layout`` argument -- and then
nothing.  Without a seed every run flips afresh and is charged again, and so
is a run whose layout is not given (we cannot tell it reuses the flips).

Noise mechanisms and seeds.  Laplace, Gaussian and distributed noise draw
fresh noise each run; the sum composes.  But a fixed ``--seed`` gives the
*same* noise: two releases of different statistics (e.g. two models' scores)
with the same noise reveal their exact difference, which basic composition
does not cover.  The ledger refuses a noise mechanism with a seed already
used by a noise mechanism on the same dataset.

Budgets.  ``set_budget`` stores (eps, delta) for a dataset; :meth:`Ledger.charge`
refuses, with an :class:`InputError` naming the dataset, the spent and the
requested budget, a release that would take the total over it.  Call it
*before* the evaluation (it reserves the budget; a run that then fails stays
charged, which errs on the safe side).  Every update re-reads the file under
an exclusive lock and replaces it atomically, so concurrent runs cannot lose
each other's charges or jointly overshoot the budget.

    python -m secure_auc.cli.ledger LEDGER.json        # prints the totals per dataset
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..validation import InputError

__all__ = ["Ledger", "Spent", "NOISE_MECHANISMS"]

NOISE_MECHANISMS = ("laplace", "gaussian", "distributed")
VERSION = 1


@dataclass(frozen=True)
class Spent:
    """The total (eps, delta) of a dataset's releases by basic composition, and their number."""

    epsilon: float
    delta: float
    releases: int


def _layout_key(layout) -> str | None:
    if layout is None:
        return None
    if isinstance(layout, str):
        return layout
    return ",".join(str(int(n)) for n in layout)


class Ledger:
    """One JSON ledger file: ``{"version": 1, "datasets": {name: {"budget": ..., "releases": [...]}}}``.

    Creating a ledger reads the file if it exists (a missing file is an empty
    ledger); :meth:`charge` and :meth:`save` write it.  Totals are by basic
    composition (see the module docstring).

    Parameters
    ----------
    path : str or pathlib.Path
        The ledger file; its directory also holds ``<name>.lock``.

    Raises
    ------
    InputError
        If the file exists but cannot be read or is not a ledger.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from secure_auc import Ledger
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = Path(tmp.name) / "ledger.json"
    >>> ledger = Ledger(path)
    >>> ledger.set_budget("clicks", 2.0)
    >>> ledger.charge("clicks", "laplace", 1.0, seed=1)
    Spent(epsilon=1.0, delta=0.0, releases=1)

    Randomized response with a seed and the clients' sizes is charged once;
    the same flips again are post-processing:

    >>> ledger.charge("clicks", "rr", 0.5, seed=3, layout=[10, 20])
    Spent(epsilon=1.5, delta=0.0, releases=2)
    >>> ledger.charge("clicks", "rr", 0.5, seed=3, layout=[10, 20])
    Spent(epsilon=1.5, delta=0.0, releases=3)
    >>> Ledger(path).spent("clicks")  # persisted
    Spent(epsilon=1.5, delta=0.0, releases=3)
    >>> ledger.charge("clicks", "laplace", 1.0)
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: privacy budget of dataset 'clicks' would be exceeded: spent eps = 1.5 ... budget eps = 2
    >>> ledger.charge("clicks", "laplace", 0.25, seed=1)
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: dataset 'clicks': --seed 1 was already used for laplace noise ...
    >>> ledger.report().splitlines()[1]
    '  clicks: eps = 1.5, delta = 0 in 3 release(s); budget eps = 2, delta = 0; left eps = 0.5'
    >>> tmp.cleanup()
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._pending_budgets: dict[str, dict] = {}
        self.data = self._read()

    # -- file ---------------------------------------------------------------------------------------
    def _read(self) -> dict:
        if not self.path.exists():
            return {"version": VERSION, "datasets": {}}
        try:
            data = json.loads(self.path.read_text() or "{}")
        except json.JSONDecodeError as exc:
            raise InputError(f"{self.path}: not a privacy ledger (invalid JSON: {exc.msg})") from None
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read the privacy ledger ({exc.strerror})") from None
        if not isinstance(data, dict) or not isinstance(data.get("datasets", {}), dict):
            raise InputError(f"{self.path}: not a privacy ledger (no 'datasets' object)")
        data.setdefault("version", VERSION)
        data.setdefault("datasets", {})
        return data

    @contextlib.contextmanager
    def _locked(self):
        """Exclusive lock on LEDGER.lock; reload the file, yield, write it back atomically."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise InputError(f"{self.path}: cannot lock the privacy ledger ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.data = self._read()
            for name, budget in self._pending_budgets.items():
                self._entry(name)["budget"] = budget
            yield
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.data, indent=1) + "\n")
            os.replace(tmp, self.path)  # atomic: a crash never leaves a half-written ledger
            self._pending_budgets.clear()
        finally:
            os.close(fd)  # releases the lock

    def save(self) -> None:
        """Persist budget changes (charges are persisted by :meth:`charge` itself)."""
        with self._locked():
            pass

    # -- queries ---------------------------------------------------------------------------------------
    def _entry(self, dataset: str) -> dict:
        if not dataset:
            raise InputError("a dataset name is needed to account for privacy")
        return self.data["datasets"].setdefault(dataset, {"budget": None, "releases": []})

    def _releases(self, dataset: str) -> list:
        return self.data["datasets"].get(dataset, {}).get("releases", [])

    def budget(self, dataset: str) -> dict | None:
        """The budget ``{"epsilon": ..., "delta": ...}`` of ``dataset``, or None if it has none."""
        if dataset in self._pending_budgets:
            return self._pending_budgets[dataset]
        return self.data["datasets"].get(dataset, {}).get("budget")

    def set_budget(self, dataset: str, epsilon: float, delta: float = 0.0) -> None:
        """Total (eps, delta) allowed for ``dataset``; persisted by the next charge or :meth:`save`.

        Parameters
        ----------
        dataset : str
            The name of one set of clients' labels.
        epsilon : float
            Finite, > 0.
        delta : float, default 0.0
            In [0, 1).

        Raises
        ------
        InputError
            On an empty dataset name or a budget out of range.
        """
        if not (epsilon > 0) or math.isinf(epsilon):
            raise InputError(f"budget epsilon must be a finite number > 0, got {epsilon}")
        if not (0.0 <= delta < 1.0):
            raise InputError(f"budget delta must be in [0, 1), got {delta}")
        self._entry(dataset)
        self._pending_budgets[dataset] = {"epsilon": float(epsilon), "delta": float(delta)}

    def spent(self, dataset: str) -> Spent:
        """The total of ``dataset``'s recorded releases (zero for an unknown dataset)."""
        rel = self._releases(dataset)
        return Spent(math.fsum(r["epsilon"] for r in rel), math.fsum(r["delta"] for r in rel), len(rel))

    def datasets(self) -> list[str]:
        """The names of the datasets in the ledger, sorted."""
        return sorted(self.data["datasets"])

    @staticmethod
    def _rr_key(epsilon: float, seed: int | None, layout) -> str | None:
        lk = _layout_key(layout)
        if seed is None or lk is None:
            return None
        return f"rr:eps={float(epsilon)!r}:seed={int(seed)}:sizes={lk}"

    def cost_of(self, dataset: str, mechanism: str, epsilon: float, delta: float = 0.0, *,
                seed: int | None = None, layout=None) -> tuple[float, float]:
        """(eps, delta) this release would add: 0 for RR on flipped labels already released."""
        if mechanism == "rr":
            key = self._rr_key(epsilon, seed, layout)
            if key and any(r.get("key") == key for r in self._releases(dataset)):
                return 0.0, 0.0
        return float(epsilon), float(delta)

    def check(self, dataset: str, mechanism: str, epsilon: float, delta: float = 0.0, *,
              seed: int | None = None, layout=None) -> None:
        """Raise InputError if the release would exceed the dataset's budget or reuse a noise seed."""
        if not (epsilon > 0) or math.isinf(epsilon):
            raise InputError(f"cannot account for eps = {epsilon} (a non-private run spends an unbounded budget)")
        if mechanism in NOISE_MECHANISMS and seed is not None:
            for i, r in enumerate(self._releases(dataset)):
                if r.get("mechanism") in NOISE_MECHANISMS and r.get("seed") == int(seed):
                    raise InputError(
                        f"dataset {dataset!r}: --seed {seed} was already used for {r['mechanism']} noise "
                        f"(release {i + 1}, {r.get('time', '?')}); the same seed gives the same noise, and two "
                        "releases with the same noise reveal their exact difference. Use another seed or none"
                    )
        budget = self.budget(dataset)
        if budget is None:
            return
        add_e, add_d = self.cost_of(dataset, mechanism, epsilon, delta, seed=seed, layout=layout)
        s = self.spent(dataset)
        over_e = s.epsilon + add_e > budget["epsilon"] * (1 + 1e-12)
        over_d = s.delta + add_d > budget["delta"] * (1 + 1e-12)
        if over_e or over_d:
            raise InputError(
                f"privacy budget of dataset {dataset!r} would be exceeded: spent eps = {s.epsilon:g}"
                + (f", delta = {s.delta:g}" if s.delta or add_d else "")
                + f" in {s.releases} release(s); this run needs eps = {add_e:g}"
                + (f", delta = {add_d:g}" if add_d else "")
                + f"; budget eps = {budget['epsilon']:g}"
                + (f", delta = {budget['delta']:g}" if budget["delta"] or add_d else "")
            )

    def charge(self, dataset: str, mechanism: str, epsilon: float, delta: float = 0.0, *,
               seed: int | None = None, layout=None, note: str = "") -> Spent:
        """Check, record and persist one release (under the file lock); returns the new total.

        Parameters
        ----------
        dataset : str
            The name of one set of clients' labels.
        mechanism : str
            ``rr``, ``laplace``, ``gaussian`` or ``distributed`` (the family).
        epsilon, delta : float
            The release's (eps, delta), as the mechanism's cost gives it.
        seed : int, optional
            The seed of the clients' noise keys, if one was fixed.
        layout : sequence of int or str, optional
            The clients' sizes (n_1, ..., n_K); with ``seed`` it identifies
            flips that randomized response already released.
        note : str, optional
            Free text stored with the release.

        Returns
        -------
        Spent
            The dataset's total including this release.

        Raises
        ------
        InputError
            If :meth:`check` refuses the release (nothing is recorded), or the
            ledger file cannot be locked or read.
        """
        with self._locked():
            self.check(dataset, mechanism, epsilon, delta, seed=seed, layout=layout)
            add_e, add_d = self.cost_of(dataset, mechanism, epsilon, delta, seed=seed, layout=layout)
            rel = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "mechanism": mechanism,
                   "epsilon": add_e, "delta": add_d, "requested_epsilon": float(epsilon),
                   "requested_delta": float(delta), "seed": None if seed is None else int(seed)}
            key = self._rr_key(epsilon, seed, layout) if mechanism == "rr" else None
            if key:
                rel["key"] = key
            if mechanism == "rr" and add_e == 0.0:
                note = (note + "; " if note else "") + "reuses labels already flipped with this seed: free"
            if note:
                rel["note"] = note
            self._entry(dataset)["releases"].append(rel)
        return self.spent(dataset)

    # -- report -----------------------------------------------------------------------------------------
    def report(self) -> str:
        """One line per dataset: spent (eps, delta), releases, budget and what is left."""
        lines = [f"privacy ledger {self.path} (basic composition: eps and delta add up)"]
        if not self.data["datasets"]:
            lines.append("  no releases recorded")
        for name in self.datasets():
            s = self.spent(name)
            b = self.budget(name)
            line = f"  {name}: eps = {s.epsilon:g}, delta = {s.delta:g} in {s.releases} release(s)"
            if b:
                line += f"; budget eps = {b['epsilon']:g}, delta = {b['delta']:g}; " \
                        f"left eps = {max(0.0, b['epsilon'] - s.epsilon):g}"
            lines.append(line)
        return "\n".join(lines)
