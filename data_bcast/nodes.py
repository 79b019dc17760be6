"""The ranks grouped by node, and the memory each node holds the dataset in.

On each node the ranks share one MPI-3 shared-memory window, so a node holds a single host copy
however many ranks it runs; only the node's leader takes part in the payload's broadcast, and the
other ranks read the window in place. With ``shared=False`` every rank keeps a private buffer
instead (the simple scheme, kept for comparison and for MPI libraries without shared windows).
:class:`SharedDataset` holds the views into that memory and frees it, with the communicators.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from .h5file import DataPlan
from .host import Populator, prefault
from .layout import Layout
from .shard import Shard


@dataclass
class SharedDataset:
    """The arrays of a dataset on this rank, plus where they live.

    ``arrays`` maps ``"train/x"``, ``"train/y"``, ``"val/x"``, ... to numpy views. With a
    shared window they stay valid until :meth:`close`, which every rank of the node calls.
    In shard mode ``"train/..."`` hold this node's shard (``shard`` says which rows of the split
    they are), while ``plan`` still describes the whole split.
    """

    plan: DataPlan
    arrays: dict[str, np.ndarray]
    node_rank: int
    node_size: int
    root_here: bool  # the root rank is on this node
    stats: dict[str, float] = field(default_factory=dict)
    shard: Shard | None = None  # None: the whole training split (mode "replicate")
    _window: MPI.Win | None = None
    _comms: tuple = ()

    def close(self) -> None:
        self.arrays = {}
        if self._window is not None:
            self._window.Free()
            self._window = None
        free_comms(*self._comms)
        self._comms = ()

    def __enter__(self) -> SharedDataset:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # Closing is collective; after an exception the other ranks may never arrive, so leave
        # the window to the job's abort rather than hang here.
        if exc_type is None:
            self.close()


def free_comms(*comms: MPI.Comm) -> None:
    """Free each communicator this rank belongs to (``COMM_NULL`` stands for one it does not)."""
    for c in comms:
        if c != MPI.COMM_NULL:
            c.Free()


def node_communicator(comm: MPI.Comm, root: int = 0) -> MPI.Comm:
    """Ranks that share memory with this one; the root (if here) is node rank 0.

    ``EVENS_SIMULATED_NODES=k`` (tests and benchmarks on one machine) splits the ranks into k
    pretend nodes by rank modulo k instead, so that k leaders really broadcast among themselves;
    each pretend node still shares memory, since all its ranks are on this machine.
    """
    key = _root_first(comm, root)
    simulated = int(os.environ.get("EVENS_SIMULATED_NODES", "0") or 0)
    if simulated > 1:
        return comm.Split((comm.rank - root) % simulated, key=key)
    return comm.Split_type(MPI.COMM_TYPE_SHARED, key=key)


def group_by_node(comm: MPI.Comm, root: int) -> tuple[MPI.Comm, MPI.Comm, bool]:
    """Collective: (this rank's node, the node leaders or ``COMM_NULL`` off them, whether the root
    is on this node). The root is rank 0 of both communicators it belongs to."""
    node = node_communicator(comm, root)
    root_here = bool(node.allreduce(int(comm.rank == root)))
    leaders = comm.Split(0 if node.rank == 0 else MPI.UNDEFINED, key=_root_first(comm, root))
    return node, leaders, root_here


def carrier_communicator(comm: MPI.Comm, leaders: MPI.Comm, root: int, leaders_carry: bool) -> MPI.Comm:
    """The ranks that receive the payload from the root: the node leaders if ``leaders_carry``, else
    (private copies, every rank its own) a copy of ``comm`` with the root as rank 0."""
    return leaders if leaders_carry else comm.Split(0, key=_root_first(comm, root))


def _root_first(comm: MPI.Comm, root: int) -> int:
    """A ``Split`` key that makes the root rank 0 and keeps the others in order."""
    return 0 if comm.rank == root else comm.rank + 1


def open_buffer(layout: Layout, node: MPI.Comm, shared: bool) -> tuple[MPI.Win | None, np.ndarray, Populator]:
    """Collective on ``node`` if ``shared``: (the window or None, a flat uint8 buffer of
    ``layout.total_bytes``, the :class:`~data_bcast.host.Populator` mapping its pages meanwhile).

    A shared window is allocated by the leader and seen by every rank of the node; each rank maps
    the pages of its share of it. Where the kernel cannot populate in the background, the whole node
    prefaults the window instead, before any data arrives. A private buffer is this rank's alone."""
    if not shared:
        buffer = np.empty(layout.total_bytes, dtype=np.uint8)
        populator = Populator(buffer)
        populator.start()
        return None, buffer, populator
    window = MPI.Win.Allocate_shared(layout.total_bytes if node.rank == 0 else 0, 1, comm=node)
    mem, _ = window.Shared_query(0)
    buffer = np.frombuffer(mem, dtype=np.uint8, count=layout.total_bytes)
    share = -(-buffer.size // node.size)  # each rank of the node gets the pages of its share
    populator = Populator(buffer, min(buffer.size, node.rank * share), min(buffer.size, (node.rank + 1) * share))
    if not node.allreduce(int(populator.start() or populator.hi <= populator.lo), op=MPI.MIN):
        populator.join()
        prefault(buffer, node)
    return window, buffer, populator
