"""Client files: one file per client with columns ``score`` and ``label`` (or other names).

CSV (UTF-8, with or without a byte-order mark), gzip-compressed CSV and
Parquet (with the optional pyarrow) are recognised by their content.
Other columns are ignored.  Labels may be written 0/1 or true/false (any case).
Every problem is reported as an :class:`InputError` naming the file, the column
and the row (1-based data row, and the line of the file).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..validation import InputError, check_binary_labels, check_scores

__all__ = ["ClientData", "read_client_file", "read_client_csv", "read_score_file", "read_label_file",
           "read_labels_and_ids", "write_client_csv", "same_files", "write_client_file"]

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
    ids : numpy.ndarray of shape (n_k,), optional
        Each sample's record identifier (integers or text), when the client
        keeps them: the privacy ledger then charges every release to each
        record (:class:`secure_auc.Ledger`).  They never leave the client.

    Raises
    ------
    InputError
        If a score is not finite, a label is not 0/1 (or boolean), either is not
        one-dimensional (a column ``(n, 1)`` is flattened; torch tensors are detached),
        or ``scores`` and ``labels`` (or ``ids``) differ in length.  Every path (files, the
        built-in data, :func:`secure_auc.evaluate`, a session) builds its clients through this
        class, so nothing unchecked reaches a party.

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
    >>> ClientData(np.array([0.9, 0.2]), np.array([1, 2]), "clinic C")
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: clinic C: labels[1] is 2: labels must be 0 or 1
    >>> ClientData(np.array([0.9, np.nan]), np.array([1, 0]), "clinic D")
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: clinic D: scores[1] is nan: scores must be finite
    """

    scores: np.ndarray  # float64, finite
    labels: np.ndarray  # int8, 0/1
    source: str = "<memory>"
    ids: np.ndarray | None = None  # record identifiers, for the privacy ledger

    def __post_init__(self):
        scores = check_scores(self.scores, name=f"{self.source}: scores").astype(np.float64, copy=False)
        labels = check_binary_labels(self.labels, name=f"{self.source}: labels")
        if len(scores) != len(labels):
            raise InputError(
                f"{self.source}: {len(scores)} scores but {len(labels)} labels"
            )
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "labels", labels)
        if self.ids is not None and len(self.ids) != len(labels):
            raise InputError(f"{self.source}: {len(self.ids)} record identifiers but {len(labels)} labels")

    def __len__(self) -> int:
        return len(self.scores)


GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"


def _read_bytes(path: str) -> bytes:
    """The file's bytes, gunzipped if it is gzip-compressed; every failure an InputError naming it."""
    import gzip
    import stat
    import zlib

    try:  # the path as spelled: "a.csv/" is no file, though pathlib would read it as a.csv
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"{path}: is a folder, not a client file")
        if not stat.S_ISREG(mode):  # a device would be read forever, a pipe would block
            raise InputError(f"{path}: not a regular file (a device, a pipe or a socket)")
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot open client file ({exc.strerror or exc})") from None
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{path}: gzip-compressed but cannot be decompressed ({exc})") from None
    return raw


def _decode(path: Path, raw: bytes) -> str:
    """UTF-8 (a leading BOM, as spreadsheets write, dropped), or UTF-16 with its BOM; anything
    else is refused with the offending byte and line (guessing a legacy encoding is not reliable)."""
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return raw.decode("utf-16")
        except UnicodeDecodeError:
            raise InputError(f"{path}: starts with a UTF-16 byte-order mark but is not UTF-16 text") from None
    if b"\x00" in raw[:8192]:
        raise InputError(f"{path}: binary content (a NUL byte at offset {raw.index(0)}), not a CSV text "
                         "file (Parquet files start with 'PAR1', gzip files with 1f 8b)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        hint = ""
        try:
            raw.decode("cp1252")
            hint = " (it looks like Latin-1/Windows-1252)"
        except UnicodeDecodeError:
            pass
        raise InputError(f"{path}: not UTF-8 text: byte 0x{raw[exc.start]:02x} at line {line} "
                         f"(offset {exc.start}){hint}; save it as UTF-8 CSV") from None


def _find_column(path: Path, header: list[str], name: str, option: str) -> int:
    names = [h.strip().lower() for h in header]
    want = name.strip().lower()
    if want not in names:
        raise InputError(
            f"{path}: missing column {name!r}{option} "
            f"(header has {', '.join(repr(h) for h in header) or 'nothing'})"
        )
    where = [i + 1 for i, n in enumerate(names) if n == want]
    if len(where) > 1:
        raise InputError(f"{path}: the header names column {name!r} {len(where)} times (columns "
                         f"{', '.join(map(str, where))}): which one holds the data is ambiguous")
    return names.index(want)


def _distinct(path: Path, header: list[str], **columns) -> None:
    """Refuse one column asked for in two roles (scores that are the labels would give AUC 1)."""
    seen: dict[int, str] = {}
    for role, i in columns.items():
        if i is None:
            continue
        if i in seen:
            raise InputError(f"{path}: column {header[i].strip()!r} is asked for as both the {seen[i]} and the "
                             f"{role} column")
        seen[i] = role


def read_client_file(path: str | Path, *, score_column: str = "score", label_column: str = "label",
                     id_column: str | None = None) -> ClientData:
    """Read one client file: CSV (UTF-8 with or without BOM, or UTF-16 with BOM), gzip-compressed
    CSV, or Parquet, recognised by content (not by name).

    Parameters
    ----------
    path : str or pathlib.Path
        The file.
    score_column, label_column : str, default "score" and "label"
        The columns holding the scores and the labels, matched ignoring case
        and surrounding spaces; other columns are ignored.
    id_column : str, optional
        A column holding each row's record identifier (text, surrounding
        spaces dropped; never empty): read into ``ids`` for the privacy ledger.

    Returns
    -------
    ClientData
        float64 scores and int8 labels in file order (and the identifiers
        with ``id_column``); ``source`` is ``str(path)``.

    Raises
    ------
    InputError
        One line naming the file, for a file that is missing, a folder,
        unreadable, binary, not UTF-8, corrupt gzip or Parquet, or whose
        content :func:`read_client_csv` refuses (Parquet: the same checks,
        null values included).  Parquet needs the optional ``pyarrow``
        (``pip install 'secure-auc[parquet]'``).

    Examples
    --------
    >>> import gzip, tempfile
    >>> from pathlib import Path
    >>> from secure_auc.data.io import read_client_file
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "client.csv.gz"
    ...     _ = path.write_bytes(gzip.compress(b"id,pred,clicked\\n7,0.9,1\\n8,0.25,0\\n"))
    ...     data = read_client_file(path, score_column="pred", label_column="clicked")
    >>> data.scores, data.labels
    (array([0.9 , 0.25]), array([1, 0], dtype=int8))
    """
    scores, labels, ids = _read_columns(path, score_column, label_column, id_column)
    return ClientData(scores, labels, str(path), ids)


def _read_columns(path: str | Path, score_column: str | None, label_column: str | None,
                  id_column: str | None = None, id_option: str = "--id-column") -> tuple:
    """(scores, labels, ids) of a client file of any form, each None when not asked for
    (``id_option``: where the identifier column was named, for messages)."""
    raw = _read_bytes(os.fspath(path))
    path = Path(path)
    if raw[:4] == PARQUET_MAGIC:
        return _read_parquet(path, score_column, label_column, id_column, id_option)
    return _parse_csv(path, _decode(path, raw), score_column, label_column, id_column, id_option)


def read_client_csv(path: str | Path, *, score_column: str = "score", label_column: str = "label",
                    id_column: str | None = None) -> ClientData:
    """Read one client file: a CSV with a header naming the columns ``score`` and ``label``.

    Column names are matched ignoring case and surrounding spaces; other
    columns are ignored; blank lines are skipped.  Labels may be written
    ``0``/``1``, ``0.0``/``1.0`` or ``true``/``false`` (any case).  Gzip
    and Parquet files are read too (:func:`read_client_file`).

    Parameters
    ----------
    path : str or pathlib.Path
        The file, UTF-8 (a leading byte-order mark is dropped).
    score_column, label_column : str, default "score" and "label"
        Other names for the two columns.

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
    return read_client_file(path, score_column=score_column, label_column=label_column, id_column=id_column)


def read_score_file(path: str | Path, *, score_column: str = "score") -> np.ndarray:
    """Read the scores alone from a file of any form :func:`read_client_file` reads (a
    client's scores for one evaluation, next to labels read once); other columns,
    a label column included, are ignored.

    Parameters
    ----------
    path : str or pathlib.Path
        The file: CSV, gzip-compressed CSV or Parquet.
    score_column : str, default "score"
        The column holding the scores, matched ignoring case and surrounding spaces.

    Returns
    -------
    numpy.ndarray of float64
        The scores in file order, every one finite.

    Raises
    ------
    InputError
        One line naming the file (and the row and column), as :func:`read_client_file`.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from secure_auc.data.io import read_score_file
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "epoch3.csv"
    ...     _ = path.write_text("id,score\\n7,0.9\\n8,0.25\\n")
    ...     read_score_file(path)
    array([0.9 , 0.25])
    """
    return _read_columns(path, score_column, None)[0]


def read_label_file(path: str | Path, *, label_column: str = "label") -> np.ndarray:
    """Read the labels alone (0/1 or true/false, any case) from a file of any form
    :func:`read_client_file` reads; other columns, a score column included, are ignored.
    A ``.npy`` file holds the labels alone, as an array of 0 and 1.

    Returns
    -------
    numpy.ndarray of int8

    Raises
    ------
    InputError
        One line naming the file (and the row and column), as :func:`read_client_file`.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from secure_auc.data.io import read_label_file
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "labels.csv"
    ...     _ = path.write_text("clicked\\ntrue\\n0\\n")
    ...     read_label_file(path, label_column="clicked")
    array([1, 0], dtype=int8)
    """
    if Path(path).suffix == ".npy":
        try:
            labels = np.load(path, allow_pickle=False).reshape(-1)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the labels {path}: {exc}") from None
        if not np.isin(labels, (0, 1)).all():
            raise InputError(f"{path}: labels must be 0 or 1")
        return labels.astype(np.int8)
    return _read_columns(path, None, label_column)[1]


def read_labels_and_ids(path: str | Path, *, label_column: str = "label", id_column: str = "id",
                        id_option: str = "--id-column") -> tuple[np.ndarray, np.ndarray]:
    """Read the labels and the record identifiers alone from a file of any form
    :func:`read_client_file` reads (a labels file of a deployed client).

    ``id_option`` names where the identifier column was given, in a message about a
    missing column.  A missing, empty or repeated identifier is refused naming the file,
    the row and the column.

    Returns
    -------
    (numpy.ndarray of int8, numpy.ndarray)
        The labels and the identifiers (text, or integers from Parquet), in file order.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from secure_auc.data.io import read_labels_and_ids
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "labels.csv"
    ...     _ = path.write_text("uid,label\\nann,1\\nbob,0\\nann,1\\n")
    ...     read_labels_and_ids(path, id_column="uid")
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: ...labels.csv: row 3, column 'uid': record identifier 'ann' appears again ...
    """
    _, labels, ids = _read_columns(path, None, label_column, id_column, id_option)
    return labels, ids


def _option_hint(name: str, default: str, option: str) -> str:
    return "" if name != default else f" (another name: {option})"


def _parse_csv(path: Path, text: str, score_column: str | None, label_column: str | None,
               id_column: str | None = None, id_option: str = "--id-column") -> tuple:
    """(scores, labels, ids) of a CSV file's text, each None when its column is not asked for."""
    import io

    reader = csv.reader(io.StringIO(text, newline=""))
    asked = [c for c in (score_column, label_column) if c is not None]
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(f"{path}: file is empty (expected a header with {' and '.join(map(repr, asked))})") from None
    except csv.Error as exc:
        raise InputError(f"{path}: line 1: not valid CSV ({exc})") from None
    si = None if score_column is None else \
        _find_column(path, header, score_column, _option_hint(score_column, "score", "--score-column"))
    li = None if label_column is None else \
        _find_column(path, header, label_column, _option_hint(label_column, "label", "--label-column"))
    ii = None if id_column is None else _find_column(path, header, id_column, f" ({id_option})")
    _distinct(path, header, score=si, label=li, identifier=ii)
    found = [i for i in (si, li) if i is not None]
    needs = f"column{'s' * (len(found) > 1)} " + " and ".join(repr(header[i].strip()) for i in found)
    width = max(found + ([] if ii is None else [ii])) + 1
    scores: list[float] = []
    labels: list[int] = []
    ids: list[str] = []
    row = 0
    try:
        for fields in reader:
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue  # blank line
            row += 1
            where = f"{path}: row {row} (line {reader.line_num})"
            if len(fields) < width:
                raise InputError(f"{where}: has {len(fields)} fields, needs {needs}")
            if len(fields) > len(header):
                raise InputError(f"{where}: has {len(fields)} fields, the header names {len(header)} (a stray "
                                 "comma or an unquoted comma in a field?)")
            if si is not None:
                text_value = fields[si].strip()
                try:  # a decimal number in ASCII: Python's float() would also take "1_000" and other scripts' digits
                    if not text_value.isascii() or "_" in text_value:
                        raise ValueError(text_value)
                    value = float(text_value)
                except ValueError:
                    raise InputError(f"{where}, column {header[si].strip()!r}: {text_value!r} is not a number") from None
                if not math.isfinite(value):
                    raise InputError(f"{where}, column {header[si].strip()!r}: {text_value!r} is not finite")
                scores.append(value)
            if li is not None:
                lab = _LABELS.get(fields[li].strip().lower())
                if lab is None:
                    raise InputError(
                        f"{where}, column {header[li].strip()!r}: {fields[li]!r} is not a label (use 0/1 or true/false)"
                    )
                labels.append(lab)
            if ii is not None:
                ident = fields[ii].strip()
                if not ident:
                    raise InputError(f"{where}, column {header[ii].strip()!r}: empty record identifier")
                ids.append(ident)
    except csv.Error as exc:
        raise InputError(f"{path}: line {reader.line_num}: not valid CSV ({exc})") from None
    if not row:
        raise InputError(f"{path}: has a header but no data rows")
    if ii is not None:
        _unique_ids(path, np.asarray(ids, dtype=np.str_), header[ii].strip())
    return (None if si is None else np.asarray(scores, dtype=np.float64),
            None if li is None else np.asarray(labels, dtype=np.int8),
            None if ii is None else np.asarray(ids, dtype=np.str_))


def _read_parquet(path: Path, score_column: str | None, label_column: str | None,
                  id_column: str | None = None, id_option: str = "--id-column") -> tuple:
    """(scores, labels, ids) of a Parquet file, each None when its column is not asked for."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"{path}: a Parquet file; reading it needs pyarrow: pip install 'secure-auc[parquet]'") from None
    try:
        schema = pq.read_schema(path)
        header = list(schema.names)
        si = None if score_column is None else \
            _find_column(path, header, score_column, _option_hint(score_column, "score", "--score-column"))
        li = None if label_column is None else \
            _find_column(path, header, label_column, _option_hint(label_column, "label", "--label-column"))
        ii = None if id_column is None else _find_column(path, header, id_column, f" ({id_option})")
        _distinct(path, header, score=si, label=li, identifier=ii)
        wanted = sorted({i for i in (si, li, ii) if i is not None})
        table = pq.read_table(path, columns=[header[i] for i in wanted])
    except InputError:
        raise
    except Exception as exc:  # pyarrow's ArrowInvalid, OSError, ...: a corrupt file
        raise InputError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    if table.num_rows == 0:
        raise InputError(f"{path}: has no data rows")

    def column(i):
        return _parquet_column(path, table.column(wanted.index(i)), header[i])

    scores = labels = ids = None
    if si is not None:
        sname, scores = header[si], column(si)
        try:
            scores = scores.astype(np.float64)
        except (TypeError, ValueError):
            raise InputError(f"{path}: column {sname!r} is not numeric (type {schema.field(si).type})") from None
        bad = ~np.isfinite(scores)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{path}: row {i + 1}, column {sname!r}: {scores[i]} is not finite")
    if li is not None:
        raw = column(li)
        if raw.dtype.kind in "OUS":
            mapped = np.array([_LABELS.get(str(v).strip().lower(), -1) for v in raw], dtype=np.int64)
        else:
            mapped = raw.astype(np.float64)
        bad = (mapped != 0) & (mapped != 1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{path}: row {i + 1}, column {header[li]!r}: {raw[i]!r} is not a label "
                             "(use 0/1 or true/false)")
        labels = mapped.astype(np.int8)
    if ii is not None:
        ids = column(ii)
        if ids.dtype.kind == "O":
            ids = np.asarray([str(v).strip() for v in ids], dtype=np.str_)
            if ids.size and np.strings.str_len(ids).min() == 0:
                i = int(np.argmin(np.strings.str_len(ids)))
                raise InputError(f"{path}: row {i + 1}, column {header[ii]!r}: empty record identifier")
        elif ids.dtype.kind not in "iu":
            raise InputError(f"{path}: column {header[ii]!r} holds {ids.dtype} values; record identifiers are "
                             "integers or text")
        _unique_ids(path, ids, header[ii])
    return scores, labels, ids


def _unique_ids(path: Path, ids: np.ndarray, name: str) -> None:
    """Refuse a record identifier that appears twice in one file (its label would count twice in a
    release), naming the file, the column and both rows."""
    if len(ids) < 2:
        return
    order = np.argsort(ids, kind="stable")
    same = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if same.size:
        later = order[same + 1]
        i = int(later.min())  # the first row that repeats an earlier one
        first = int(np.flatnonzero(ids == ids[i])[0])
        raise InputError(f"{path}: row {i + 1}, column {name!r}: record identifier {str(ids[i])!r} appears again "
                         f"(first in row {first + 1}); each record's label may count once per release")


def _parquet_column(path: Path, column, name: str) -> np.ndarray:
    if column.null_count:
        nulls = np.asarray(column.is_null())
        raise InputError(f"{path}: row {int(np.flatnonzero(nulls)[0]) + 1}, column {name!r}: missing value (null)")
    return column.to_numpy(zero_copy_only=False)


def same_files(paths) -> None:
    """Refuse a list of client files in which one file appears twice, under any spelling
    (relative or absolute path, symbolic or hard link).

    Raises
    ------
    InputError
        Naming both spellings.

    Examples
    --------
    >>> import os, tempfile
    >>> from pathlib import Path
    >>> from secure_auc.data.io import same_files, write_client_csv
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_client_csv(Path(tmp) / "a.csv", [0.5], [1])
    ...     os.symlink(Path(tmp) / "a.csv", Path(tmp) / "link.csv")
    ...     same_files([Path(tmp) / "a.csv", Path(tmp) / "link.csv"])
    Traceback (most recent call last):
        ...
    secure_auc.validation.InputError: .../link.csv: the same file as .../a.csv; each client file may be given once
    """
    import os

    seen: dict = {}
    for p in paths:
        try:
            st = os.stat(p)
            key = (st.st_dev, st.st_ino)
        except OSError:
            key = str(Path(p).absolute())  # a missing file is reported when it is read
        if key in seen:
            raise InputError(f"{p}: the same file as {seen[key]}; each client file may be given once")
        seen[key] = p


def write_client_file(path: str | Path, scores, labels) -> None:
    """Write a client file (0600: its owner only) in the form its name asks for: ``.parquet`` (needs pyarrow),
    ``.gz`` (gzip-compressed CSV), anything else CSV (:func:`write_client_csv`).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from secure_auc.data.io import read_client_file, write_client_file
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_client_file(Path(tmp) / "c.csv.gz", [0.25, 0.5], [0, 1])
    ...     back = read_client_file(Path(tmp) / "c.csv.gz")
    >>> back.scores.tolist(), back.labels.tolist()
    ([0.25, 0.5], [0, 1])
    """
    import gzip
    import io

    path = Path(path)
    _make_private(path)
    if path.suffix.lower() == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise InputError(f"{path}: writing Parquet needs pyarrow: pip install 'secure-auc[parquet]'") from None
        pq.write_table(pa.table({"score": np.asarray(scores, dtype=np.float64),
                                 "label": np.asarray(labels, dtype=np.int8)}), path)
        return
    if path.suffix.lower() == ".gz":
        text = io.StringIO(newline="")
        _write_csv(text, scores, labels)
        with gzip.open(path, "wt", encoding="utf-8", newline="") as handle:
            handle.write(text.getvalue())
        return
    write_client_csv(path, scores, labels)


def _make_private(path: Path) -> None:
    """Create ``path`` (or take the existing file) readable and writable by its owner only
    (0600, whatever the umask), before labels or scores are written to it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _write_csv(handle, scores, labels) -> None:
    w = csv.writer(handle)
    w.writerow(["score", "label"])
    w.writerows(zip((repr(float(s)) for s in scores), (int(y) for y in labels)))


def write_client_csv(path: str | Path, scores, labels) -> None:
    """Write a client file (readable by its owner only); float scores are written with full
    (round-trip) precision.

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
    _make_private(Path(path))
    with open(Path(path), "w", newline="", encoding="utf-8") as handle:
        _write_csv(handle, scores, labels)
