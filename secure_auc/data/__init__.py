"""Evaluation data: the built-in Criteo-like generator, client partitions, client files."""

from .io import ClientData, read_client_csv, read_client_file, same_files, write_client_csv
from .partition import SCHEMES, partition_indices, partition_owner
from .synthetic import CRITEO_SMALL, CRITEO_LARGE, DatasetSpec, make_ctr_dataset

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
