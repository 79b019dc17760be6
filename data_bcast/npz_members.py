"""The arrays of an .npz archive, read member by member: the header first, the data in blocks of rows.

``np.load`` trusts a member's header and inflates the whole array at once: a member of a few hundred
bytes whose header declares 4 TB fails in the allocator, and a few MB of zeros that inflate to GBs
are in memory before anything is checked. Here a member's header (shape, dtype, order) is read
alone and checked against the sizes the archive records (:func:`read_member`), so that what the
array takes is known before it is read; a C-ordered array is then read a block of rows at a time
(:func:`row_blocks`), and only what must be whole (:func:`read_whole`) is inflated at once.
Nothing is unpickled.
"""
from __future__ import annotations

import math
import zipfile
import zlib
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .h5file import DataError, first_line

DEFLATE_MOST = 1032  # deflate's largest ratio: a 258-byte match from about 2 bits
_HEADER_SLACK = 1 << 16  # .npy header and zip framing around the data
READ_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error)


@dataclass(frozen=True)
class Member:
    """One array of the archive as its .npy header declares it; ``name`` is its name in the zip."""

    key: str
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * self.dtype.itemsize

    @property
    def in_rows(self) -> bool:
        """Whether its rows lie one after the other, so that it can be read a block of rows at a time."""
        return not self.fortran or len(self.shape) <= 1


def human_size(n: int) -> str:
    """``n`` bytes for a reader: 4.0 TiB, 12.5 MiB."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _read_header(f, src: str, key: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        version = np.lib.format.read_magic(f)
    except READ_ERRORS:
        raise DataError(f"{src}: cannot read {key}: it is not an array saved by numpy (no .npy header)") from None
    read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read is None:  # 3.0 is numpy's form for structured arrays with non-Latin-1 field names
        raise DataError(f"{src}: cannot read {key}: .npy format {version[0]}.{version[1]} (a structured array); save plain numbers")
    try:
        return read(f)
    except READ_ERRORS as exc:
        raise DataError(f"{src}: cannot read {key}: its .npy header is damaged ({first_line(exc)})") from None


def read_member(archive: zipfile.ZipFile, src: str, key: str) -> Member:
    """``key``'s header, checked against the sizes the archive records, reading none of its data.

    Refused in one line: a member whose header declares more data than the archive holds for it, and
    one that the archive says inflates beyond what its compression can (a damaged or crafted file).
    """
    try:
        name, info = f"{key}.npy", archive.getinfo(f"{key}.npy")  # NpzFile's keys drop the .npy
    except KeyError:
        name, info = key, archive.getinfo(key)
    most = {zipfile.ZIP_STORED: 1, zipfile.ZIP_DEFLATED: DEFLATE_MOST}.get(info.compress_type)
    if most is not None and info.file_size > most * info.compress_size + _HEADER_SLACK:
        raise DataError(f"{src}: cannot read {key}: the archive says its {human_size(info.compress_size)} inflate to "
                        f"{human_size(info.file_size)}, more than its compression can give (a damaged or crafted file)")
    try:
        with archive.open(name) as f:
            shape, fortran, dtype = _read_header(f, src, key)
            data_start = f.tell()
    except DataError:
        raise
    except READ_ERRORS as exc:
        raise DataError(f"{src}: cannot read {key} ({first_line(exc)})") from None
    member = Member(key, name, tuple(int(n) for n in shape), np.dtype(dtype), bool(fortran))
    if not member.dtype.hasobject and data_start + member.nbytes > info.file_size:
        raise DataError(f"{src}: cannot read {key}: its header declares {member.shape} {member.dtype} ({human_size(member.nbytes)}), "
                        f"but the archive holds {human_size(max(0, info.file_size - data_start))} of it (a damaged or crafted file)")
    return member


def row_blocks(archive: zipfile.ZipFile, src: str, member: Member, rows: int) -> Iterator[np.ndarray]:
    """The rows of ``member`` (one with :attr:`Member.in_rows`), ``rows`` at a time, inflated as they are read."""
    try:
        with archive.open(member.name) as f:
            _read_header(f, src, member.key)
            for start in range(0, member.shape[0], rows):
                n = min(rows, member.shape[0] - start)
                data = f.read(n * member.row_bytes)
                if len(data) < n * member.row_bytes:
                    raise DataError(f"{src}: cannot read {member.key}: the archive ends at row {start + len(data) // max(1, member.row_bytes)} "
                                    f"of {member.shape[0]} (a damaged file)")
                yield np.frombuffer(data, dtype=member.dtype).reshape((n,) + member.shape[1:])
    except DataError:
        raise
    except READ_ERRORS as exc:
        raise DataError(f"{src}: cannot read {member.key} ({first_line(exc)})") from None


def read_whole(archive: zipfile.ZipFile, src: str, member: Member) -> np.ndarray:
    """``member`` inflated whole (what :func:`read_member` has checked), never unpickled."""
    try:
        with archive.open(member.name) as f:
            return np.lib.format.read_array(f, allow_pickle=False)
    except READ_ERRORS as exc:
        raise DataError(f"{src}: cannot read {member.key} ({first_line(exc)})") from None
