"""Read a dataset on one rank and give every rank a read-only view of it, one host copy per node.

Only the root opens the file. It sends the plan (names, shapes, dtypes: a few
hundred bytes) with a pickled ``bcast``, then the payload as raw bytes with
buffer-based ``Bcast`` in fixed-size chunks. On each node the ranks share one
MPI-3 shared-memory window; only the node's leader takes part in the payload
broadcast, and the other ranks read the window in place. With ``shared=False``
every rank keeps a private copy instead (the simple scheme, kept for comparison
and for MPI libraries without shared windows).

Errors (a missing or malformed file) are found on the root and sent to every
rank, so all ranks raise the same :class:`DataError` together and none waits.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from .h5file import DataError, DataPlan, first_line, inspect_file, read_into
from .layout import array_views, chunk_ranges, plan_layout

DEFAULT_CHUNK_BYTES = 64 << 20


@dataclass
class SharedDataset:
    """The arrays of a dataset on this rank, plus where they live.

    ``arrays`` maps ``"train/x"``, ``"train/y"``, ``"val/x"``, ... to numpy views. With a
    shared window they stay valid until :meth:`close`, which every rank of the node calls.
    """

    plan: DataPlan
    arrays: dict[str, np.ndarray]
    node_rank: int
    node_size: int
    root_here: bool  # the root rank is on this node
    stats: dict[str, float] = field(default_factory=dict)
    _window: MPI.Win | None = None
    _comms: tuple = ()

    def close(self) -> None:
        self.arrays = {}
        if self._window is not None:
            self._window.Free()
            self._window = None
        for c in self._comms:
            if c != MPI.COMM_NULL:
                c.Free()
        self._comms = ()

    def __enter__(self) -> SharedDataset:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # Closing is collective; after an exception the other ranks may never arrive, so leave
        # the window to the job's abort rather than hang here.
        if exc_type is None:
            self.close()


def node_communicator(comm: MPI.Comm, root: int = 0) -> MPI.Comm:
    """Ranks that share memory with this one; the root (if here) is node rank 0."""
    return comm.Split_type(MPI.COMM_TYPE_SHARED, key=0 if comm.rank == root else comm.rank + 1)


def _agree(comm: MPI.Comm, root: int, error: str | None) -> None:
    """Send the root's error (or None) to all ranks; everyone raises together."""
    error = comm.bcast(error, root=root)
    if error is not None:
        raise DataError(error)


def broadcast_dataset(
    comm: MPI.Comm,
    path: str | None = None,
    *,
    val_fraction: float = 0.15,
    test_fraction: float = 0.15,
    seed: int = 0,
    root: int = 0,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    shared: bool = True,
    allow_external: bool = False,
) -> SharedDataset:
    """Collective: the root reads ``path``; every rank returns the same arrays.

    Non-root ranks never open the file (their ``path`` is ignored).

    >>> data = broadcast_dataset(MPI.COMM_WORLD, "digits.h5")   # doctest: +SKIP
    >>> data.arrays["train/x"].shape                            # doctest: +SKIP
    (987, 1, 8, 8)
    """
    plan_dict, error = None, None
    if comm.rank == root:
        try:
            plan_dict = inspect_file(path, val_fraction, test_fraction, seed, allow_external).to_dict()
        except DataError as exc:
            error = str(exc)
    plan_dict, error = comm.bcast((plan_dict, error), root=root)
    if error is not None:
        raise DataError(error)
    plan = DataPlan.from_dict(plan_dict)
    layout = plan_layout(plan.specs)

    node = node_communicator(comm, root)
    is_leader = node.rank == 0
    root_here = bool(node.allreduce(int(comm.rank == root)))
    window = None
    root_first = 0 if comm.rank == root else comm.rank + 1  # the root is rank 0 of every split
    if shared:
        window = MPI.Win.Allocate_shared(layout.total_bytes if is_leader else 0, 1, comm=node)
        mem, _ = window.Shared_query(0)
        buffer = np.frombuffer(mem, dtype=np.uint8, count=layout.total_bytes)
        carriers = comm.Split(0 if is_leader else MPI.UNDEFINED, key=root_first)
    else:
        buffer = np.empty(layout.total_bytes, dtype=np.uint8)
        carriers = comm.Split(0, key=root_first)  # every rank carries its own copy
    arrays = array_views(layout, buffer)
    stats: dict[str, float] = {"bytes": float(layout.total_bytes)}

    result = SharedDataset(plan, arrays, node.rank, node.size, root_here, stats, window, (node, carriers))
    error = None
    if comm.rank == root:
        t0 = time.perf_counter()
        try:
            read_into(plan, arrays)
        except DataError as exc:
            error = str(exc)
        except OSError as exc:
            error = f"{plan.path}: read failed ({first_line(exc)})"
        except MemoryError:
            error = f"{plan.path}: out of memory while reading it ({layout.total_bytes / 2**30:.2f} GiB of splits)"
        stats["read_seconds"] = time.perf_counter() - t0
    try:
        _agree(comm, root, error)
    except DataError:
        result.close()  # collective, and every rank is here: they all raise together
        raise
    # Any other exception is left to propagate without collective clean-up: the caller aborts the job.

    t0 = time.perf_counter()
    if carriers != MPI.COMM_NULL:
        for start, stop in chunk_ranges(layout.total_bytes, chunk_bytes):
            carriers.Bcast([buffer[start:stop], MPI.BYTE], root=0)
    node.Barrier()  # the window is filled before anyone on the node reads it
    stats["broadcast_seconds"] = time.perf_counter() - t0
    return result
