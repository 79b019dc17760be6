"""The hashes of the networks a search has proposed, appended at each checkpoint instead of rewritten whole.

The duplicate check (evolve.search.keyset) holds every network proposed as a 64-bit hash, and a resume carries it on.
Held in the checkpoint's memory, every checkpoint would write all of them again: 80 MB at 10^7 networks, 480 MB at the
6 x 10^7 of a 72-hour campaign at full scale, every 10 seconds. So with a run directory they live in
``checkpoint.proposed`` beside the state file (a side file, evolve.runfile.sidefile):

* a 32-byte header: ``EVPROPOS``, a format version and 8 (the bytes a hash; uint32 each), and a random 16-byte token
  that the checkpoints' memory names (``strategy.seen_token``);
* then the hashes (int64, little-endian) in the order they were added, a few repeated where a search settled for a
  network proposed before.

Each checkpoint appends what was added since the last one and syncs the file before it commits, and its memory says
how many hashes the file must hold (``strategy.seen_count``) and their CRC-32 (``strategy.seen_crc32``, kept as they
are appended). A resume reads that many (:func:`read_for`), checks them, and drops any after them (appended for a
checkpoint that never committed); one whose file is missing, another run's, short or damaged reads the history
instead, which writes a new file. Nothing in the file is executed.
"""
from __future__ import annotations

import os
import zlib

import numpy as np

from evolve.engine.memory import part as memory_part
from evolve.search.keyset import sorted_unique

from .sidefile import HEADER, SideFile

PROPOSED_SUFFIX = ".proposed"
NAME = "seen"  # the set's name in the strategy's memory (evolve.search.strategy) ...
PREFIX = "strategy."  # ... and the strategy's part of the checkpoint's memory (evolve.engine.memory)
TOKEN, COUNT, CRC = f"{NAME}_token", f"{NAME}_count", f"{NAME}_crc32"  # what the memory says of the file
_HASH = np.dtype("<i8")


def proposed_path(path: str) -> str:
    """The file beside the state file ``path``: ``checkpoint.h5`` -> ``checkpoint.proposed``."""
    return os.path.splitext(path)[0] + PROPOSED_SUFFIX


class ProposedLog(SideFile):
    """``checkpoint.proposed``, open to append (see the module's note)."""

    MAGIC, VERSION, WHAT = b"EVPROPOS", 1, "the hashes of the networks proposed"

    def __init__(self, path: str, token: bytes | None = None, count: int = 0, crc: int = 0):
        """A new file at ``path`` (replacing any there), or with ``token`` the existing one that a checkpoint counting
        ``count`` hashes of CRC-32 ``crc`` names (:func:`usable` said so): what follows them is dropped."""
        super().__init__(path, _HASH.itemsize, token)
        self.count, self.crc = (count, crc) if token is not None else (0, 0)
        if token is not None and self.size > self._end:
            with self.writing():
                os.ftruncate(self._fd, self._end)

    @property
    def _end(self) -> int:
        return HEADER.size + self.count * _HASH.itemsize

    def append(self, hashes: np.ndarray) -> None:
        data = np.ascontiguousarray(hashes, dtype=_HASH).tobytes()
        self.pwrite(data, self._end)
        self.count += len(data) // _HASH.itemsize
        self.crc = zlib.crc32(data, self.crc)  # of every hash so far, kept as they are appended

    def memory(self) -> dict[str, np.ndarray]:
        """What the checkpoint's memory says of the file (under the set's name): its token, the hashes it holds and their CRC-32."""
        return {"token": np.frombuffer(self.token, dtype=np.uint8).copy(), "count": np.asarray([self.count], dtype=np.int64),
                "crc32": np.asarray([self.crc], dtype=np.int64)}


def usable(path: str, memory: dict[str, np.ndarray]) -> bool:
    """Is ``path`` the file the checkpoint's strategy ``memory`` counts on, and whole? True where it counts on none (the
    hashes are in the memory, or the strategy keeps none)."""
    if TOKEN not in memory:
        return True
    size = ProposedLog.matches(path, bytes(memory[TOKEN]), _HASH.itemsize)
    return size is not None and size >= HEADER.size + int(memory[COUNT][0]) * _HASH.itemsize


def read_for(path: str, memory: dict[str, np.ndarray]) -> np.ndarray | None:
    """The hashes the checkpoint's strategy ``memory`` counts on (:func:`usable` has checked the file), sorted, each once;
    None if they are not those the checkpoint counted (fewer, or another CRC-32: the file was damaged)."""
    count = int(memory[COUNT][0])
    try:
        with open(path, "rb") as f:
            f.seek(HEADER.size)
            data = f.read(count * _HASH.itemsize)
    except OSError:
        return None
    if len(data) != count * _HASH.itemsize or zlib.crc32(data) != int(memory[CRC][0]):
        return None
    return sorted_unique(np.frombuffer(data, dtype=_HASH).astype(np.int64))


def filled(path: str, memory: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A checkpoint's ``memory`` (every part's, as evolve.engine.memory names them) with the hashes its file holds, as
    ``strategy.seen``; or {} where that file is not usable (a resume then reads the history, which writes a new one)."""
    part = memory_part(memory, PREFIX.rstrip("."))
    if TOKEN not in part:
        return memory
    hashes = read_for(path, part) if usable(path, part) else None
    return {} if hashes is None else {**memory, PREFIX + NAME: hashes}


def stored(memory: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What a checkpoint writes of ``memory``: all of it but the hashes its file holds (read back from it, by :func:`filled`)."""
    return {key: value for key, value in memory.items() if key != PREFIX + NAME} if PREFIX + TOKEN in memory else memory


def open_for(path: str, memory: dict[str, np.ndarray]) -> ProposedLog:
    """The file of a session: the checkpoint's own (its strategy ``memory`` names it, :func:`usable` has checked it), else
    a new one."""
    if TOKEN not in memory:
        return ProposedLog(path)
    return ProposedLog(path, bytes(memory[TOKEN]), int(memory[COUNT][0]), int(memory[CRC][0]))
