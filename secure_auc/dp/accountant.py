"""Privacy accounting across repeated evaluations, persisted in a JSON file.

A user who evaluates every epoch spends budget every time.  The ledger keeps,
per dataset (a name the user chooses for the set of clients' labels), every
release with its (eps, delta), and reports the total by basic composition:

    eps_total = sum_i eps_i,   delta_total = sum_i delta_i

(valid for any mix of Laplace, discrete Laplace, Gaussian and randomized
response releases; tighter accounting for Gaussian releases, e.g. zCDP, is not
applied, so the reported total is an upper bound).

Randomized response is charged once per set of flipped labels: labels flipped
with a fixed seed are the same flips every run (the paper: "all labels are only
flipped once and ... can be used for further evaluations"), so a repeated RR
evaluation with the same seed and eps costs nothing more.  Without a seed each
run flips afresh and is charged again.

With a budget set for a dataset, :meth:`Ledger.charge` refuses a release that
would take the total over it, before anything is computed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..validation import InputError

__all__ = ["Ledger", "Spent"]


@dataclass(frozen=True)
class Spent:
    epsilon: float
    delta: float
    releases: int


class Ledger:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.exists():
            try:
                self.data = json.loads(self.path.read_text() or "{}")
            except json.JSONDecodeError as exc:
                raise InputError(f"{self.path}: not a privacy ledger (invalid JSON: {exc.msg})") from None
        else:
            self.data = {}
        self.data.setdefault("datasets", {})

    def _entry(self, dataset: str) -> dict:
        if not dataset:
            raise InputError("a dataset name is needed to account for privacy")
        return self.data["datasets"].setdefault(dataset, {"budget": None, "releases": []})

    def set_budget(self, dataset: str, epsilon: float, delta: float = 0.0) -> None:
        if not epsilon > 0:
            raise InputError(f"budget epsilon must be > 0, got {epsilon}")
        self._entry(dataset)["budget"] = {"epsilon": float(epsilon), "delta": float(delta)}

    def spent(self, dataset: str) -> Spent:
        rel = self.data["datasets"].get(dataset, {}).get("releases", [])
        return Spent(sum(r["epsilon"] for r in rel), sum(r["delta"] for r in rel), len(rel))

    @staticmethod
    def _rr_key(epsilon: float, seed: int | None) -> str | None:
        return None if seed is None else f"rr:eps={epsilon!r}:seed={seed}"

    def cost_of(self, dataset: str, mechanism: str, epsilon: float, delta: float = 0.0, *, seed: int | None = None):
        """(eps, delta) this release would add (0 for RR labels already flipped with this seed)."""
        key = self._rr_key(epsilon, seed) if mechanism == "rr" else None
        if key and any(r.get("key") == key for r in self.data["datasets"].get(dataset, {}).get("releases", [])):
            return 0.0, 0.0
        return float(epsilon), float(delta)

    def check(self, dataset: str, mechanism: str, epsilon: float, delta: float = 0.0, *, seed: int | None = None) -> None:
        """Raise InputError if the release would exceed the dataset's budget."""
        entry = self._entry(dataset)
        budget = entry["budget"]
        if budget is None:
            return
        add_e, add_d = self.cost_of(dataset, mechanism, epsilon, delta, seed=seed)
        s = self.spent(dataset)
        if s.epsilon + add_e > budget["epsilon"] + 1e-12 or s.delta + add_d > budget["delta"] + 1e-15:
            raise InputError(
                f"privacy budget of dataset {dataset!r} would be exceeded: spent eps = {s.epsilon:g}"
                + (f", delta = {s.delta:g}" if s.delta or add_d else "")
                + f" in {s.releases} release(s); this run needs eps = {add_e:g}"
                + (f", delta = {add_d:g}" if add_d else "")
                + f"; budget eps = {budget['epsilon']:g}" + (f", delta = {budget['delta']:g}" if budget["delta"] else "")
            )

    def charge(self, dataset: str, mechanism: str, epsilon: float, delta: float = 0.0, *, seed: int | None = None,
               note: str = "") -> Spent:
        self.check(dataset, mechanism, epsilon, delta, seed=seed)
        add_e, add_d = self.cost_of(dataset, mechanism, epsilon, delta, seed=seed)
        rel = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "mechanism": mechanism,
               "epsilon": add_e, "delta": add_d, "note": note}
        key = self._rr_key(epsilon, seed) if mechanism == "rr" else None
        if key:
            rel["key"] = key
        self._entry(dataset)["releases"].append(rel)
        return self.spent(dataset)

    def save(self) -> None:
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)  # atomic: a crash never leaves a half-written ledger
