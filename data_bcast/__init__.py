"""Read a dataset once and give it to every rank.

``h5file`` reads and validates the HDF5 format, ``layout`` places arrays in one
buffer, ``broadcast`` moves that buffer over MPI (one shared copy per node), and
``convert`` writes the format from .npz files or the bundled digits demo set.
Only ``broadcast`` imports mpi4py; import it as ``data_bcast.broadcast``.
"""
from .h5file import DataError, DataPlan, inspect_file, load_dataset, read_into, write_dataset
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
