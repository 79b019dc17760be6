"""The payload, streamed from the root to the carriers chunk by chunk, each chunk checked by its CRC-32.

The carriers are the ranks that receive the payload (the node leaders; with private copies, every
rank), with the root as carrier rank 0. The root reads chunk k+1 (whole rows, at most
``chunk_bytes``) straight into its buffer while chunk k travels by a non-blocking ``Ibcast``, so its
memory never holds more than the buffer every node holds anyway. A two-word ``Bcast`` ahead of each
chunk carries its CRC-32, or the root's error; every carrier checks what it received, and all stop
at the same chunk. The root's per-array CRC-32s make the data's fingerprint. In shard mode the
training split is dealt first (:func:`data_bcast.shard.scatter_shards`), then the rest broadcast.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from mpi4py import MPI

from .checksum import crc32, crc32_combine, fingerprint
from .h5file import DataError, DataPlan, first_line
from .host import usable_cores
from .layout import Chunk, Layout, chunk_ranges, plan_chunks
from .reader import ROW_BLOCK_BYTES, RowReader
from .shard import SPLIT, Shard, scatter_shards

INT_COUNT_LIMIT = (1 << 31) - 1  # MPI's count is a C int: no message may hold more elements
MAX_READ_THREADS = 8  # the root's reading threads, at most, when not told how many


def message_limit() -> int:
    """The largest message, in bytes, that the broadcast sends: below MPI's int count limit (2^31 - 1)
    whatever the chunk size. ``EVENS_MAX_MESSAGE_BYTES`` lowers it, so that tests exercise the
    many-message path of arrays over 2 GiB without allocating 2 GiB."""
    asked = int(os.environ.get("EVENS_MAX_MESSAGE_BYTES", "0") or 0)
    return min(INT_COUNT_LIMIT, asked) if asked > 0 else INT_COUNT_LIMIT


def stream_payload(carriers: MPI.Comm, plan: DataPlan, shard: Shard | None, layout: Layout, buffer: np.ndarray,
                   arrays: dict[str, np.ndarray], chunk_bytes: int, stats: dict, read_threads: int = 0) -> str | None:
    """Collective over ``carriers`` (nothing to do off them, where it is ``COMM_NULL``): the root reads
    and sends chunk by chunk, the others receive and check. Returns this rank's error, or None.

    The root reads with ``read_threads`` threads (0: one per core it may run on, at most
    :data:`MAX_READ_THREADS`). It adds ``stats["fingerprint"]`` when all went well."""
    if carriers == MPI.COMM_NULL:
        return None
    read_threads = read_threads if read_threads > 0 else usable_cores(MAX_READ_THREADS)
    is_root = carriers.rank == 0
    chunks = plan_chunks(layout, chunk_bytes)
    reader, pieces, error = None, None, None
    crcs: dict[str, int] = {}
    if is_root:
        try:
            reader = RowReader(plan)
        except (OSError, DataError) as exc:
            error = f"{plan.path}: cannot open it to read ({first_line(exc)})"
        pieces = ThreadPoolExecutor(max(1, read_threads), thread_name_prefix="evens-piece")  # for raw reads
    try:
        first_k = 0
        if shard is not None:
            chunks = [c for c in chunks if not c.name.startswith(f"{SPLIT}/")]
            error, stopped, first_k = scatter_shards(carriers, plan, shard, reader, arrays, chunk_bytes, crcs, stats, error,
                                                     _fault_hook, pieces)
            if stopped:
                chunks = []
        error = _broadcast_chunks(carriers, plan, chunks, first_k, reader, buffer, arrays, crcs, stats, error, pieces)
    finally:
        if reader is not None:
            reader.close()
        if pieces is not None:
            pieces.shutdown(wait=True)
    stats["chunks"] = first_k + len(chunks)
    if error is None and is_root:
        stats["fingerprint"] = fingerprint(crcs)
    return error


def share_within_node(node: MPI.Comm, buffer: np.ndarray, message_bytes: int) -> None:
    """Collective on ``node``: the leader's private buffer copied to the node's other ranks (private
    copies in shard mode, where only the leaders receive from the root)."""
    for start, stop in chunk_ranges(buffer.size, message_bytes):
        node.Bcast([buffer[start:stop], MPI.BYTE], root=0)


def _broadcast_chunks(carriers: MPI.Comm, plan: DataPlan, chunks: list[Chunk], first_k: int, reader: RowReader | None,
                      buffer: np.ndarray, arrays: dict[str, np.ndarray], crcs: dict[str, int], stats: dict, error: str | None,
                      pieces=None) -> str | None:
    """Broadcast ``chunks`` (numbered from ``first_k``) to every carrier, reading chunk k+1 while chunk k travels.

    The root reads (and checksums) on threads of its own while its main thread sits in MPI's wait
    for the chunk on its way, so the broadcast moves at MPI's pace, not only between two reads.
    Raw reads go to the ``pieces`` pool. The threads never call MPI."""
    is_root = carriers.rank == 0
    header = np.zeros(2, dtype=np.int64)  # (1 if the root failed, CRC-32 of the chunk)
    pending = None  # (request, chunk, k, crc): the chunk on its way while the next is read
    lead = ThreadPoolExecutor(1, thread_name_prefix="evens-read") if is_root and chunks else None
    seconds = [0.0]
    try:
        for i in range(len(chunks) + 1):
            k = first_k + i
            chunk = chunks[i] if i < len(chunks) else None
            crc = 0
            reading = None
            if is_root and chunk is not None and error is None:
                reading = lead.submit(_read_chunk, reader, chunk, buffer, arrays, pieces, seconds)
            if pending is not None:
                error = _wait_and_check(pending, plan, buffer, is_root, error)
                pending = None
            if reading is not None:
                crc, error = _take_read(reading, chunk, k, buffer, crcs)
            if chunk is None:
                break
            header[:] = (1 if (is_root and error is not None) else 0, crc)
            carriers.Bcast(header, root=0)
            if header[0]:
                break
            request = carriers.Ibcast([buffer[chunk.offset : chunk.offset + chunk.nbytes], MPI.BYTE], root=0)
            pending = (request, chunk, k, int(header[1]))
    finally:
        if lead is not None:
            lead.shutdown(wait=True)
    stats["read_seconds"] = stats.get("read_seconds", 0.0) + seconds[0]
    return error


def _wait_and_check(pending: tuple, plan: DataPlan, buffer: np.ndarray, is_root: bool, error: str | None) -> str | None:
    """Wait for the chunk on its way; a receiving carrier without an error yet checks its CRC-32.
    Returns the carrier's error, or None."""
    request, chunk, k, sent_crc = pending
    request.Wait()
    if is_root or error is not None:
        return error
    got = crc32(buffer[chunk.offset : chunk.offset + chunk.nbytes])
    if got == sent_crc:
        return None
    return (f"{plan.path}: the data arrived damaged: chunk {k} of "
            f"{chunk.name} (rows {chunk.rows[0]}..{chunk.rows[1] - 1}) has CRC-32 "
            f"{got:08x}, the root sent {sent_crc:08x}")


def _take_read(reading: Future, chunk: Chunk, k: int, buffer: np.ndarray, crcs: dict[str, int]) -> tuple[int, str | None]:
    """The root's read of chunk ``k``, done: (its CRC-32, None), chained into its array's CRC-32;
    or (0, the error) if the read failed."""
    try:
        crc = reading.result()
    except DataError as exc:
        return 0, str(exc)
    crcs[chunk.name] = crc32_combine(crcs.get(chunk.name, 0), crc, chunk.nbytes)
    _fault_hook(k, buffer[chunk.offset : chunk.offset + chunk.nbytes])
    return crc, None


def _read_chunk(reader: RowReader, chunk: Chunk, buffer: np.ndarray, arrays: dict[str, np.ndarray], pieces, seconds: list) -> int:
    """Read the rows of ``chunk`` into the buffer and return its CRC-32: whole rows straight into
    place (from the file's bytes, by the ``pieces`` pool, where :meth:`RowReader.raw_offset` allows;
    else through h5py), a piece of a row bigger than a chunk through a one-row copy. Adds the
    time it took to ``seconds[0]``."""
    began = time.perf_counter()
    array = arrays[chunk.name]
    first, last = chunk.rows
    row_bytes = array[:1].nbytes
    start_in_array = chunk.offset - (array.ctypes.data - buffer.ctypes.data)
    view = buffer[chunk.offset : chunk.offset + chunk.nbytes]
    try:
        if chunk.nbytes == (last - first) * row_bytes and start_in_array == first * row_bytes:
            if reader.raw_offset(chunk.name) is not None:
                return reader.read_raw(chunk.name, first, last, array[first:last], pieces)
            step = max(1, ROW_BLOCK_BYTES // max(1, row_bytes))
            for a in range(first, last, step):
                reader.read_into(chunk.name, a, min(last, a + step), array[a : min(last, a + step)])
        else:
            row = np.empty((1,) + array.shape[1:], dtype=array.dtype)
            reader.read_into(chunk.name, first, first + 1, row)
            skip = start_in_array - first * row_bytes
            view[:] = row.view(np.uint8).reshape(-1)[skip : skip + chunk.nbytes]
        return crc32(view)
    finally:
        seconds[0] += time.perf_counter() - began


def _fault_hook(k: int, view: np.ndarray) -> None:
    """Tests only: ``EVENS_TEST_FLIP_CHUNK=k`` flips a byte of chunk k after its CRC was taken, as a
    broken link or bad memory would, to show that the leaders catch it."""
    flip = os.environ.get("EVENS_TEST_FLIP_CHUNK")
    if flip is not None and int(flip) == k and view.size:
        view[view.size // 2] ^= 0xFF
