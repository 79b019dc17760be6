"""Stream a dataset from one rank to every rank, one host copy per node, checksummed.

Only the root opens the file. It sends the plan (names, shapes, dtypes: a few hundred bytes)
with a pickled ``bcast``, then streams the payload: it reads chunk k+1 of the arrays (whole rows,
at most ``chunk_bytes``, never more than MPI's int count limit) straight into its node's buffer
while chunk k travels to the other node leaders by a non-blocking ``Ibcast``, so its memory never
holds more than the buffer every node holds anyway. Each chunk's CRC-32 is broadcast ahead of it
and checked by every leader on arrival; the root's per-array CRC-32s make the data's fingerprint,
which a run keeps so that a resume can refuse different data.

On each node the ranks share one MPI-3 shared-memory window; only the node's leader takes part
in the payload broadcast, and the other ranks read the window in place. With ``shared=False``
every rank keeps a private copy instead (the simple scheme, kept for comparison and for MPI
libraries without shared windows).

``mode="replicate"`` (the default) gives every node the whole training split; ``mode="shard"``
gives each node its own part of it, dealt by :mod:`data_bcast.shard`, with validation and test
still whole everywhere.

Errors (a missing or malformed file, NaN found while streaming, a chunk that arrives damaged) are
gathered from every rank and the first is given to all, so all ranks raise the same
:class:`DataError` together and none waits.
"""
from __future__ import annotations

import ctypes
import os
import socket
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from .checksum import crc32, crc32_combine
from .h5file import DataError, DataPlan, first_line, inspect_file
from .reader import ROW_BLOCK_BYTES, RowReader
from .layout import Chunk, array_views, chunk_ranges, plan_chunks, plan_layout, shard_specs
from .shard import SPLIT, Shard, plan_shards, scatter_shards

DEFAULT_CHUNK_BYTES = 64 << 20
MODES = ("replicate", "shard")
INT_COUNT_LIMIT = (1 << 31) - 1  # MPI's count is a C int: no message may hold more elements
MAX_READ_THREADS = 8  # the root's reading threads, at most, when not told how many


def usable_cores(most: int | None = None) -> int:
    """The cores this process may run on (its affinity, as Slurm sets it), at most ``most`` if given."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores if most is None else min(most, cores))


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
    """Ranks that share memory with this one; the root (if here) is node rank 0.

    ``EVENS_SIMULATED_NODES=k`` (tests and benchmarks on one machine) splits the ranks into k
    pretend nodes by rank modulo k instead, so that k leaders really broadcast among themselves;
    each pretend node still shares memory, since all its ranks are on this machine.
    """
    key = 0 if comm.rank == root else comm.rank + 1
    simulated = int(os.environ.get("EVENS_SIMULATED_NODES", "0") or 0)
    if simulated > 1:
        return comm.Split((comm.rank - root) % simulated, key=key)
    return comm.Split_type(MPI.COMM_TYPE_SHARED, key=key)


def prefault(buffer: np.ndarray, node: MPI.Comm) -> None:
    """Collective on ``node``: every rank writes one byte a page of its share of a fresh shared window
    (zeros, which it holds already), then all wait. A shared window gets 4 KiB pages (no transparent
    huge pages for shmem unless the kernel allows them), and the kernel's work for each first touch
    otherwise falls on the root alone while it reads; this spreads it over the node's cores.
    (Used where :class:`Populator` cannot: kernels before Linux 5.14.)"""
    page = os.sysconf("SC_PAGE_SIZE")
    share = -(-buffer.size // node.size // page) * page
    lo = min(buffer.size, node.rank * share)
    buffer[lo : min(buffer.size, lo + share) : page] = 0
    node.Barrier()  # no rank still touching when the root starts to write


MADV_POPULATE_WRITE = 23  # Linux 5.14: map pages writable as a write would, without writing to them
POPULATE_STEP = 16 << 20


class Populator:
    """Gets the pages of a fresh buffer from the kernel on a thread of its own, in order, while the
    data streams into it: a first touch costs the kernel a page's zeroing (for 1 GiB, 0.1-0.3 s of a
    core), and without this it falls inside MPI's copies and the root's reads. ``madvise`` with
    MADV_POPULATE_WRITE leaves what the pages hold alone, so the thread never races with the data
    arriving. :meth:`start` says False where the kernel lacks it (then nothing runs)."""

    _madvise = None

    def __init__(self, buffer: np.ndarray, lo: int = 0, hi: int | None = None):
        self.buffer, self.lo, self.hi = buffer, lo, buffer.size if hi is None else hi
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    @classmethod
    def _libc_madvise(cls):
        if cls._madvise is None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                cls._madvise = libc.madvise
            except (OSError, AttributeError):  # pragma: no cover - not Linux
                cls._madvise = False
        return cls._madvise

    def _populate(self, lo: int, hi: int) -> bool:
        page = os.sysconf("SC_PAGE_SIZE")
        address = self.buffer.ctypes.data + lo
        start = address // page * page  # madvise wants a page-aligned start
        return self._libc_madvise()(start, address + (hi - lo) - start, MADV_POPULATE_WRITE) == 0

    def start(self) -> bool:
        if self.hi <= self.lo or not self._libc_madvise() or not self._populate(self.lo, min(self.hi, self.lo + 1)):
            return False  # nothing to do, or a kernel without MADV_POPULATE_WRITE (EINVAL)
        self.thread = threading.Thread(target=self._run, name="evens-populate", daemon=True)
        self.thread.start()
        return True

    def _run(self) -> None:
        for a in range(self.lo, self.hi, POPULATE_STEP):
            if self.stopped.is_set() or not self._populate(a, min(self.hi, a + POPULATE_STEP)):
                return

    def join(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join()
            self.thread = None


def message_limit() -> int:
    """The largest message, in bytes, that the broadcast sends: below MPI's int count limit (2^31 - 1)
    whatever the chunk size. ``EVENS_MAX_MESSAGE_BYTES`` lowers it, so that tests exercise the
    many-message path of arrays over 2 GiB without allocating 2 GiB."""
    asked = int(os.environ.get("EVENS_MAX_MESSAGE_BYTES", "0") or 0)
    return min(INT_COUNT_LIMIT, asked) if asked > 0 else INT_COUNT_LIMIT


def located(message: str) -> str:
    """An error message that says where it happened: ``message (rank R on HOST)``, R in the world."""
    return f"{message} (rank {MPI.COMM_WORLD.rank} on {socket.gethostname()})"


def first_error(comm: MPI.Comm, error: str | None, root: int) -> str | None:
    """Collective: every rank's error (or None) gathered, and the first given to every rank, saying
    on which rank and host it happened."""
    errors = comm.gather(error and located(error), root=root)
    first = next((e for e in errors if e), None) if comm.rank == root else None
    return comm.bcast(first, root=root)


def fingerprint(crcs: dict[str, int]) -> str:
    """One string for the data sent: each array's name and CRC-32 (independent of the chunking)."""
    return zlib.crc32(";".join(f"{name}={crc:08x}" for name, crc in sorted(crcs.items())).encode()).to_bytes(4, "big").hex() + \
        f"-{len(crcs)}"


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
    mode: str = "replicate",
    root_trains: bool = True,
    read_threads: int = 0,
) -> SharedDataset:
    """Collective: the root streams ``path`` to every rank; every rank returns the arrays its node holds.

    Non-root ranks never open the file (their ``path`` is ignored). The root reads chunk k+1
    while chunk k is on its way (a non-blocking broadcast among node leaders), so its memory
    holds a few chunks, not the arrays; each chunk's CRC-32 travels ahead of it, and every
    leader checks what it received. ``stats["fingerprint"]`` names the data sent (see
    :func:`fingerprint`); it is the same in either ``mode`` and on any number of nodes.

    ``mode="shard"`` gives each node a disjoint part of the training split (round robin over its
    rows; together they cover it), and val and test whole; ``root_trains=False`` says that the
    root does not train, so a node holding only the root gets no part. A part of fewer than 2 rows
    is a :class:`DataError` on every rank before anything is sent.

    The root reads with ``read_threads`` threads (0: one per core it may run on, at most
    :data:`MAX_READ_THREADS`); they matter where arrays can be read as the file's own bytes
    (stored contiguous, see :meth:`~data_bcast.reader.RowReader.raw_offset`).

    >>> data = broadcast_dataset(MPI.COMM_WORLD, "digits.h5")   # doctest: +SKIP
    >>> data.arrays["train/x"].shape                            # doctest: +SKIP
    (987, 1, 8, 8)
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    plan_dict, error = None, None
    if comm.rank == root:
        try:
            plan_dict = inspect_file(path, val_fraction, test_fraction, seed, allow_external).to_dict()
        except DataError as exc:
            error = located(str(exc))
    plan_dict, error = comm.bcast((plan_dict, error), root=root)
    if error is not None:
        raise DataError(error)
    plan = DataPlan.from_dict(plan_dict)

    node = node_communicator(comm, root)
    is_leader = node.rank == 0
    root_here = bool(node.allreduce(int(comm.rank == root)))
    root_first = 0 if comm.rank == root else comm.rank + 1  # the root is rank 0 of every split
    leaders = comm.Split(0 if is_leader else MPI.UNDEFINED, key=root_first)
    shard = None
    if mode == "shard":
        nodes, node_index = node.bcast((leaders.size, leaders.rank) if is_leader else None, root=0)
        root_alone = comm.bcast(node.size == 1, root=root)
        try:  # the same arithmetic on every rank: all raise together, before anything is sent
            shard = plan_shards(plan, nodes, node_index, root_alone, root_trains)
        except DataError:
            for c in (leaders, node):
                if c != MPI.COMM_NULL:
                    c.Free()
            raise
    layout = plan_layout(shard_specs(plan.specs, shard.rows, SPLIT) if shard else plan.specs)
    window = None
    if shared:
        window = MPI.Win.Allocate_shared(layout.total_bytes if is_leader else 0, 1, comm=node)
        mem, _ = window.Shared_query(0)
        buffer = np.frombuffer(mem, dtype=np.uint8, count=layout.total_bytes)
        share = -(-buffer.size // node.size)  # each rank of the node gets the pages of its share
        populator = Populator(buffer, min(buffer.size, node.rank * share), min(buffer.size, (node.rank + 1) * share))
        if not node.allreduce(int(populator.start() or populator.hi <= populator.lo), op=MPI.MIN):
            populator.join()
            prefault(buffer, node)
    else:
        buffer = np.empty(layout.total_bytes, dtype=np.uint8)
        populator = Populator(buffer)
        populator.start()
    # Leaders carry the payload; with private copies in replicate mode every rank does. (Sharded
    # private copies go to the leaders, which then hand their node's part to their node's ranks.)
    carriers = leaders if shared or shard else comm.Split(0, key=root_first)
    arrays = array_views(layout, buffer)
    stats: dict = {"bytes": float(plan_layout(plan.specs).total_bytes)}
    if shard:
        stats.update(shards=shard.count, shard_rows=shard.rows)
    comms = (node, leaders) if carriers is leaders else (node, leaders, carriers)
    result = SharedDataset(plan, arrays, node.rank, node.size, root_here, stats, shard, window, comms)

    t0 = time.perf_counter()
    error = None
    try:
        if carriers != MPI.COMM_NULL:
            threads = read_threads if read_threads > 0 else usable_cores(MAX_READ_THREADS)
            error = _stream(carriers, plan, shard, layout, buffer, arrays, min(chunk_bytes, message_limit()), stats, threads)
        error = first_error(comm, error, root)  # (the node's other ranks get their share's pages meanwhile)
    finally:
        populator.join()  # the data is in: what is not yet populated was touched by it
    if error is not None:
        node.Barrier()
        result.close()  # collective, and every rank is here: they all raise together
        raise DataError(error)
    if shard and not shared:
        for start, stop in chunk_ranges(layout.total_bytes, min(chunk_bytes, message_limit())):
            node.Bcast([buffer[start:stop], MPI.BYTE], root=0)
    node.Barrier()  # the window is filled before anyone on the node reads it
    stats["broadcast_seconds"] = time.perf_counter() - t0
    stats["fingerprint"] = comm.bcast(stats.get("fingerprint"), root=root)
    return result


def _stream(carriers: MPI.Comm, plan: DataPlan, shard: Shard | None, layout, buffer: np.ndarray, arrays: dict[str, np.ndarray],
            chunk_bytes: int, stats: dict, read_threads: int = 1) -> str | None:
    """The carriers' part: the root (carrier rank 0) reads and sends chunk by chunk, the others receive
    and check. Returns this rank's error, or None; every carrier stops at the same chunk. In shard
    mode the training split is dealt first (:func:`data_bcast.shard.scatter_shards`), then the
    other splits are broadcast."""
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


def _broadcast_chunks(carriers: MPI.Comm, plan: DataPlan, chunks: list[Chunk], first_k: int, reader: RowReader | None,
                      buffer: np.ndarray, arrays: dict[str, np.ndarray], crcs: dict[str, int], stats: dict, error: str | None,
                      pieces=None) -> str | None:
    """Broadcast ``chunks`` (numbered from ``first_k``) to every carrier, reading chunk k+1 while chunk k travels.

    The root reads (and checksums) in the background, on threads of its own, while its main thread
    sits in MPI's wait for the chunk on its way: the broadcast moves at MPI's full pace, never only
    between two reads. Raw reads go to the ``pieces`` pool. The threads never call MPI."""
    is_root = carriers.rank == 0
    header = np.zeros(2, dtype=np.int64)  # (1 if the root failed, CRC-32 of the chunk)
    pending = None  # (request, chunk, crc): the chunk on its way while the next is read
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
                request, done_chunk, sent_crc = pending
                request.Wait()
                pending = None
                if not is_root and error is None:
                    view = buffer[done_chunk.offset : done_chunk.offset + done_chunk.nbytes]
                    got = crc32(view)
                    if got != sent_crc:
                        error = (f"{plan.path}: the data arrived damaged: chunk {k - 1} of "
                                 f"{done_chunk.name} (rows {done_chunk.rows[0]}..{done_chunk.rows[1] - 1}) has CRC-32 "
                                 f"{got:08x}, the root sent {sent_crc:08x}")
            if reading is not None:
                try:
                    crc = reading.result()
                except DataError as exc:
                    error = str(exc)
                if error is None:
                    crcs[chunk.name] = crc32_combine(crcs.get(chunk.name, 0), crc, chunk.nbytes)
                    _fault_hook(k, buffer[chunk.offset : chunk.offset + chunk.nbytes])
            if chunk is None:
                break
            header[:] = (1 if (is_root and error is not None) else 0, crc)
            carriers.Bcast(header, root=0)
            if header[0]:
                break
            request = carriers.Ibcast([buffer[chunk.offset : chunk.offset + chunk.nbytes], MPI.BYTE], root=0)
            pending = (request, chunk, int(header[1]))
    finally:
        if lead is not None:
            lead.shutdown(wait=True)
    stats["read_seconds"] = stats.get("read_seconds", 0.0) + seconds[0]
    return error


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
