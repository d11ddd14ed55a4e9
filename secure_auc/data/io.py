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
    """One client's private evaluation data.

    Parameters
    ----------
    scores : numpy.ndarray of shape (n_k,)
        The model's scores of the client's samples: finite floats.
    labels : numpy.ndarray of shape (n_k,)
        The client's private labels, 0/1.
    source : str, default ``"<memory>"``
        Where the data came from (a file name); error messages start with it.

    Raises
    ------
    InputError
        If ``scores`` and ``labels`` differ in length.  Nothing else is checked
        here: :func:`read_client_csv` produces float64 scores and int8 labels,
        and :func:`secure_auc.rank_auc` validates them when :func:`secure_auc.evaluate`
        computes the reference AUC.

    Examples
    --------
    >>> import numpy as np
    >>> from secure_auc import ClientData
    >>> c = ClientData(np.array([0.9, 0.2, 0.4]), np.array([1, 0, 0], dtype=np.int8), "clinic A")
    >>> len(c), int(c.labels.sum())
    (3, 1)
    >>> ClientData(np.array([0.9, 0.2]), np.array([1]), "clinic B")
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: clinic B: 2 scores but 1 labels
    """

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
    """Read one client file: a CSV with a header naming the columns ``score`` and ``label``.

    Column names are matched ignoring case and surrounding spaces; other
    columns are ignored; blank lines are skipped.  Labels may be written
    ``0``/``1``, ``0.0``/``1.0`` or ``true``/``false`` (any case).

    Parameters
    ----------
    path : str or pathlib.Path
        The file, UTF-8.

    Returns
    -------
    ClientData
        float64 scores and int8 labels in file order; ``source`` is ``str(path)``.

    Raises
    ------
    InputError
        If the file cannot be opened, is empty, is not valid CSV, lacks a
        column, has no data rows, or a row has a missing field, a score that is
        not a finite number or a label that is not one of the above.  The
        message names the file, the 1-based data row, the line and the column.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from secure_auc import read_client_csv
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "client.csv"
    ...     _ = path.write_text("id,Score,label\\n7,0.9,true\\n8,0.25,0\\n")
    ...     data = read_client_csv(path)
    ...     _ = path.write_text("score,label\\n0.9,1\\n0.25,yes\\n")
    ...     read_client_csv(path)
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: ...client.csv: row 2 (line 3), column 'label': 'yes' is not a label ...
    >>> data.scores, data.labels
    (array([0.9 , 0.25]), array([1, 0], dtype=int8))
    """
    path = Path(path)
    try:
        handle = open(path, newline="", encoding="utf-8-sig")  # a leading BOM (spreadsheets) is dropped
    except OSError as exc:
        raise InputError(f"{path}: cannot open client file ({exc.strerror})") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                             "save it as UTF-8 CSV") from None
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
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start} of "
                             "a block); save it as UTF-8 CSV") from None
    if not scores:
        raise InputError(f"{path}: has a header but no data rows")
    return ClientData(np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=np.int8), str(path))


def write_client_csv(path: str | Path, scores, labels) -> None:
    """Write a client file; float scores are written with full (round-trip) precision.

    Parameters
    ----------
    path : str or pathlib.Path
        The file to create (overwritten if it exists).
    scores : array-like of shape (n,)
        Written as ``repr(float(score))``, so reading the file back gives the
        same float64 values.
    labels : array-like of shape (n,)
        Written as the integers 0/1.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from secure_auc import read_client_csv
    >>> from secure_auc.data.io import write_client_csv
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_client_csv(Path(tmp) / "c.csv", [1 / 3, 0.5], [True, False])
    ...     back = read_client_csv(Path(tmp) / "c.csv")
    >>> back.scores.tolist() == [1 / 3, 0.5], back.labels.tolist()
    (True, [1, 0])
    """
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        w = csv.writer(handle)
        w.writerow(["score", "label"])
        w.writerows(zip((repr(float(s)) for s in scores), (int(y) for y in labels)))
