"""What the data plane asks of this host: the cores a process may use, and a fresh buffer's pages.

A buffer the data streams into is fresh memory, and the kernel zeroes each page on its first touch.
:class:`Populator` has that work done on a thread of its own, ahead of the data, so that it does
not fall inside MPI's copies or the root's reads; :func:`prefault` is the fallback for kernels
without ``MADV_POPULATE_WRITE``. Nothing here imports MPI (``prefault`` is given its communicator).
"""
from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

MADV_POPULATE_WRITE = 23  # Linux 5.14: map pages writable as a write would, without writing to them
POPULATE_STEP = 16 << 20


def usable_cores(most: int | None = None) -> int:
    """The cores this process may run on (its affinity, as Slurm sets it), at most ``most`` if given."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores if most is None else min(most, cores))


def prefault(buffer: np.ndarray, node) -> None:
    """Collective on ``node``: every rank writes one byte a page of its share of a fresh shared copy
    (zeros, which it holds already), then all wait. A shared copy gets 4 KiB pages (no transparent
    huge pages for shmem unless the kernel allows them), and the kernel's work for each first touch
    otherwise falls on the root alone while it reads; this spreads it over the node's cores.
    (Used where :class:`Populator` cannot: kernels before Linux 5.14.)"""
    page = os.sysconf("SC_PAGE_SIZE")
    share = -(-buffer.size // node.size // page) * page
    lo = min(buffer.size, node.rank * share)
    buffer[lo : min(buffer.size, lo + share) : page] = 0
    node.Barrier()  # no rank still touching when the root starts to write


class Populator:
    """Gets the pages of ``buffer[lo:hi]`` from the kernel on a thread of its own, in order, while the
    data streams into it, so that their first-touch zeroing is not done inside MPI's copies or the
    root's reads. ``madvise`` with MADV_POPULATE_WRITE leaves what the pages hold alone, so the
    thread never races with the data arriving. :meth:`start` says False where the kernel lacks it
    (then nothing runs)."""

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
