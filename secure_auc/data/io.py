"""Client files: one CSV per client with columns ``score`` and ``label``.

Other columns are ignored.  Labels may be written 0/1 or true/false (any case).
Every problem is reported as an :class:`InputError` naming the file, the column
and the row (1-based data row, and the line of the file).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..validation import InputError

__all__ = ["ClientData", "read_client_csv", "write_client_csv"]

_LABELS = {"0": 0, "1": 1, "false": 0, "true": 1, "0.0": 0, "1.0": 1}


@dataclass(frozen=True)
class ClientData:
    """One client's private evaluation data."""

    scores: np.ndarray  # float64, finite
    labels: np.ndarray  # int8, 0/1
    source: str = "<memory>"

    def __post_init__(self):
        if len(self.scores) != len(self.labels):
            raise InputError(
                f"{self.source}: {len(self.scores)} scores but {len(self.labels)} labels"
            )

    def __len__(self) -> int:
        return len(self.scores)


def read_client_csv(path: str | Path) -> ClientData:
    path = Path(path)
    try:
        handle = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot open client file ({exc.strerror})") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise InputError(f"{path}: file is empty (expected a header with 'score' and 'label')") from None
        except csv.Error as exc:
            raise InputError(f"{path}: line 1: not valid CSV ({exc})") from None
        names = [h.strip().lower() for h in header]
        missing = [c for c in ("score", "label") if c not in names]
        if missing:
            raise InputError(
                f"{path}: missing column(s) {', '.join(repr(c) for c in missing)} "
                f"(header has {', '.join(repr(h) for h in header) or 'nothing'})"
            )
        si, li = names.index("score"), names.index("label")
        width = max(si, li) + 1
        scores: list[float] = []
        labels: list[int] = []
        row = 0
        try:
            for fields in reader:
                if not fields or (len(fields) == 1 and not fields[0].strip()):
                    continue  # blank line
                row += 1
                where = f"{path}: row {row} (line {reader.line_num})"
                if len(fields) < width:
                    raise InputError(f"{where}: has {len(fields)} fields, needs columns 'score' and 'label'")
                text = fields[si].strip()
                try:
                    value = float(text)
                except ValueError:
                    raise InputError(f"{where}, column 'score': {text!r} is not a number") from None
                if not math.isfinite(value):
                    raise InputError(f"{where}, column 'score': {text!r} is not finite")
                lab = _LABELS.get(fields[li].strip().lower())
                if lab is None:
                    raise InputError(
                        f"{where}, column 'label': {fields[li]!r} is not a label (use 0/1 or true/false)"
                    )
                scores.append(value)
                labels.append(lab)
        except csv.Error as exc:
            raise InputError(f"{path}: line {reader.line_num}: not valid CSV ({exc})") from None
    if not scores:
        raise InputError(f"{path}: has a header but no data rows")
    return ClientData(np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=np.int8), str(path))


def write_client_csv(path: str | Path, scores, labels) -> None:
    """Write a client file; float scores are written with full (round-trip) precision."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        w = csv.writer(handle)
        w.writerow(["score", "label"])
        w.writerows(zip((repr(float(s)) for s in scores), (int(y) for y in labels)))
