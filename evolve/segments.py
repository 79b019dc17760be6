"""The run's evaluations as a log of immutable segment files: appending costs what it appends.

Each checkpoint writes the records that finished since the last one as a new
segment (a small HDF5 file: one column per field of
:class:`~evolve.records.Record`, written to a hidden temporary name, synced and
renamed), and only then replaces the run's state file, which lists the
segments that count, with their row counts and CRC32 checksums. The state file
is the single commit point: a segment it does not list (left by a crash between
the two writes) is ignored, and removed by the next checkpoint.

Segments are merged like the digits of a binary counter (a new segment merges
with the one before it while that one is no larger), so a run of n evaluations
has at most log2(n) + 1 of them and each record is rewritten O(log n) times in
all. Only numbers and strings are stored. Every column is a plain array (checkpoint
format 8): ``status`` and ``operators`` fixed-width strings, the curves one flat
float64 array ``curve`` with ``curve_length`` per row, and the messages their UTF-8
bytes one after the other (``message``, uint8) with ``message_length`` per row; a
merge is then a concatenation of arrays, and the columns of the segments this
process wrote are kept in memory for it, so a merge never reads a file back.
(Messages as variable-length strings, as format 7 stored them, made half the cost
of writing a segment: 1.9 of 3.7 ms for 4,608 rows.) Segments of formats 6 and 7
(``curve``, ``status`` and ``operators`` variable-length in 6; ``message`` in both)
are still read, and a merge rewrites them in the new layout.
"""
from __future__ import annotations

import io
import itertools
import math
import os
import secrets
import zlib
from dataclasses import dataclass
from operator import attrgetter
from typing import Callable

import h5py
import numpy as np

from ensemble import h5write

from .tempfiles import exclusive_temp
from .records import Record

_INTS = ("id", "epochs_done", "worker")
_FLOATS = ("fitness", "seconds", "started", "finished")
_NAMES = ("status", "operators")  # a few short values each: fixed-width strings
CACHED_ROWS = 1 << 17  # the columns of segments up to this many rows stay in memory for the next merge


@dataclass(frozen=True)
class Segment:
    """A segment file as the state file lists it."""

    name: str
    rows: int
    crc32: int


def fixed(values: list[str]) -> np.ndarray:
    """Strings as a fixed-width byte array (UTF-8)."""
    return np.array([v.encode() for v in values], dtype=bytes) if values else np.zeros(0, dtype="S1")


def _flat_text(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Strings as their UTF-8 bytes one after the other (uint8) and each one's length in bytes
    (each distinct string encoded once: most messages are empty)."""
    encoded = dict.fromkeys(values)
    for v in encoded:
        encoded[v] = v.encode()
    parts = list(map(encoded.__getitem__, values))
    return np.frombuffer(b"".join(parts), dtype=np.uint8).copy(), np.fromiter(map(len, parts), np.int64, len(parts))


def _record_columns(records: list[Record], n_genes: int) -> dict:
    """The columns of ``records`` (arrays, and the metrics as a dict of arrays), as a segment stores them."""
    n = len(records)
    columns = {name: np.fromiter(map(attrgetter(name), records), np.int64, n) for name in _INTS}
    columns.update({name: np.fromiter(map(attrgetter(name), records), np.float64, n) for name in _FLOATS})
    columns.update({name: fixed(list(map(attrgetter(name), records))) for name in _NAMES})
    columns["genome"] = np.fromiter(itertools.chain.from_iterable(map(attrgetter("genome"), records)), np.float64, n * n_genes).reshape(n, n_genes)
    columns["parents"] = np.fromiter(itertools.chain.from_iterable(map(attrgetter("parents"), records)), np.int64, 2 * n).reshape(n, 2)
    curves = list(map(attrgetter("curve"), records))
    columns["curve_length"] = np.fromiter(map(len, curves), np.int64, n)
    columns["curve"] = np.fromiter(itertools.chain.from_iterable(curves), np.float64, int(columns["curve_length"].sum()))
    columns["message"], columns["message_length"] = _flat_text(list(map(attrgetter("message"), records)))
    metrics = list(map(attrgetter("metrics"), records))
    columns["metrics"] = {name: np.fromiter((m.get(name, math.nan) for m in metrics), np.float64, n)
                          for name in sorted({k for m in metrics for k in m})}
    return columns


def _fill(f: h5py.File, columns: dict) -> None:
    for key, values in columns.items():
        if key == "metrics":
            group = h5write.group(f, "metrics")
            for metric, column in values.items():
                h5write.dataset(group, metric, column)
        else:
            h5write.dataset(f, key, values)


def decoded(values: np.ndarray | list) -> list[str]:
    """Fixed-width (or variable-length) strings, or a list of bytes, as ``str``, each distinct value decoded once."""
    seen: dict[bytes, str] = {}
    out = []
    for v in values.tolist() if isinstance(values, np.ndarray) else values:
        s = seen.get(v)
        if s is None:
            s = seen[v] = v.decode() if isinstance(v, bytes) else str(v)
        out.append(s)
    return out


def _records(columns: dict) -> list[Record]:
    """The records of a segment's columns (as :func:`_columns` gives them)."""
    n = len(columns["id"])
    lengths = {name: len(v) for name, v in columns.items() if name not in ("metrics", "curve", "message")}
    lengths.update({f"metrics/{name}": len(v) for name, v in columns["metrics"].items()})
    if len(set(lengths.values())) > 1:
        raise ValueError(f"the evaluation columns have different lengths ({lengths})")
    curves = _split(columns["curve"].tolist(), columns["curve_length"], "curves")
    messages = decoded(_split(columns["message"].tobytes(), columns["message_length"], "messages"))
    named = {name: v.tolist() for name, v in columns["metrics"].items()}
    metrics = [{k: v[i] for k, v in named.items() if v[i] == v[i]} for i in range(n)]  # NaN: no such metric
    return list(map(Record, columns["id"].tolist(), columns["genome"].tolist(), map(tuple, columns["parents"].tolist()),
                    decoded(columns["status"]), columns["fitness"].tolist(), metrics, columns["seconds"].tolist(),
                    columns["epochs_done"].tolist(), columns["worker"].tolist(), columns["started"].tolist(),
                    columns["finished"].tolist(), messages, decoded(columns["operators"]), curves))


def _split(flat, lengths: np.ndarray, what: str) -> list:
    """``flat`` (a list, or bytes) cut into consecutive pieces of ``lengths``."""
    ends = np.cumsum(lengths).tolist()
    if (ends[-1] if ends else 0) != len(flat) or (lengths < 0).any():
        raise ValueError(f"the {what} do not add up to their lengths")
    return [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]


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


def _remember(folder: str, segment: Segment, columns: dict) -> None:
    if segment.rows <= CACHED_ROWS:
        _cache[(os.path.abspath(folder), segment.name, segment.crc32)] = columns


def _checked_bytes(folder: str, segment: Segment) -> bytes:
    path = os.path.join(folder, segment.name)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ValueError(f"segment {segment.name} cannot be read ({exc.strerror or exc})") from None
    if zlib.crc32(data) != segment.crc32:
        raise ValueError(f"segment {segment.name} does not match its checksum (changed or damaged)")
    return data


def _columns(folder: str, segment: Segment, cached: bool = False) -> dict:
    """A listed segment's columns, in the present layout (see :func:`_record_columns`): from its file
    (checked against its checksum; formats 6 and 7 converted), or with ``cached`` from memory if this process
    wrote it (what a merge rewrites)."""
    if cached:
        columns = _cache.get((os.path.abspath(folder), segment.name, segment.crc32))
        if columns is not None:
            return columns
    with h5py.File(io.BytesIO(_checked_bytes(folder, segment)), "r") as f:  # the very bytes that were checked
        columns = {name: f[name][...] for name in f if name != "metrics"}
        columns["metrics"] = {name: f["metrics"][name][...] for name in f["metrics"]}
    if "curve_length" not in columns:  # format 6: variable-length curves and strings
        rows = columns["curve"]
        columns["curve_length"] = np.fromiter(map(len, rows), np.int64, len(rows))
        columns["curve"] = np.concatenate([np.asarray(r, dtype=np.float64) for r in rows]) if len(rows) else np.zeros(0)
        for name in _NAMES:
            columns[name] = fixed(decoded(columns[name]))
    if "message_length" not in columns:  # formats 6 and 7: messages as variable-length strings
        columns["message"], columns["message_length"] = _flat_text(decoded(columns["message"]))
    return columns


def read_segment(folder: str, segment: Segment) -> list[Record]:
    """The records of a listed segment; ``ValueError`` if it is missing, changed or damaged."""
    records = _records(_columns(folder, segment))
    if len(records) != segment.rows:
        raise ValueError(f"segment {segment.name} holds {len(records)} records, not the {segment.rows} listed")
    return records


def _concatenated(parts: list[dict]) -> dict:
    """One segment's columns from several (oldest first): metrics that only some have are NaN in the others."""
    if len(parts) == 1:
        return parts[0]
    columns = {key: np.concatenate([p[key] for p in parts]) for key in parts[0] if key != "metrics"}
    names = sorted({metric for p in parts for metric in p["metrics"]})
    columns["metrics"] = {metric: np.concatenate([p["metrics"].get(metric, np.full(len(p["id"]), math.nan)) for p in parts]) for metric in names}
    return columns


def _write_columns(folder: str, columns: dict) -> Segment:
    rows = len(columns["id"])
    segment = _new_segment(folder, rows, lambda f: _fill(f, columns))
    _remember(folder, segment, columns)
    return segment


def append(folder: str, segments: list[Segment], records: list[Record], n_genes: int) -> list[Segment]:
    """``segments`` with ``records`` appended, merged like the digits of a binary counter (the newest
    segment merges with the one before it while that one is no larger: at most log2(rows) + 1 remain).

    The new records and the segments they would merge with, one after the other, are written as one
    file: the listing is the one pairwise merges would make, without their intermediate files.
    """
    segments = list(segments)
    rows, k = len(records), 0
    while k < len(segments) and segments[-1 - k].rows <= rows:
        rows += segments[-1 - k].rows
        k += 1
    parts = [_columns(folder, segment, cached=True) for segment in segments[len(segments) - k:]]
    columns = _concatenated(parts + [_record_columns(records, n_genes)])
    segments[len(segments) - k:] = [_write_columns(folder, columns)]
    return segments


def merged(folder: str, segments: list[Segment], n_genes: int) -> list[Segment]:
    """``segments`` after binary-counter merges of the newest: at most log2(rows) + 1 remain.

    A merge concatenates the segments' columns as arrays (no records are built); the segments that
    merge in a row are written as one file.
    """
    segments = list(segments)
    k = 1
    while k < len(segments) and segments[-1 - k].rows <= sum(s.rows for s in segments[len(segments) - k:]):
        k += 1
    if k == 1:
        return segments
    parts = [_columns(folder, segment, cached=True) for segment in segments[len(segments) - k:]]
    segments[len(segments) - k:] = [_write_columns(folder, _concatenated(parts))]
    return segments


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
