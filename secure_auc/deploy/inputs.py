"""A deployed client's own inputs, read on its host: its labels, its source of scores, its ledger.

:func:`client_inputs` reads client k's ``[[clients]]`` entry of the configuration
(:mod:`.config`) into a :class:`ClientInputs`, which the client's service
(:func:`secure_auc.mpc.roles.host.client_service`) answers every evaluation with.
Everything is read and checked at start-up, so that a missing labels file, a broken
hook or a ledger over its budget stops the service at once (and the others are told
why: :func:`.service.refuse_at_start`).

**A scoring hook's code is the operator's own** (:func:`check_private_code`): a module,
or a folder on the import path, that another local user may write is refused, as ssh
refuses a key file others can write.  The epoch a hook is called with is a checked
``int`` (:func:`secure_auc.mpc.roles.control.check_epoch`): nothing the server sends
chooses a path.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..mpc.roles.control import check_epoch
from ..validation import InputError

__all__ = ["ClientInputs", "client_inputs", "load_hook", "check_private_code"]


@dataclass
class ClientInputs:
    """What client k's service holds: its ``labels``, its ``hook`` (``hook(epoch, client=k,
    evaluation=n)`` -> scores, or (scores, noise key)), its own ``ledger`` (optional) and
    what the ledger charges (``charged``: a :class:`secure_auc.dp.accountant.Records` or
    :class:`secure_auc.ClientData`, each record when it has ``ids``, else the labels as one
    dataset; or the same keyed by :meth:`secure_auc.Ledger.keyed`)."""

    labels: np.ndarray
    hook: object
    ledger: object = None
    charged: object = None
    name: str | None = None  # the dataset's name in the ledger's report


def client_inputs(config, k: int) -> ClientInputs:
    """Client ``k``'s inputs from its ``[[clients]]`` entry of ``config``
    (:class:`.config.DeployConfig`; paths on its host), its ledger read (and checked) now, so
    that a broken one stops the service at start-up."""
    from ..data.io import read_label_file, read_labels_and_ids
    from ..dp.accountant import Ledger, Records

    entry = config.clients[k]
    if entry.labels is None or entry.scores is None:
        raise InputError(f"{config.path}: clients[{k}] needs labels and scores on this client's host")
    hook = load_hook(entry.scores, config.path.resolve().parent)
    ledger = None if entry.ledger is None else Ledger(entry.ledger)
    if ledger is not None and entry.budget is not None:
        ledger.set_budget(entry.budget, entry.budget_delta)
    if entry.id_column is None:  # the labels charged as one dataset
        labels, ids = read_label_file(entry.labels, label_column=entry.label_column), None
    else:  # each record charged, as evaluate charges a file read with --id-column
        labels, ids = read_labels_and_ids(entry.labels, label_column=entry.label_column, id_column=entry.id_column,
                                          id_option=f"clients[{k}].id_column in {config.path}")
    charged = Records(labels, ids, str(entry.labels))
    if ledger is not None:
        charged = ledger.keyed(charged, k)  # keyed once: each evaluation charges the same records
        ledger.spent(charged)
    return ClientInputs(labels, hook, ledger, charged)


def load_hook(spec: str, folder: Path):
    """A client's source of scores: ``module:function`` (imported with ``folder`` first on
    ``sys.path``), called as ``function(epoch, client=k, evaluation=n)``; or a file per
    evaluation, ``path/with/{epoch}.npy``, or a CSV, gzip-compressed CSV or Parquet file with
    a column ``score`` (:func:`secure_auc.data.io.read_score_file`; other columns ignored).

    The epoch is checked (a non-negative integer) and the file's name is the configured one
    with that ``int`` alone in it: nothing the server sends chooses a path.  A module (or the
    folder) that another user may write is refused (:func:`check_private_code`)."""
    module, sep, name = spec.partition(":")
    if sep and "/" not in module and "{" not in spec and not module.endswith((".npy", ".csv")):
        import importlib.util

        what = f"the scoring hook {spec!r}"
        check_private_code(folder, folder, what)
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:
            raise InputError(f"cannot load the scoring hook {spec!r}: {exc}") from None
        if found is not None and found.origin and Path(found.origin).resolve().is_relative_to(folder.resolve()):
            check_private_code(Path(found.origin).resolve(), folder.resolve(), what)
        try:
            fn = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise InputError(f"cannot load the scoring hook {spec!r}: {exc}") from None
        if not callable(fn):
            raise InputError(f"the scoring hook {spec!r} is not callable")
        return fn

    def from_file(epoch, **_):
        path = folder / spec.format(epoch=check_epoch(epoch))
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        from ..data.io import read_score_file

        return read_score_file(path)

    return from_file


def _writable_by_others(st: os.stat_result) -> bool:
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) or st.st_uid not in (0, os.getuid())


def check_private_code(module_file: Path, folder: Path, what: str) -> None:
    """Refuse ``module_file`` (a hook's module) if it, or ``folder`` (put first on the
    import path) or a folder between them, is writable by another user or owned by one
    (root may own them): any of those could put its own code in the hook.  One line
    naming the file and its mode, as ssh names a key file others can read."""
    module_file, folder = Path(module_file), Path(folder)
    chain = [module_file] + [p for p in module_file.parents if p == folder or folder in p.parents]
    for path in chain:
        try:
            st = path.stat()
        except OSError as exc:
            raise InputError(f"{what}: cannot check {path} ({exc.strerror or exc})") from None
        if _writable_by_others(st):
            raise InputError(f"{what}: {path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}, "
                             f"owner uid {st.st_uid}); its code would run as this client: chmod go-w it")
