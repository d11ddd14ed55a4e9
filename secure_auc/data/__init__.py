"""Evaluation data: the built-in Criteo-like generator, client partitions, client files.

The generator (:mod:`.synthetic`, which loads scipy) is imported when one of its names is
first used, so that a process that only reads client files (a deployed client's service)
does not load it.
"""

from .io import ClientData, read_client_csv, read_client_file, same_files, write_client_csv
from .partition import SCHEMES, partition_indices, partition_owner

__all__ = [
    "ClientData",
    "read_client_csv",
    "read_client_file",
    "same_files",
    "write_client_csv",
    "SCHEMES",
    "partition_indices",
    "partition_owner",
    "CRITEO_SMALL",
    "CRITEO_LARGE",
    "DatasetSpec",
    "make_ctr_dataset",
]


def __getattr__(name):
    if name in ("CRITEO_SMALL", "CRITEO_LARGE", "DatasetSpec", "make_ctr_dataset"):
        from . import synthetic

        return getattr(synthetic, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
