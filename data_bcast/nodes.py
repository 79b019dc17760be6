"""The ranks grouped by node, and the memory each node holds the dataset in.

On each node the ranks share one copy in memory (:mod:`data_bcast.memory`), so a node holds a single
host copy however many ranks it runs; only the node's leader takes part in the payload's broadcast,
and the other ranks read the copy in place. With ``shared=False`` every rank keeps a private copy
instead (the simple scheme, kept for comparison). :class:`SharedDataset` holds the views into that
memory and frees it, with the communicators.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from .h5file import DataPlan
from .host import Populator, prefault
from .layout import Layout
from .memory import NodeMemory, shared_node_memory
from .shard import Shard


@dataclass
class SharedDataset:
    """The arrays of a dataset on this rank, plus where they live.

    ``arrays`` maps ``"train/x"``, ``"train/y"``, ``"val/x"``, ... to numpy views into ``memory``,
    whose descriptor a training process may be handed; ``layout`` places them there (:meth:`specs`
    says it in plain values, from which ``data_bcast.layout.unpack_arrays`` makes the same views).
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
    memory: NodeMemory | None = None
    _comms: tuple = ()
    layout: Layout | None = None  # where each array lies in ``memory``

    @property
    def node_comm(self) -> MPI.Comm:
        """The communicator of this node's ranks (valid until :meth:`close`)."""
        return self._comms[0]

    def specs(self) -> list[tuple[str, tuple[int, ...], str]]:
        """The arrays' names, shapes and dtypes in ``layout``'s order: plain values that a process handed
        ``memory.fd`` turns into the same views with ``unpack_arrays(specs, buffer)`` (the same layout)."""
        return [spec.as_tuple() for spec in self.layout.specs]

    def close(self) -> None:
        self.arrays = {}
        if self.memory is not None:
            self.memory.close()
            self.memory = None
        free_comms(*self._comms)
        self._comms = ()

    def __enter__(self) -> SharedDataset:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # Freeing the communicators is collective; after an exception the other ranks may never
        # arrive, so leave them to the job's end rather than hang here.
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


def open_buffer(layout: Layout, node: MPI.Comm, shared: bool, handable: bool = False) -> tuple[NodeMemory, Populator]:
    """Collective on ``node`` if ``shared``: (the :class:`~data_bcast.memory.NodeMemory` of
    ``layout.total_bytes`` the data lands in, the :class:`~data_bcast.host.Populator` mapping its
    pages meanwhile).

    Shared memory is one copy for the node, which every rank of it maps; each rank maps the pages of
    its share. Where the kernel cannot populate in the background, the whole node prefaults it
    instead, before any data arrives. A private copy is this rank's alone: anonymous memory (huge
    pages where the kernel gives them), or with ``handable`` a memfd that a training process can be
    handed (shared memory: 4 KiB pages, about twice the time to fill at 16 MiB)."""
    if not shared:
        memory = NodeMemory.private(layout.total_bytes) if handable else NodeMemory.anonymous(layout.total_bytes)
        populator = Populator(memory.buffer)
        populator.start()
        return memory, populator
    memory = shared_node_memory(layout.total_bytes, node)
    buffer = memory.buffer
    share = -(-buffer.size // node.size)  # each rank of the node gets the pages of its share
    populator = Populator(buffer, min(buffer.size, node.rank * share), min(buffer.size, (node.rank + 1) * share))
    if not node.allreduce(int(populator.start() or populator.hi <= populator.lo), op=MPI.MIN):
        populator.join()
        prefault(buffer, node)
    return memory, populator

