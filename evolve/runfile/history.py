"""A run's history read column by column, a slice of rows at a time: bounded memory at any size (issue 34).

``evens report`` ranks the networks and counts the failures from a few columns of every segment (status,
fitness, validation loss, id) without making a record of every row, then reads whole records only for the
rows it shows (:func:`fetch`). Every segment the state file lists is opened before any is read (an open
file outlives a job's merge that removes its name), checked against its CRC-32 a block at a time, and then
read with h5py from the open file, :data:`ROWS` rows at a time.
"""
from __future__ import annotations

import contextlib
import zlib
from typing import Iterator

import h5py
import numpy as np

from evolve.search.records import Record

from . import columns as table
from .segments import Segment, check_crc, open_listed

ROWS = 1 << 16  # rows a slice holds
BLOCK = 8 << 20  # bytes of a segment checked at a time


class History(contextlib.AbstractContextManager):
    """The segments a state file lists, open: ``with History(folder, listed) as h: for ... in h.slices(...)``."""

    def __init__(self, folder: str, listed: list[Segment]):
        self.listed = listed
        self._files = open_listed(folder, listed)
        self._checked: set[int] = set()

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files = []

    def contents(self) -> list[bytes]:
        """Every segment's bytes, in order, for :func:`evolve.runfile.segments.read_segment` (which checks each against
        its CRC-32): the whole history, from the files this holds open."""
        out = []
        for f in self._files:
            f.seek(0)
            out.append(f.read())
        return out

    def _open(self, i: int) -> h5py.File:
        f = self._files[i]
        if i not in self._checked:
            f.seek(0)
            crc = 0
            while block := f.read(BLOCK):
                crc = zlib.crc32(block, crc)
            check_crc(self.listed[i], crc)
            self._checked.add(i)
        f.seek(0)
        return h5py.File(f, "r")

    def slices(self, names: tuple[str, ...], rows: int = ROWS) -> Iterator[tuple[int, int, dict[str, np.ndarray]]]:
        """(segment index, its first row, {name: column}) for each slice of each segment, in the order recorded.
        ``names``: one-value columns (``status``, ``fitness``, ``id``...) or one metric's (``metrics/val_loss``,
        NaN where a row has none)."""
        for i, segment in enumerate(self.listed):
            with self._open(i) as f:
                if f["id"].shape[0] != segment.rows:
                    raise ValueError(f"segment {segment.name} holds {f['id'].shape[0]} records, not the {segment.rows} listed")
                for start in range(0, segment.rows, rows):
                    stop = min(start + rows, segment.rows)
                    yield i, start, {name: _column(f, name, start, stop) for name in names}

    def records(self, n_genes: int | None = None, rows: int = ROWS // 4) -> Iterator[list[Record]]:
        """Every record, in the order recorded, ``rows`` at a time (``evens report --csv``)."""
        for i, segment in enumerate(self.listed):
            with self._open(i) as f:
                ends = _row_ends(f)
                for start in range(0, segment.rows, rows):
                    yield table.decode(_span(f, start, min(start + rows, segment.rows), ends), Record, n_genes)

    def named(self, group: str) -> list[str]:
        """Every name of a named field's columns (``metrics``) that any segment has, sorted."""
        names: set[str] = set()
        for i in range(len(self.listed)):
            with self._open(i) as f:
                names.update(f[group].keys() if group in f else ())
        return sorted(names)

    def fetch(self, at: list[tuple[int, int]], n_genes: int | None = None) -> list[Record]:
        """The whole records at (segment index, row), in the order given."""
        out: dict[tuple[int, int], Record] = {}
        for i in sorted({s for s, _ in at}):
            rows = sorted({r for s, r in at if s == i})
            with self._open(i) as f:
                for row, record in zip(rows, table.decode(_rows(f, rows), Record, n_genes)):
                    out[(i, row)] = record
        return [out[a] for a in at]


def _column(f: h5py.File, name: str, start: int, stop: int) -> np.ndarray:
    if name.startswith("metrics/"):
        key = name.split("/", 1)[1]
        return f["metrics"][key][start:stop] if key in f["metrics"] else np.full(stop - start, np.nan)
    return f[name][start:stop]


def _row_ends(f: h5py.File) -> dict[str, np.ndarray]:
    """Each flat column's row ends in a segment: a 0, then the running sum of its rows' lengths."""
    return {n[: -len("_length")]: np.concatenate([[0], np.cumsum(f[n][...])]) for n in f if n.endswith("_length")}


def _fixed(f: h5py.File, rows) -> dict:
    """The columns of ``rows`` (a slice, or increasing row numbers) that hold a value or a named set a row: all but the
    flat ones."""
    out: dict = {}
    for name, item in f.items():
        if isinstance(item, h5py.Group):  # named: one float column per key
            out[name] = {key: item[key][rows] for key in item}
        elif not (name.endswith("_length") or f"{name}_length" in f):
            out[name] = item[rows]
    return out


def _span(f: h5py.File, start: int, stop: int, ends: dict[str, np.ndarray]) -> dict:
    """The columns of rows ``start`` to ``stop`` of a segment, laid out as :func:`columns.encode` makes them; ``ends``:
    :func:`_row_ends`."""
    out = _fixed(f, slice(start, stop))
    for name, at in ends.items():  # flat: the rows' runs of values, end to end
        out[name] = f[name][int(at[start]):int(at[stop])]
        out[f"{name}_length"] = np.diff(at[start:stop + 1])
    return out


def _rows(f: h5py.File, rows: list[int]) -> dict:
    """The columns of the given rows (increasing) of a segment, laid out as :func:`columns.encode` makes them."""
    out = _fixed(f, rows)
    for name, at in _row_ends(f).items():  # flat: each row's run of values
        parts = [f[name][int(at[r]):int(at[r + 1])] for r in rows]
        out[name] = np.concatenate(parts) if parts else f[name][0:0]
        out[f"{name}_length"] = np.diff(at)[rows]
    return out
