"""The memory a node's copy of the dataset lives in: a descriptor that any process may be handed.

The node's ranks map one file in ``/dev/shm`` (tmpfs: memory, not disk), which the leader creates
and removes from the file system as soon as every rank of the node has opened it. From then on the
copy has no name: the kernel frees it when the last descriptor and mapping are gone, however the job
ends, so an abnormal end leaves nothing behind. Each rank keeps its descriptor open, so that it can
hand the same pages to a training process of its own (a spawned process cannot attach an MPI-3
shared window, which is why this is a file and not one). A private copy (``shared=False``) is an
anonymous ``memfd`` of the rank's own, which can be handed on the same way.

Pages are not reserved up front (as with an MPI shared window): a node whose tmpfs is too small for
the dataset fails when the data arrives, not here. ``df /dev/shm`` says how much a node has.
"""
from __future__ import annotations

import mmap
import os
import secrets

import numpy as np

SHM_DIR = "/dev/shm"


class NodeMemory:
    """``size`` bytes behind descriptor ``fd``, mapped shared; ``buffer`` is a flat uint8 view of them."""

    def __init__(self, fd: int, size: int, writable: bool = True):
        self.fd, self.size = fd, size
        # A training process maps it read-only: it can never change the node's copy, and a read-only
        # shared mapping is not "data" to RLIMIT_DATA (train.max_host_memory_gb), as a private one would be.
        # mmap refuses a length of 0: an empty dataset (never broadcast, but tested) gets an empty buffer
        self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)) if size else None
        self.buffer = np.frombuffer(self._map, dtype=np.uint8, count=size) if size else np.empty(0, dtype=np.uint8)

    @classmethod
    def anonymous(cls, size: int) -> NodeMemory:
        """A copy of this process's own that cannot be handed on (no descriptor: ``fd`` is -1)."""
        memory = cls.__new__(cls)
        memory.fd, memory.size, memory._map = -1, size, None
        memory.buffer = np.empty(size, dtype=np.uint8)
        return memory

    @classmethod
    def private(cls, size: int) -> NodeMemory:
        """An anonymous copy of this process's own (still a descriptor it can hand on)."""
        fd = os.memfd_create("evens-data", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        return cls(fd, size)

    def close(self) -> None:
        """Unmap and close (the pages go when no process holds them any more). Views still alive keep
        the mapping until they go (numpy holds it), so closing never invalidates an array in use."""
        self.buffer = np.empty(0, dtype=np.uint8)
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # an array still refers to it: the mapping goes with the last such array
                pass
            self._map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def shared_node_memory(size: int, node) -> NodeMemory:
    """Collective on ``node`` (an MPI communicator of one node's ranks): one copy for the node, in a
    file of ``/dev/shm`` that is unlinked once every rank holds it. Raises OSError on every rank if
    the leader cannot create it (with the leader's reason)."""
    name, error = None, None
    if node.rank == 0:
        name = os.path.join(SHM_DIR, f"evens-data-{os.getpid()}-{secrets.token_hex(6)}")
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            os.ftruncate(fd, size)
        except OSError as exc:
            error = f"cannot make the node's copy of the data in {SHM_DIR} ({exc.strerror})"
    name, error = node.bcast((name, error), root=0)
    if error is not None:
        raise OSError(error)
    if node.rank != 0:
        try:
            fd = os.open(name, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as exc:
            fd, error = -1, f"cannot open the node's copy of the data {name} ({exc.strerror})"
    errors = node.allgather(error)  # every rank holds it, or knows who failed: the name can go
    if node.rank == 0:
        os.unlink(name)
    error = next((e for e in errors if e), None)
    if error is not None:
        if fd >= 0:
            os.close(fd)
        raise OSError(error)
    return NodeMemory(fd, size)


def mapped(fd: int, size: int) -> NodeMemory:
    """A process handed ``fd`` (a training process) maps the same pages, read-only."""
    return NodeMemory(fd, size, writable=False)

