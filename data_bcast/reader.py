"""Reading the arrays a :class:`~data_bcast.h5file.DataPlan` plans, in bounded memory.

:class:`RowReader` reads any rows of a planned array: through h5py (held-out splits through the
plan's seeded permutation), or, where the array is stored contiguous and unfiltered in the planned
dtype, as the file's own bytes on several threads (:meth:`RowReader.read_raw`). Values are cast to
the planned dtype and checked for NaN/inf either way. ``read_into`` fills preallocated arrays (for
the broadcast, views into the node's shared copy); ``load_dataset`` reads a whole file in one process.
"""
from __future__ import annotations

import os

import h5py
import numpy as np

from .checksum import crc32, crc32_combine
from .h5file import DAMAGE, SPLITS, DataError, DataPlan, first_line, holdout_permutation, inspect_file

ROW_BLOCK_BYTES = 64 << 20  # read x in blocks of about this size
PIECE_BYTES = 8 << 20  # a raw read is cut into pieces of this size, read (and checked) by several threads


def _checked(block: np.ndarray, where: str, first: int) -> None:
    """Refuse NaN or infinite values (checked after the cast, so float64 beyond float32's range counts)."""
    if np.issubdtype(block.dtype, np.floating) and not np.isfinite(block).all():
        bad = int(np.flatnonzero(~np.isfinite(block.reshape(len(block), -1)).all(axis=1))[0]) if block.ndim else 0
        raise DataError(f"{where} holds NaN or infinite values (as float32), first in row {first + bad}")


class RowReader:
    """Reads any rows of the planned arrays from the file, in bounded memory (for streaming).

    Rows of a split that the file holds are read as they are; rows of a held-out split come from
    the file's train rows through the plan's seeded permutation (the first ``holdout_sizes["test"]``
    go to test, the next to val, the rest, in file order, to train). A read of scattered rows
    covers them with one slab when they are dense enough (held-out train rows are), else asks
    h5py for just those rows. Values are cast to the planned dtype and checked for NaN/inf.
    """

    SLAB_FACTOR = 4  # read a covering slab while it is at most this many times the rows wanted

    def __init__(self, plan: DataPlan):
        self.plan = plan
        self._file = h5py.File(plan.path, "r")
        self._rows: dict[str, np.ndarray | None] = {s: None for s in SPLITS}
        self._raw: dict[str, int | None] = {}
        if plan.holdout_sizes:
            n_file = self._file["train"]["x"].shape[0]
            order = holdout_permutation(n_file, plan.seed)
            start = 0
            for split in ("test", "val"):
                if split in plan.holdout_sizes:
                    self._rows[split] = order[start : start + plan.holdout_sizes[split]]
                    start += plan.holdout_sizes[split]
            self._rows["train"] = np.sort(order[start:])

    def raw_offset(self, name: str) -> int | None:
        """Where row 0 of the planned array ``name`` starts in the file, when its rows can be read as
        the file's own bytes (see :meth:`read_raw`): a split the file holds, stored contiguous and
        unfiltered in the planned dtype and byte order, wholly inside the file, in a file opened by
        HDF5's default (POSIX) driver without a user block. Else None: read it through h5py."""
        if name not in self._raw:
            self._raw[name] = self._find_raw(name)
        return self._raw[name]

    def _find_raw(self, name: str) -> int | None:
        split, field = name.split("/")
        if self._rows[split] is not None or self._file.driver != "sec2" or self._file.userblock_size or not hasattr(os, "preadv"):
            return None
        try:
            ds, spec = self._file[split][field], self.plan.spec(name)
            if ds.is_virtual or ds.external or ds.chunks is not None or ds.dtype != np.dtype(spec.dtype):
                return None
            offset, size = ds.id.get_offset(), ds.id.get_storage_size()
            if offset is None or size != spec.nbytes or offset + size > os.fstat(self._file.id.get_vfd_handle()).st_size:
                return None  # not allocated, or storage that does not match the shape, or past the file's end
            return int(offset)
        except DAMAGE:  # odd: leave it to h5py, which says what is wrong
            return None

    def read_raw(self, name: str, first: int, last: int, out: np.ndarray, pool) -> int:
        """Fill ``out`` (C-contiguous) with rows ``first:last`` of ``name`` straight from the file's bytes
        (only where :meth:`raw_offset` gives an offset), in pieces read, checked for NaN/inf and
        checksummed by the threads of ``pool`` (a ``concurrent.futures`` executor: ``os.preadv`` and
        numpy's loops let them run at once); returns the CRC-32 of ``out``'s bytes."""
        where = f"{self.plan.path}: {name}"
        data = out.reshape(-1).view(np.uint8)
        fd, start = self._file.id.get_vfd_handle(), self._raw[name] + first * out[:1].nbytes
        floats = np.issubdtype(out.dtype, np.floating)

        def piece(a: int) -> tuple[int, int, bool]:
            view = data[a : a + PIECE_BYTES]
            got = 0
            while got < view.size:  # a regular file gives all at once; a parallel file system may not
                n = os.preadv(fd, [view[got:]], start + a + got)
                if n <= 0:
                    raise DataError(f"{where}: read failed at rows {first}..{last - 1}, the file looks damaged (it ends early)")
                got += n
            with np.errstate(over="ignore", invalid="ignore"):  # NaN and inf survive a sum; overflow is checked below
                finite = not floats or bool(np.isfinite(np.add.reduce(view.view(out.dtype))))
            return crc32(view), view.size, finite

        crc, all_finite = 0, True
        try:
            for part_crc, size, finite in pool.map(piece, range(0, data.size, PIECE_BYTES)):
                crc, all_finite = crc32_combine(crc, part_crc, size), all_finite and finite
        except OSError as exc:
            raise DataError(f"{where}: read failed at rows {first}..{last - 1} ({first_line(exc)})") from None
        if not all_finite:  # a non-finite value, or finite values whose sum overflowed: look properly
            _checked(out, where, first)
        return crc

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> RowReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read_into(self, name: str, first: int, last: int, out: np.ndarray) -> None:
        """Fill ``out`` with rows ``first:last`` of the planned array ``name`` ("train/x", ...)."""
        split, field = name.split("/")
        source_split = "train" if self.plan.sources[split] == "holdout" else split
        ds = self._file[source_split][field]
        where = f"{self.plan.path}: {source_split}/{field}"
        rows = self._rows[split]
        try:
            with np.errstate(over="ignore"):  # overflow becomes inf, refused just below
                if rows is None and ds.dtype == out.dtype and out.flags.c_contiguous and last > first:
                    ds.read_direct(out, np.s_[first:last], np.s_[0 : last - first])  # no temporary, no second copy
                elif rows is None:
                    out[...] = ds[first:last]
                else:
                    wanted = rows[first:last]
                    order = np.argsort(wanted, kind="stable")
                    ordered = wanted[order]
                    if len(ordered) and ordered[-1] - ordered[0] + 1 <= self.SLAB_FACTOR * len(ordered):
                        slab = ds[int(ordered[0]) : int(ordered[-1]) + 1]
                        out[order] = slab[ordered - ordered[0]]
                    elif len(ordered):
                        out[order] = ds[ordered]
        except DAMAGE as exc:
            raise DataError(f"{where}: read failed at rows {first}..{last - 1}, the file looks damaged "
                            f"({type(exc).__name__}: {first_line(exc)})") from None
        _checked(out, where, first)


def read_into(plan: DataPlan, arrays: dict[str, np.ndarray], block_bytes: int = ROW_BLOCK_BYTES) -> None:
    """Fill ``arrays`` (named as ``plan.specs``, all or some of them) from the file, in blocks of about
    ``block_bytes``. Raises :class:`DataError`."""
    try:
        with RowReader(plan) as reader:
            for spec in (s for s in plan.specs if s.name in arrays):
                out = arrays[spec.name]
                rows = out.shape[0]
                step = max(1, block_bytes // max(1, out[:1].nbytes))
                for first in range(0, rows, step):
                    reader.read_into(spec.name, first, min(rows, first + step), out[first : first + step])
    except DataError:
        raise
    except DAMAGE as exc:
        raise DataError(f"{plan.path}: read failed, the file looks damaged ({type(exc).__name__}: {first_line(exc)})") from None


def read_array(plan: DataPlan, name: str) -> np.ndarray:
    """One planned array, whole, in private memory: e.g. ``"train/y"`` on the root in shard mode,
    where each node holds only part of it. Raises :class:`DataError`."""
    spec = plan.spec(name)
    out = np.empty(spec.shape, dtype=spec.dtype)
    read_into(plan, {name: out})
    return out


def load_dataset(path: str, val_fraction: float = 0.15, test_fraction: float = 0.15, seed: int = 0) -> tuple[DataPlan, dict[str, np.ndarray]]:
    """Read the whole dataset into private memory (one process, no MPI)."""
    plan = inspect_file(path, val_fraction, test_fraction, seed)
    arrays = {s.name: np.empty(s.shape, dtype=s.dtype) for s in plan.specs}
    read_into(plan, arrays)
    return plan, arrays
