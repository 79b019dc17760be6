"""Pure arithmetic for placing named arrays in one flat byte buffer.

The broadcast moves a single contiguous buffer (one shared copy per
node), so every array of the dataset gets an aligned offset in it. Nothing here
communicates; it is shared by the reader, the broadcaster and the tests.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ALIGN = 64  # bytes; a cache line, and enough for any numpy dtype


@dataclass(frozen=True)
class ArraySpec:
    """Name, shape and dtype of one array, e.g. ``ArraySpec("train/x", (100, 1, 8, 8), "float32")``."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(math.prod(self.shape)) * np.dtype(self.dtype).itemsize

    def as_tuple(self) -> tuple[str, tuple[int, ...], str]:
        return (self.name, tuple(int(n) for n in self.shape), self.dtype)


@dataclass(frozen=True)
class Layout:
    """Where each array starts in the buffer, and how long the buffer is."""

    specs: tuple[ArraySpec, ...]
    offsets: tuple[int, ...]
    total_bytes: int


def align_up(n: int, align: int = ALIGN) -> int:
    return (n + align - 1) // align * align


def plan_layout(specs: tuple[ArraySpec, ...] | list[ArraySpec], align: int = ALIGN) -> Layout:
    """Give each array an ``align``-byte aligned offset, in order, without gaps beyond padding."""
    offsets = []
    cursor = 0
    for spec in specs:
        cursor = align_up(cursor, align)
        offsets.append(cursor)
        cursor += spec.nbytes
    return Layout(tuple(specs), tuple(offsets), align_up(cursor, align) if specs else 0)


def array_views(layout: Layout, buffer: np.ndarray) -> dict[str, np.ndarray]:
    """Numpy views, one per spec, into ``buffer`` (a flat uint8 array of ``layout.total_bytes``)."""
    if buffer.dtype != np.uint8 or buffer.ndim != 1 or buffer.size < layout.total_bytes:
        raise ValueError("buffer must be a flat uint8 array of at least layout.total_bytes")
    views = {}
    for spec, offset in zip(layout.specs, layout.offsets):
        raw = buffer[offset : offset + spec.nbytes]
        views[spec.name] = raw.view(np.dtype(spec.dtype)).reshape(spec.shape)
    return views


def chunk_ranges(total_bytes: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """Half-open byte ranges ``[start, stop)`` of at most ``chunk_bytes`` covering ``total_bytes``.

    >>> chunk_ranges(10, 4)
    [(0, 4), (4, 8), (8, 10)]
    """
    if chunk_bytes <= 0:
        raise ValueError("chunk_bytes must be positive")
    return [(start, min(start + chunk_bytes, total_bytes)) for start in range(0, total_bytes, chunk_bytes)]


def array_specs(arrays: dict[str, np.ndarray]) -> list[tuple[str, tuple[int, ...], str]]:
    """Name, shape and dtype of each array, as plain tuples: the metadata that precedes a payload."""
    return [ArraySpec(name, tuple(int(n) for n in a.shape), np.dtype(a.dtype).name).as_tuple() for name, a in arrays.items()]


def pack_arrays(arrays: dict[str, np.ndarray]) -> tuple[list[tuple[str, tuple[int, ...], str]], np.ndarray]:
    """Copy named arrays into one aligned byte buffer; returns (specs as plain tuples, buffer).

    The specs are the metadata to send first (small, picklable); the buffer is the payload to
    send with one buffer-based message. :func:`unpack_arrays` undoes it.
    """
    specs = [ArraySpec(n, s, t) for n, s, t in array_specs(arrays)]
    layout = plan_layout(specs)
    buffer = np.empty(layout.total_bytes, dtype=np.uint8)
    views = array_views(layout, buffer)
    for name, a in arrays.items():
        views[name][...] = a
    return [s.as_tuple() for s in specs], buffer


def packed_layout(specs: list[tuple[str, tuple[int, ...], str]]) -> Layout:
    """The layout :func:`pack_arrays` gave the arrays of these specs (plain tuples, as it returns them)."""
    return plan_layout([ArraySpec(n, tuple(s), t) for n, s, t in specs])


def packed_size(specs: list[tuple[str, tuple[int, ...], str]]) -> int:
    """Bytes of the buffer that :func:`pack_arrays` made for these specs."""
    return packed_layout(specs).total_bytes


def unpack_arrays(specs: list[tuple[str, tuple[int, ...], str]], buffer: np.ndarray) -> dict[str, np.ndarray]:
    """Views, by name, into a buffer made by :func:`pack_arrays` (they keep the buffer alive)."""
    return array_views(packed_layout(specs), buffer)


@dataclass(frozen=True)
class Chunk:
    """One message of the broadcast: ``nbytes`` at ``offset`` in the buffer, inside one array.

    ``rows`` is the half-open range of that array's rows the bytes cover (a chunk holds whole rows
    unless one row is bigger than a chunk; then a row is sent in several chunks).
    """

    name: str
    offset: int
    nbytes: int
    rows: tuple[int, int]


def plan_chunks(layout: Layout, chunk_bytes: int) -> list[Chunk]:
    """The broadcast's messages, in buffer order: each at most ``chunk_bytes``, none spanning two arrays.

    Chunks hold whole rows where a row fits (so the root reads rows, not byte ranges), and together
    cover every array's bytes exactly once; the padding between arrays is never sent.

    >>> [(c.name, c.nbytes, c.rows) for c in plan_chunks(plan_layout([ArraySpec("x", (5, 2), "float32")]), 20)]
    [('x', 16, (0, 2)), ('x', 16, (2, 4)), ('x', 8, (4, 5))]
    """
    if chunk_bytes <= 0:
        raise ValueError("chunk_bytes must be positive")
    chunks = []
    for spec, offset in zip(layout.specs, layout.offsets):
        rows = spec.shape[0] if spec.shape else 1
        if spec.nbytes == 0:
            continue
        row_bytes = spec.nbytes // rows
        if row_bytes <= chunk_bytes:
            per = chunk_bytes // row_bytes
            for first in range(0, rows, per):
                last = min(first + per, rows)
                chunks.append(Chunk(spec.name, offset + first * row_bytes, (last - first) * row_bytes, (first, last)))
        else:  # a row bigger than a chunk: split inside the row
            for row in range(rows):
                for start in range(0, row_bytes, chunk_bytes):
                    n = min(chunk_bytes, row_bytes - start)
                    chunks.append(Chunk(spec.name, offset + row * row_bytes + start, n, (row, row + 1)))
    return chunks


# Shards: the training rows dealt round robin to the nodes, row i of the split to shard i % shards.
# Round robin (not blocks) gives every shard an even sample along the file's order, so a file sorted
# by class or by time still gives each node every class and period; shard sizes differ by at most one.
# Row i sits at row i // shards of its shard, so the rows of any range [a, b) that go to one shard
# are consecutive there: the root reads the split once, in order, and deals each chunk.


def shard_rows(rows: int, shards: int, index):
    """Rows of shard ``index`` (an int or an array of them) when ``rows`` rows are dealt round robin
    to ``shards`` shards; equally, how many of the rows ``0 .. rows-1`` go to that shard.

    >>> [shard_rows(10, 4, s) for s in range(4)]
    [3, 3, 2, 2]
    """
    if shards <= 0:
        raise ValueError("shards must be positive")
    return (rows - index + shards - 1) // shards


def shard_members(rows: int, shards: int, index: int) -> np.ndarray:
    """The split's rows that shard ``index`` holds, in the order it holds them."""
    return np.arange(index, rows, shards)


def shard_specs(specs: tuple[ArraySpec, ...] | list[ArraySpec], rows: int, split: str = "train") -> tuple[ArraySpec, ...]:
    """``specs`` with the arrays of ``split`` cut to ``rows`` rows: what one node holds in shard mode."""
    return tuple(ArraySpec(s.name, (rows,) + tuple(s.shape[1:]), s.dtype) if s.name.startswith(f"{split}/") else s for s in specs)


@dataclass(frozen=True)
class Deal:
    """How one chunk of a sharded array is split among the shards.

    ``counts[s]`` bytes of the chunk go to shard ``s``, landing at byte ``starts[s]`` of that shard's
    array; in the message they lie shard after shard, from ``displacements[s]``. ``order`` lists the
    chunk's rows (0-based in the chunk) in message order; None when the chunk is a piece of one row.
    """

    counts: np.ndarray
    starts: np.ndarray
    displacements: np.ndarray
    order: np.ndarray | None


def deal_chunk(chunk: Chunk, array_offset: int, row_bytes: int, shards: int) -> Deal:
    """Split ``chunk`` (from :func:`plan_chunks` of the whole split; its array starts at byte
    ``array_offset``) among ``shards`` round-robin shards. Pure: every rank computes the same.

    >>> d = deal_chunk(Chunk("x", 8, 12, (2, 5)), 0, 4, 2)   # rows 2, 3, 4 of 4 bytes to 2 shards
    >>> d.counts.tolist(), d.starts.tolist(), d.order.tolist()
    ([8, 4], [4, 4], [0, 2, 1])
    """
    first, last = chunk.rows
    everyone = np.arange(shards)
    counts = np.zeros(shards, dtype=np.int64)
    starts = np.zeros(shards, dtype=np.int64)
    order = None
    if chunk.nbytes == (last - first) * row_bytes:  # whole rows
        before = shard_rows(first, shards, everyone)
        counts[:] = (shard_rows(last, shards, everyone) - before) * row_bytes
        starts[:] = before * row_bytes
        order = np.argsort(np.arange(first, last) % shards, kind="stable")
    else:  # a piece of one row bigger than a chunk: all of it to that row's shard
        into_row = chunk.offset - array_offset - first * row_bytes
        counts[first % shards] = chunk.nbytes
        starts[first % shards] = (first // shards) * row_bytes + into_row
    displacements = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    return Deal(counts, starts, displacements, order)
