"""Shard mode: each node gets its own part of the training split, dealt by the streaming root.

``data.mode = "shard"`` is for a training split larger than one node's memory. The unit is the
node, not the worker: a node keeps one host copy in its shared memory whatever the number of its
workers, so sharding per node divides the memory a node needs by the number of nodes, and the
workers of a node share its shard at no extra cost. (Sharding per worker would divide it further,
but each worker's rows would then need a window of their own, and a node's workers would see
fewer rows each: 1/ranks rather than 1/nodes of the split.)

The rows are dealt round robin (row i of the split to shard i % shards; see
:func:`data_bcast.layout.deal_chunk`), so the root reads the split once, in order, chunk by chunk,
and sends each chunk with one ``Iscatterv`` among the node leaders: every leader receives its
rows of the chunk straight into its window while the root reads the next chunk. A small
``Scatter`` ahead of each chunk gives each leader the CRC-32 of its part, checked on arrival. The
root's CRC-32 of each array runs over the rows in the split's order, so the data's fingerprint is
the same in either mode and on any number of nodes. Validation and test go whole to every node,
by the broadcast of :mod:`data_bcast.stream`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from .checksum import crc32, crc32_combine
from .h5file import DataError, DataPlan
from .layout import ArraySpec, deal_chunk, plan_chunks, plan_layout, shard_members, shard_rows
from .reader import RowReader

SPLIT = "train"  # the split that is sharded; val and test stay whole
MIN_ROWS = 2  # rows a shard needs: training needs two, as inspect_file requires of a whole split


@dataclass(frozen=True)
class Shard:
    """This node's shard: ``index`` of ``count`` (-1 if the node holds none), ``rows`` of the split's
    ``total_rows``; ``carrier_shards[r]`` is the shard of the node whose leader has rank r among
    the leaders (-1 for none)."""

    index: int
    count: int
    rows: int
    total_rows: int
    carrier_shards: tuple[int, ...]

    def members(self) -> np.ndarray:
        """The rows of the whole training split that this node holds, in its order."""
        return shard_members(self.total_rows, self.count, self.index) if self.index >= 0 else np.arange(0)


def plan_shards(plan: DataPlan, nodes: int, node_index: int, root_alone: bool, root_trains: bool) -> Shard:
    """Which shard each node holds, the same on every rank; raises :class:`DataError` if a shard would
    get fewer than the 2 rows that training needs (as a whole split must have). Node 0 is the root's;
    a node holding only the root gets no shard unless ``root_trains`` (its rows would go untrained)."""
    skip = 1 if (root_alone and not root_trains and nodes > 1) else 0
    count = nodes - skip
    carriers = tuple([-1] * skip + list(range(count)))
    total = plan.spec(f"{SPLIT}/y").shape[0]
    if total < MIN_ROWS * count:
        raise DataError(f"{plan.path}: train has {total} rows, too few for the {count} nodes that data.mode = \"shard\" gives "
                        f"a part each (each needs at least {MIN_ROWS}); use fewer nodes or data.mode = \"replicate\"")
    index = carriers[node_index]
    return Shard(index, count, int(shard_rows(total, count, index)) if index >= 0 else 0, total, carriers)


def scatter_shards(carriers: MPI.Comm, plan: DataPlan, shard: Shard, reader: RowReader | None, arrays: dict[str, np.ndarray],
                   chunk_bytes: int, crcs: dict[str, int], stats: dict, error: str | None, fault=None,
                   pieces=None) -> tuple[str | None, bool, int]:
    """Collective over the node leaders (the root is rank 0): deal the training arrays into each
    leader's ``arrays``. Returns (this rank's error, whether the root stopped, chunks sent).

    ``error`` is the root's error so far (it then stops at once, and all stop with it); a leader
    whose part arrives damaged records it and goes on, so that every leader ends at the same chunk.
    ``crcs`` gets the root's CRC-32 of each array in the split's order; ``fault(k, message)``, if
    given, may damage message k after its CRCs were taken (tests). ``pieces`` is a thread pool for the
    root's raw reads (:meth:`~data_bcast.reader.RowReader.read_raw`), where the file allows them.
    """
    is_root = carriers.rank == 0
    mine = shard.carrier_shards[carriers.rank]
    work = []
    for field in ("x", "y"):
        whole = plan.spec(f"{SPLIT}/{field}")
        work += [(whole, c) for c in plan_chunks(plan_layout([whole]), chunk_bytes)]
    biggest = max((c.nbytes for _, c in work), default=0)
    messages = [np.empty(biggest, dtype=np.uint8) for _ in range(2)] if is_root else [None, None]
    staging = np.empty(biggest, dtype=np.uint8) if is_root else None
    row_cache: dict = {}  # a row bigger than a chunk, read once for all its pieces
    header = np.zeros(2, dtype=np.int64)  # (1 if the root failed, CRC-32 of this leader's part)
    pending = None  # (request, spec, chunk, k, expected CRC, received bytes): on its way while the next is read
    read_seconds = 0.0
    stopped = False
    for k in range(len(work) + 1):
        item = work[k] if k < len(work) else None
        headers = None
        if item is not None:
            spec, chunk = item
            row_bytes = spec.nbytes // spec.shape[0]
            deal = deal_chunk(chunk, 0, row_bytes, shard.count)
            counts, displacements = _per_carrier(deal.counts, shard.carrier_shards), _per_carrier(deal.displacements, shard.carrier_shards)
            if is_root and error is None:
                t = time.perf_counter()
                try:
                    message = messages[k % 2][: chunk.nbytes]
                    _read_dealt(reader, spec, chunk, deal, row_bytes, staging, message, row_cache, crcs,
                                lambda: pending[0].Test() if pending else None, pieces)
                except DataError as exc:
                    error = str(exc)
                read_seconds += time.perf_counter() - t
                if error is None:
                    headers = np.zeros((carriers.size, 2), dtype=np.int64)
                    for r in range(carriers.size):
                        if counts[r]:
                            headers[r, 1] = crc32(message[displacements[r] : displacements[r] + counts[r]])
                    if fault is not None:
                        fault(k, message)
            if is_root and error is not None:
                headers = np.ones((carriers.size, 2), dtype=np.int64)
        if pending is not None:
            request, done_spec, done_chunk, done_k, expected, received = pending
            request.Wait()
            pending = None
            if received.size and error is None and crc32(received) != expected:
                error = (f"{plan.path}: the data arrived damaged: chunk {done_k} of "
                         f"{done_spec.name} (rows {done_chunk.rows[0]}..{done_chunk.rows[1] - 1}) has CRC-32 "
                         f"{crc32(received):08x} for this node's part, the root sent {expected:08x}")
        if item is None:
            break
        carriers.Scatter([headers, MPI.INT64_T] if is_root else None, [header, MPI.INT64_T], root=0)
        if header[0]:
            stopped = True
            break
        target = arrays[spec.name].reshape(-1).view(np.uint8) if mine >= 0 else np.empty(0, dtype=np.uint8)
        start = int(deal.starts[mine]) if mine >= 0 else 0
        received = target[start : start + int(counts[carriers.rank])]
        send = [messages[k % 2][: chunk.nbytes], counts.tolist(), displacements.tolist(), MPI.BYTE] if is_root else None
        request = carriers.Iscatterv(send, [received, MPI.BYTE], root=0)
        pending = (request, spec, chunk, k, int(header[1]), received)
    stats["read_seconds"] = stats.get("read_seconds", 0.0) + read_seconds
    return error, stopped, len(work)


def _per_carrier(per_shard: np.ndarray, carrier_shards: tuple[int, ...]) -> np.ndarray:
    """A per-shard vector laid out by leader rank (0 for a leader without a shard)."""
    shards = np.asarray(carrier_shards)
    return np.where(shards >= 0, per_shard[np.maximum(shards, 0)], 0).astype(np.int64)


def _read_dealt(reader: RowReader, spec: ArraySpec, chunk, deal, row_bytes: int, staging: np.ndarray, message: np.ndarray,
                row_cache: dict, crcs: dict[str, int], progress, pieces=None) -> None:
    """The root's part of one chunk: read its rows in the split's order (chaining the array's
    CRC-32 over them), then lay them out shard after shard in ``message``. ``progress`` lets the
    message in flight move (MPI progresses a non-blocking collective inside MPI calls)."""
    first, last = chunk.rows
    sample = tuple(spec.shape[1:])
    if deal.order is not None:
        rows = staging[: chunk.nbytes].view(np.dtype(spec.dtype)).reshape((last - first,) + sample)
        if pieces is not None and reader.raw_offset(spec.name) is not None:
            crc = reader.read_raw(spec.name, first, last, rows, pieces)  # checksummed where it was read
        else:
            reader.read_into(spec.name, first, last, rows)
            crc = crc32(staging[: chunk.nbytes])
        progress()
        crcs[spec.name] = crc32_combine(crcs.get(spec.name, 0), crc, chunk.nbytes)
        np.take(rows, deal.order, axis=0, out=message.view(np.dtype(spec.dtype)).reshape(rows.shape))
        return
    if row_cache.get("row") != (spec.name, first):
        row = np.empty((1,) + sample, dtype=np.dtype(spec.dtype))
        reader.read_into(spec.name, first, first + 1, row)
        progress()
        row_cache.update(row=(spec.name, first), bytes=row.view(np.uint8).reshape(-1))
    skip = chunk.offset - first * row_bytes
    message[:] = row_cache["bytes"][skip : skip + chunk.nbytes]
    crcs[spec.name] = crc32(message, crcs.get(spec.name, 0))
