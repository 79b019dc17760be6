"""Files beside the state file that a checkpoint counts on without holding them: what grows with the history and
must not be rewritten whole at every checkpoint (``checkpoint.genomes``: the paused networks' genomes;
``checkpoint.proposed``: the hashes of the networks proposed).

Each begins with a 32-byte header: 8 magic bytes, a format version and a figure of the file's kind (uint32 each), and a
random 16-byte token that the checkpoint's memory names, so that a resume knows the file is this run's. A file is
opened without following a link (a link, a folder or no permission in its place is one line naming the file), written
with ``pwrite``, and synced before each checkpoint that counts on what was written. Nothing in one is executed.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import stat
import struct

from evolve.errors import RunDirError

HEADER = struct.Struct("<8sII16s")  # magic, version, figure, token


class SideFile:
    """One such file, open for reading and writing. A subclass says what it holds: ``MAGIC``, ``VERSION`` and ``WHAT``
    (words for its messages)."""

    MAGIC = b""
    VERSION = 1
    WHAT = ""

    def __init__(self, path: str, figure: int, token: bytes | None = None):
        """A new file at ``path`` (replacing any there), or with ``token`` the existing one that token names (the caller
        checked it: :meth:`matches`)."""
        self.path = path
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            self._fd = os.open(path, flags, 0o644)
        except OSError as exc:  # a link in its place (never followed), a folder, no permission
            raise RunDirError(f"{path}: cannot open {self.WHAT} ({exc.strerror})") from None
        if not stat.S_ISREG(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            raise RunDirError(f"{path}: not a regular file")
        if token is None:
            self.token = secrets.token_bytes(16)
            with self.writing():
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, HEADER.pack(self.MAGIC, self.VERSION, figure, self.token), 0)
        else:
            self.token = token
        self._dirty = token is None

    @property
    def size(self) -> int:
        return os.fstat(self._fd).st_size

    @contextlib.contextmanager
    def writing(self):
        """A write that fails (a full disk, a quota, a file system gone read-only) as one line naming the file."""
        try:
            yield
        except OSError as exc:
            raise RunDirError(f"{self.path}: cannot write {self.WHAT} ({exc.strerror or exc}); the run keeps its last "
                              "checkpoint") from None

    def pwrite(self, data: bytes, offset: int) -> None:
        with self.writing():
            os.pwrite(self._fd, data, offset)
        self._dirty = True

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def sync(self) -> None:
        """Everything written so far on disk (before a checkpoint that counts on it commits)."""
        if self._dirty:
            with self.writing():
                os.fsync(self._fd)
            self._dirty = False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @classmethod
    def matches(cls, path: str, token: bytes, figure: int) -> int | None:
        """The size of the file at ``path`` if it is one of this kind with this ``figure`` and ``token``, else None."""
        try:
            with open(path, "rb") as f:
                magic, version, held, found = HEADER.unpack(f.read(HEADER.size))
                size = os.fstat(f.fileno()).st_size
        except (OSError, struct.error):
            return None
        return size if (magic, version, held, found) == (cls.MAGIC, cls.VERSION, figure, token) else None
