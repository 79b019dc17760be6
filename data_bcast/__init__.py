"""Read a dataset once and give it to every rank.

``h5file`` reads and validates the HDF5 format, ``layout`` places arrays in one
buffer (and deals training rows to shards), ``broadcast`` moves that buffer over MPI
(one shared copy per node), ``shard`` deals each node its own part of the training
split in shard mode, and ``convert`` writes the format from .npz files or the bundled
digits demo set. Only ``broadcast`` and ``shard`` import mpi4py; import them as
``data_bcast.broadcast`` and ``data_bcast.shard``.
"""
from .h5file import DataError, DataPlan, inspect_file, write_dataset
from .reader import load_dataset, read_into
from .layout import ArraySpec, Layout, array_views, chunk_ranges, plan_layout

__all__ = [
    "ArraySpec",
    "DataError",
    "DataPlan",
    "Layout",
    "array_views",
    "chunk_ranges",
    "inspect_file",
    "load_dataset",
    "plan_layout",
    "read_into",
    "write_dataset",
]
