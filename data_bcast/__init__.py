"""Read a dataset once and give it to every rank.

``h5file`` reads and validates the HDF5 format, ``reader`` reads the arrays it plans,
``layout`` places arrays in one buffer (and deals training rows to shards), and
``broadcast`` moves that buffer over MPI, composing ``nodes`` (the ranks of each node
and its one shared copy), ``stream`` (the chunks, CRC-checked), ``shard`` (each node
its own part of the training split in shard mode) and ``agreement`` (errors all ranks
raise together). ``host`` maps a buffer's pages ahead of the data, ``checksum`` holds
the CRC-32s, and ``convert`` writes the format from .npz files (read header first and in
blocks by ``npz_members``) or the bundled digits demo set, under the exclusive temporary
names of ``exclusive``. Only ``nodes``, ``stream``, ``shard`` and ``agreement`` import mpi4py; this
package does not import them, so import ``data_bcast.broadcast`` for the broadcast.
"""
from .h5file import DataError, DataPlan, inspect_file, write_dataset
from .layout import ArraySpec, Layout, array_views, chunk_ranges, plan_layout
from .reader import load_dataset, read_into

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
