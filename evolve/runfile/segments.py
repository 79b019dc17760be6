"""The run's evaluations as a log of immutable segment files: appending costs what it appends.

Each checkpoint writes the records that finished since the last one as a new segment: a small
HDF5 file with one column per field of :class:`~evolve.search.records.Record` (laid out by
:mod:`evolve.runfile.columns`), written to a hidden temporary name, synced and renamed. Only then is
the run's state file replaced; it lists the segments that count, with their row counts and CRC32
checksums. The state file is the single commit point: a segment it does not list (left by a crash
between the two writes) is ignored, and removed by the next checkpoint.

Segments are merged like the digits of a binary counter (a new segment merges with the one before
it while that one is no larger), up to :data:`MERGED_ROWS` rows a segment, so a run of n evaluations has
at most log2(n) + 1 of them below that size (and n / MERGED_ROWS at it) and each record is rewritten
O(log n) times in all. A merge is a concatenation of columns, and the columns
of the segments this process wrote are kept in memory for it, so a merge never reads a file back.
"""
from __future__ import annotations

import io
import os
import secrets
import zlib
from dataclasses import dataclass
from typing import Callable

import h5py

from evolve.search.records import Record

from . import columns as table
from .tempfiles import exclusive_temp

MERGED_ROWS = 1 << 20  # no merge makes a segment larger: a merge holds its rows' columns in memory (some 350 MB at most)
CACHED_ROWS = 1 << 15  # the columns of segments up to this many rows stay in memory for the next merge (some 30 MB at most)


@dataclass(frozen=True)
class Segment:
    """A segment file as the state file lists it."""

    name: str
    rows: int
    crc32: int


def write_columns(group: h5py.Group, columns: dict) -> None:
    """``columns`` (see :mod:`evolve.runfile.columns`) as datasets of ``group``; a named column as a subgroup."""
    for key, values in columns.items():
        if isinstance(values, dict):
            sub = group.create_group(key)
            for name, column in values.items():
                sub.create_dataset(name, data=column)
        else:
            group.create_dataset(key, data=values)


def read_columns(group: h5py.Group) -> dict:
    """The inverse of :func:`write_columns`."""
    return {key: {name: item[name][...] for name in item} if isinstance(item, h5py.Group) else item[...] for key, item in group.items()}


def _new_segment(folder: str, rows: int, fill: Callable[[h5py.File], None]) -> Segment:
    """A new segment file in ``folder``, filled by ``fill``, made durable before it appears under its
    name (a hidden temporary file, checksummed, synced, renamed); returns its listing."""
    name = f"seg-{secrets.token_hex(8)}.h5"
    tmp = exclusive_temp(os.path.join(folder, name))
    try:
        with h5py.File(tmp, "w") as f:
            fill(f)
        with open(tmp, "rb") as fh:
            crc = zlib.crc32(fh.read())
            os.fsync(fh.fileno())
        os.replace(tmp, os.path.join(folder, name))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return Segment(name, rows, crc)


_cache: dict[tuple[str, str, int], dict] = {}  # (folder, name, crc32) -> the columns of a segment this process wrote


def open_listed(folder: str, segments: list[Segment]) -> list:
    """Every listed segment's file, open (binary), all before any is read: a reader that opened the state file a
    moment before holds the segments it lists even if a job writing the run merges them and removes the old files
    while it reads, since an open file outlives its name. ``ValueError`` naming a segment that cannot be opened."""
    handles = []
    try:
        for segment in segments:
            handles.append(open(os.path.join(folder, segment.name), "rb"))
    except OSError as exc:
        for fh in handles:
            fh.close()
        raise ValueError(f"segment {segment.name} cannot be read ({exc.strerror or exc})") from None
    return handles


def check_crc(segment: Segment, crc: int) -> None:
    """``ValueError`` unless ``crc`` (of the segment's file) is the one its listing holds."""
    if crc != segment.crc32:
        raise ValueError(f"segment {segment.name} does not match its checksum (changed or damaged)")


def snapshot(folder: str, segments: list[Segment]) -> list[bytes]:
    """The bytes of every listed segment, for :func:`read_segment`, opened as :func:`open_listed` opens them."""
    handles = open_listed(folder, segments)
    try:
        return [fh.read() for fh in handles]
    finally:
        for fh in handles:
            fh.close()


def _checked_bytes(folder: str, segment: Segment, data: bytes | None = None) -> bytes:
    if data is None:
        [data] = snapshot(folder, [segment])
    check_crc(segment, zlib.crc32(data))
    return data


def _columns(folder: str, segment: Segment, cached: bool = False, data: bytes | None = None) -> dict:
    """A listed segment's columns: from its file (or its bytes ``data``, read by :func:`snapshot`), checked
    against its checksum, or with ``cached`` from memory if this process wrote it (what a merge rewrites)."""
    if cached:
        columns = _cache.get((os.path.abspath(folder), segment.name, segment.crc32))
        if columns is not None:
            return columns
    with h5py.File(io.BytesIO(_checked_bytes(folder, segment, data)), "r") as f:  # the very bytes that were checked
        return read_columns(f)


def read_segment(folder: str, segment: Segment, n_genes: int | None = None, data: bytes | None = None) -> list[Record]:
    """The records of a listed segment (genomes of ``n_genes``, when given; from its bytes ``data`` when
    given); ``ValueError`` if it is missing, changed or damaged."""
    try:
        records = table.decode(_columns(folder, segment, data=data), Record, n_genes)
    except ValueError as exc:
        raise ValueError(f"segment {segment.name}: {exc}") from None
    if len(records) != segment.rows:
        raise ValueError(f"segment {segment.name} holds {len(records)} records, not the {segment.rows} listed")
    return records


def _write(folder: str, columns: dict, rows: int) -> Segment:
    segment = _new_segment(folder, rows, lambda f: write_columns(f, columns))
    if rows <= CACHED_ROWS:
        _cache[(os.path.abspath(folder), segment.name, segment.crc32)] = columns
    return segment


def _merge_newest(folder: str, segments: list[Segment], k: int, new: list[dict], rows: int) -> list[Segment]:
    """``segments`` with the newest ``k`` of them and the tables ``new`` written as one segment."""
    parts = [_columns(folder, segment, cached=True) for segment in segments[len(segments) - k:]]
    return segments[:len(segments) - k] + [_write(folder, table.concatenated(parts + new), rows)]


def append(folder: str, segments: list[Segment], records: list[Record], n_genes: int) -> list[Segment]:
    """``segments`` with ``records`` appended, merged like the digits of a binary counter (the newest
    segment merges with the one before it while that one is no larger: at most log2(rows) + 1 remain).

    The new records and the segments they merge with are written as one file: the listing is the
    one pairwise merges would make, without their intermediate files.
    """
    rows, k = len(records), 0
    while k < len(segments) and segments[-1 - k].rows <= rows and rows + segments[-1 - k].rows <= MERGED_ROWS:
        rows += segments[-1 - k].rows
        k += 1
    return _merge_newest(folder, list(segments), k, [table.encode(records, Record, n_genes)], rows)


def merged(folder: str, segments: list[Segment]) -> list[Segment]:
    """``segments`` after binary-counter merges of the newest: at most log2(rows) + 1 remain."""
    k = 1
    while (k < len(segments) and segments[-1 - k].rows <= sum(s.rows for s in segments[len(segments) - k:])
           and sum(s.rows for s in segments[len(segments) - k - 1:]) <= MERGED_ROWS):
        k += 1
    if k == 1:
        return list(segments)
    return _merge_newest(folder, list(segments), k, [], sum(s.rows for s in segments[len(segments) - k:]))


def remove_unlisted(folder: str, segments: list[Segment]) -> None:
    """Delete the segment files (and temporary files) the state file no longer lists."""
    keep = {s.name for s in segments}
    where = os.path.abspath(folder)
    for key in [k for k in _cache if k[0] == where and k[1] not in keep]:
        del _cache[key]
    for name in os.listdir(folder):
        if (name.startswith("seg-") or name.startswith(".seg-")) and name not in keep:
            try:
                os.remove(os.path.join(folder, name))
            except OSError:
                pass
