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
all. Only numbers, strings and variable-length rows of numbers are stored.
"""
from __future__ import annotations

import io
import math
import os
import secrets
import typing
import zlib
from dataclasses import dataclass, fields
from typing import Callable

import h5py
import numpy as np

from .tempfiles import exclusive_temp
from .records import Record

_STR = h5py.string_dtype()
_CURVE = h5py.vlen_dtype(np.float64)  # one float per epoch trained, a row per evaluation


@dataclass(frozen=True)
class Segment:
    """A segment file as the state file lists it."""

    name: str
    rows: int
    crc32: int


# Record fields by type: how each is stored as a column, and read back.
_RECORD_TYPES = typing.get_type_hints(Record)
_SCALARS = {int: (np.int64, int), float: (np.float64, float)}


def _write_records(group: h5py.Group, records: list[Record], n_genes: int) -> None:
    n = len(records)
    for f in fields(Record):
        values = [getattr(r, f.name) for r in records]
        kind = _RECORD_TYPES[f.name]
        if f.name == "genome":
            group[f.name] = np.asarray(values, dtype=np.float64).reshape(n, n_genes)
        elif f.name == "parents":
            group[f.name] = np.asarray(values, dtype=np.int64).reshape(n, 2)
        elif f.name == "curve":
            rows = np.empty(n, dtype=object)  # filled one by one: numpy would stack rows of equal length into 2-D
            for i, v in enumerate(values):
                rows[i] = np.asarray(v, dtype=np.float64)
            group.create_dataset(f.name, (n,), dtype=_CURVE, data=rows if n else None)
        elif f.name == "metrics":
            metrics = group.create_group("metrics")
            for name in sorted({k for r in records for k in r.metrics}):
                metrics[name] = np.asarray([r.metrics.get(name, math.nan) for r in records], dtype=np.float64)
        elif kind is str:
            group.create_dataset(f.name, data=np.asarray(values, dtype=object), dtype=_STR)
        else:
            group[f.name] = np.asarray(values, dtype=_SCALARS[kind][0])


def _read_records(group: h5py.Group) -> list[Record]:
    columns = {}
    for f in fields(Record):
        kind = _RECORD_TYPES[f.name]
        if f.name == "genome":
            columns[f.name] = [[float(g) for g in row] for row in group[f.name][...]]
        elif f.name == "parents":
            columns[f.name] = [(int(a), int(b)) for a, b in group[f.name][...]]
        elif f.name == "curve":
            columns[f.name] = [[float(v) for v in row] for row in group[f.name][...]]
        elif f.name == "metrics":
            named = {name: group["metrics"][name][...] for name in group["metrics"]}
            n = len(group["id"])
            columns[f.name] = [{k: float(v[i]) for k, v in named.items() if not math.isnan(v[i])} for i in range(n)]
        elif kind is str:
            columns[f.name] = [str(v) for v in group[f.name].asstr()[...]]
        else:
            columns[f.name] = [_SCALARS[kind][1](v) for v in group[f.name][...]]
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"the evaluation columns have different lengths ({lengths})")
    return [Record(**dict(zip(columns, row))) for row in zip(*columns.values())]


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


def write_segment(folder: str, records: list[Record], n_genes: int) -> Segment:
    """Write ``records`` as a new segment in ``folder``, durably; returns its listing."""
    return _new_segment(folder, len(records), lambda f: _write_records(f, records, n_genes))


def read_segment(folder: str, segment: Segment) -> list[Record]:
    """The records of a listed segment; ``ValueError`` if it is missing, changed or damaged."""
    path = os.path.join(folder, segment.name)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ValueError(f"segment {segment.name} cannot be read ({exc.strerror or exc})") from None
    if zlib.crc32(data) != segment.crc32:
        raise ValueError(f"segment {segment.name} does not match its checksum (changed or damaged)")
    with h5py.File(io.BytesIO(data), "r") as f:  # the very bytes that were checked
        records = _read_records(f)
    if len(records) != segment.rows:
        raise ValueError(f"segment {segment.name} holds {len(records)} records, not the {segment.rows} listed")
    return records


def _columns(folder: str, segment: Segment) -> dict:
    """A listed segment's raw columns (checked against its checksum): arrays, and the metrics as a dict."""
    path = os.path.join(folder, segment.name)
    with open(path, "rb") as fh:
        data = fh.read()
    if zlib.crc32(data) != segment.crc32:
        raise ValueError(f"segment {segment.name} does not match its checksum (changed or damaged)")
    with h5py.File(io.BytesIO(data), "r") as f:
        columns = {name: f[name][...] for name in f if name != "metrics"}
        columns["metrics"] = {name: f["metrics"][name][...] for name in f["metrics"]}
    return columns


def _write_columns(folder: str, columns: dict, rows: int) -> Segment:
    """A new segment from raw columns (as :func:`_columns` reads them)."""

    def fill(f: h5py.File) -> None:
        for key, values in columns.items():
            if key == "metrics":
                group = f.create_group("metrics")
                for metric, column in values.items():
                    group[metric] = column
            elif key == "curve":
                f.create_dataset(key, (rows,), dtype=_CURVE, data=values if rows else None)
            elif values.dtype.kind == "O":
                f.create_dataset(key, data=values, dtype=_STR)
            else:
                f[key] = values

    return _new_segment(folder, rows, fill)


def merged(folder: str, segments: list[Segment], n_genes: int) -> list[Segment]:
    """``segments`` after binary-counter merges of the newest: at most log2(rows) + 1 remain.

    A merge concatenates the two segments' columns as arrays (no records are built): metrics
    that only one side has are NaN on the other, as in :func:`_write_records`.
    """
    segments = list(segments)
    while len(segments) >= 2 and segments[-2].rows <= segments[-1].rows:
        older, newer = segments[-2], segments[-1]
        a, b = _columns(folder, older), _columns(folder, newer)
        columns = {key: np.concatenate([a[key], b[key]]) for key in a if key != "metrics"}
        columns["metrics"] = {
            metric: np.concatenate([a["metrics"].get(metric, np.full(older.rows, math.nan)),
                                    b["metrics"].get(metric, np.full(newer.rows, math.nan))])
            for metric in sorted(set(a["metrics"]) | set(b["metrics"]))
        }
        segments[-2:] = [_write_columns(folder, columns, older.rows + newer.rows)]
    return segments


def remove_unlisted(folder: str, segments: list[Segment]) -> None:
    """Delete the segment files (and temporary files) the state file no longer lists."""
    keep = {s.name for s in segments}
    for name in os.listdir(folder):
        if (name.startswith("seg-") or name.startswith(".seg-")) and name not in keep:
            try:
                os.remove(os.path.join(folder, name))
            except OSError:
                pass
