"""Give a dataset from one rank to every rank, one host copy per node, checksummed.

Only the root opens the file. It sends the plan (names, shapes, dtypes: a few hundred bytes) with
a pickled ``bcast``, then the payload goes in chunks to the node leaders (:mod:`data_bcast.stream`)
and lands in each node's shared memory (:mod:`data_bcast.nodes`). ``mode="replicate"`` (the
default) gives every node the whole training split; ``mode="shard"`` gives each node its own part
of it (:mod:`data_bcast.shard`), with validation and test still whole everywhere.

Errors (a missing or malformed file, NaN found while streaming, a chunk that arrives damaged) are
agreed on by all ranks (:mod:`data_bcast.agreement`), so all raise the same :class:`DataError`
together and none waits.

The names that the rest of evens imports from here are defined in the modules that own them and
re-exported below.
"""
from __future__ import annotations

import time

from .agreement import first_error, located
from .checksum import fingerprint
from .h5file import DataError, DataPlan, inspect_file
from .host import Populator, prefault, usable_cores
from .layout import array_views, plan_layout, shard_specs
from .nodes import SharedDataset, carrier_communicator, free_comms, group_by_node, node_communicator, open_buffer
from .options import MODES, LoadOptions
from .shard import SPLIT, Shard, plan_shards
from .stream import MAX_READ_THREADS, message_limit, share_within_node, stream_payload

__all__ = [
    "LoadOptions",
    "MAX_READ_THREADS",
    "MODES",
    "Populator",
    "SharedDataset",
    "broadcast_dataset",
    "fingerprint",
    "first_error",
    "located",
    "message_limit",
    "node_communicator",
    "prefault",
    "usable_cores",
]

def broadcast_dataset(comm, path: str | None = None, options: LoadOptions = LoadOptions(), *, root: int = 0,
                      root_trains: bool = True, handable: bool = False) -> SharedDataset:
    """Collective: the root streams ``path`` to every rank; every rank returns the arrays its node holds.

    Non-root ranks never open the file (their ``path`` is ignored). The root reads chunk k+1
    while chunk k is on its way (a non-blocking broadcast among node leaders), so its memory
    holds a few chunks, not the arrays; each chunk's CRC-32 travels ahead of it, and every
    leader checks what it received. ``stats["fingerprint"]`` names the data sent (see
    :func:`~data_bcast.checksum.fingerprint`); it is the same in either ``mode`` and on any number of nodes.

    ``options`` (a :class:`LoadOptions`, or anything with its fields) says how.
    ``mode="shard"`` gives each node a disjoint part of the training split (round robin over its
    rows; together they cover it), and val and test whole; ``root_trains=False`` says that the
    root does not train, so a node holding only the root gets no part. ``handable`` makes a private
    copy (``shared_memory=False``) one that a training process can be handed, as the shared one is. A part of fewer than 2 rows
    is a :class:`DataError` on every rank before anything is sent.

    The root's reading threads matter where arrays can be read as the file's own bytes (stored
    contiguous, see :meth:`~data_bcast.reader.RowReader.raw_offset`).

    >>> data = broadcast_dataset(MPI.COMM_WORLD, "digits.h5")   # doctest: +SKIP
    >>> data.arrays["train/x"].shape                            # doctest: +SKIP
    (987, 1, 8, 8)
    """
    if options.mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {options.mode!r}")
    shared = options.shared_memory
    plan = _share_plan(comm, path, options, root)
    node, leaders, root_here = group_by_node(comm, root)
    shard = _plan_shard(comm, node, leaders, plan, root, root_trains) if options.mode == "shard" else None
    layout = plan_layout(shard_specs(plan.specs, shard.rows, SPLIT) if shard else plan.specs)
    memory, error = None, None
    try:
        memory, populator = open_buffer(layout, node, shared, handable)
    except OSError as exc:  # (every rank of a node raises together)
        error = str(exc)
    error = first_error(comm, error, root)  # no node may start to stream while another has no memory
    if error is not None:
        if memory is not None:
            populator.join()
            memory.close()
        free_comms(node, leaders)
        raise DataError(error)
    buffer = memory.buffer
    # Leaders carry the payload; with private copies in replicate mode every rank does. (Sharded
    # private copies go to the leaders, which then hand their node's part to their node's ranks.)
    carriers = carrier_communicator(comm, leaders, root, leaders_carry=bool(shared or shard))
    arrays = array_views(layout, buffer)
    stats = _first_stats(plan, shard)
    comms = (node, leaders) if carriers is leaders else (node, leaders, carriers)
    result = SharedDataset(plan, arrays, node.rank, node.size, root_here, stats, shard, memory, comms, layout=layout)
    message_bytes = min(max(1, int(options.chunk_mb * (1 << 20))), message_limit())

    t0 = time.perf_counter()
    try:
        error = stream_payload(carriers, plan, shard, layout, buffer, arrays, message_bytes, stats, options.read_threads)
        error = first_error(comm, error, root)  # (the node's other ranks get their share's pages meanwhile)
    finally:
        populator.join()  # the data is in: what is not yet populated was touched by it
    if error is not None:
        node.Barrier()
        result.close()  # collective, and every rank is here: they all raise together
        raise DataError(error)
    if shard and not shared:
        share_within_node(node, buffer, message_bytes)
    node.Barrier()  # the copy is filled before anyone on the node reads it
    stats["broadcast_seconds"] = time.perf_counter() - t0
    stats["fingerprint"] = comm.bcast(stats.get("fingerprint"), root=root)
    return result


def _share_plan(comm, path: str | None, options: LoadOptions, root: int) -> DataPlan:
    """Collective: the root inspects the file and every rank gets its plan, or raises the root's
    :class:`DataError` (with where it happened)."""
    plan_dict, error = None, None
    if comm.rank == root:
        try:
            plan_dict = inspect_file(path, options.val_fraction, options.test_fraction, options.split_seed,
                                     options.allow_external).to_dict()
        except DataError as exc:
            error = located(str(exc))
    plan_dict, error = comm.bcast((plan_dict, error), root=root)
    if error is not None:
        raise DataError(error)
    return DataPlan.from_dict(plan_dict)


def _plan_shard(comm, node, leaders, plan: DataPlan, root: int, root_trains: bool) -> Shard:
    """Collective: this node's shard, from the same arithmetic on every rank, so that all raise
    together, before anything is sent, if a shard would be too small (then the communicators go)."""
    nodes, node_index = node.bcast((leaders.size, leaders.rank) if node.rank == 0 else None, root=0)
    root_alone = comm.bcast(node.size == 1, root=root)
    try:
        return plan_shards(plan, nodes, node_index, root_alone, root_trains)
    except DataError:
        free_comms(leaders, node)
        raise


def _first_stats(plan: DataPlan, shard: Shard | None) -> dict:
    """The stats known before anything is sent: the whole dataset's bytes, and the shards, if any."""
    stats: dict = {"bytes": float(plan_layout(plan.specs).total_bytes)}
    if shard:
        stats.update(shards=shard.count, shard_rows=shard.rows)
    return stats
