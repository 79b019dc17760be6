"""The dataset, the contenders and the counters that scripts/bench/bench_bcast.py and its ``--profile`` share.

Importing this module wraps ``h5py.File`` to count opens of HDF5 files (B3 of bench_bcast), data_bcast's
included. Each contender loads one file onto every rank of ``comm`` and returns ``(arrays, close, root's
read seconds or None)``; bench_bcast.py's docstring says what each one is.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import time
import zlib

import h5py
import numpy as np

import data_bcast.reader as _reader
from data_bcast import load_dataset, write_dataset
from data_bcast.broadcast import LoadOptions, broadcast_dataset

try:  # optional (pip install isal): the same CRC-32, faster; the profile times both
    from isal import isal_zlib
except ImportError:
    isal_zlib = None

PAGE = os.sysconf("SC_PAGE_SIZE")

# ---------------------------------------------------------------------------------------------------------
# counting opens of HDF5 files (B3)

OPENS = {"n": 0}
real_h5py_file = h5py.File


def _counting_file(*a, **k):
    OPENS["n"] += 1
    return real_h5py_file(*a, **k)


h5py.File = _counting_file  # the module's attribute: every h5py.File call, data_bcast's too


# ---------------------------------------------------------------------------------------------------------
# /proc helpers


def proc_kb(path: str, key: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def minflt() -> int:
    """Minor page faults of this process so far (/proc/self/stat field 10)."""
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def rchar() -> int:
    return proc_kb_plain("/proc/self/io", "rchar")


def proc_kb_plain(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
    except OSError:
        pass


def fixed_mmap_threshold() -> None:
    """Make glibc mmap every block >= 128 KiB and unmap it on free, so that freed arrays leave the process
    and each rep's Pss growth is not hidden by reused heap pages."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 128 << 10)  # M_MMAP_THRESHOLD
    except OSError:
        pass


def crc(buf) -> int:
    return (isal_zlib or zlib).crc32(buf)  # the same CRC-32 either way; isal is only faster


def digest(arrays: dict[str, np.ndarray]) -> dict:
    return {k: (a.shape, str(a.dtype), crc(np.ascontiguousarray(a).reshape(-1).view(np.uint8))) for k, a in sorted(arrays.items())}


def make_file(directory: str, mib: float, seed: int = 0) -> str:
    """A synthetic dataset of about ``mib`` MiB: float32 images (N, 1, 64, 64), 10 classes, 70/15/15 splits."""
    n = max(20, int(mib * 2**20) // (64 * 64 * 4 + 8))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 1, 64, 64), dtype=np.float32)
    y = rng.integers(0, 10, n)
    a, b = int(n * 0.7), int(n * 0.85)
    path = os.path.join(directory, "bench.h5")
    write_dataset(path, {"train": (x[:a], y[:a]), "val": (x[a:b], y[a:b]), "test": (x[b:], y[b:])})
    return path


# ---------------------------------------------------------------------------------------------------------
# the experiment: the stream with the root's raw reads turned off


@contextlib.contextmanager
def patched(h5py_reads=False):
    if not h5py_reads:
        yield
        return
    saved = _reader.RowReader.raw_offset
    try:
        _reader.RowReader.raw_offset = lambda self, name: None
        yield
    finally:
        _reader.RowReader.raw_offset = saved


# ---------------------------------------------------------------------------------------------------------
# contenders: each returns (arrays, close, root's read seconds or None)


def run_stream(shared, chunk=None, **experiment):
    def run(comm, path, chunk_bytes):
        with patched(**experiment):
            options = LoadOptions(chunk_mb=(chunk or chunk_bytes) / (1 << 20), shared_memory=shared)
            data = broadcast_dataset(comm, path if comm.rank == 0 else None, options)
        return data.arrays, data.close, data.stats.get("read_seconds")
    return run


def run_pickle(comm, path, chunk_bytes):
    arrays, read_s = None, None
    if comm.rank == 0:
        t = time.perf_counter()
        arrays = load_dataset(path)[1]
        read_s = time.perf_counter() - t
    return comm.bcast(arrays, root=0), lambda: None, read_s


def run_whole(comm, path, chunk_bytes):
    arrays, read_s, specs = None, None, None
    if comm.rank == 0:
        t = time.perf_counter()
        arrays = load_dataset(path)[1]
        read_s = time.perf_counter() - t
        specs = [(k, a.shape, a.dtype.str) for k, a in arrays.items()]
    specs = comm.bcast(specs, root=0)
    if comm.rank != 0:
        arrays = {k: np.empty(shape, dtype=np.dtype(dt)) for k, shape, dt in specs}
    for k, _, _ in specs:
        comm.Bcast(arrays[k], root=0)  # one message per array (each below 2 GiB here)
    return arrays, lambda: None, read_s


def run_every_rank(comm, path, chunk_bytes):
    t = time.perf_counter()
    arrays = load_dataset(path)[1]
    return arrays, lambda: None, time.perf_counter() - t if comm.rank == 0 else None


def contenders(experiments: bool) -> dict:
    c = {"stream_private": run_stream(False), "pickle": run_pickle, "whole": run_whole,
         "stream_shared": run_stream(True), "every_rank_reads": run_every_rank}
    if experiments:
        c["x_h5py_reads"] = run_stream(False, h5py_reads=True)
    return c
