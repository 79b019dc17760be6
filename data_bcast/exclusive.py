"""A file written under a temporary name beside its target, then renamed over it, never through a symlink.

The temporary name, ``.<name>.<16 hex digits>.tmp`` (the form of evens' run files), is unpredictable
and created with O_CREAT | O_EXCL | O_NOFOLLOW, so a file or symlink planted in advance is never
followed or overwritten; everything is written through that one descriptor. The name is cut to fit
the folder's NAME_MAX wherever the target's name fits. A writer that fails removes its temporary
file; one that is killed leaves it behind.
"""
from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from typing import BinaryIO, Iterator

# A signal that a command turns into an exception (evolve.app.infra.process.ending_signals) waits while this module
# runs: raised between a temporary file's creation and the ``try`` that removes it, it would leave the file behind.
SIGNALS_WAIT_HERE = True

SUFFIX = ".tmp"
_TOKEN_BYTES = 8


def temp_name(name: str, name_max: int = 255) -> str:
    """``.<name>.<random>.tmp``, with ``name`` cut (never below one character) to fit ``name_max`` bytes."""
    token = secrets.token_hex(_TOKEN_BYTES)
    return f".{fitting(name, name_max - len(f'..{token}{SUFFIX}'))}.{token}{SUFFIX}"


def fitting(name: str, room: int) -> str:
    """``name`` cut at a character to at most ``room`` bytes (never below one character): the part of a
    hidden temporary's name that comes from its target, so that it fits wherever the target fits."""
    while len(os.fsencode(name)) > room and len(name) > 1:
        name = name[:-1]
    return name


def name_max(folder: str) -> int:
    """The longest file name ``folder`` takes, in bytes (255 where it does not say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # pragma: no cover - not POSIX, or not said
        return 255


def exclusive_temp(target: str, mode: int = 0o666) -> tuple[str, int]:
    """Create a new empty file beside ``target``; its path and a read-write descriptor on it.
    ``mode`` is filtered by the user's umask, as for any new file."""
    folder, name = os.path.split(os.path.abspath(target))
    flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    limit = name_max(folder)
    for _ in range(16):
        path = os.path.join(folder, temp_name(name, limit))
        try:
            return path, os.open(path, flags, mode)
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: cannot create a temporary file beside {name}")


def _same_file(path: str, st: os.stat_result) -> bool:
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


@contextmanager
def replacing(target: str) -> Iterator[BinaryIO]:
    """An unbuffered binary file that replaces ``target`` when the block ends without an error.

    The data is synced before the rename, and the rename happens only if the temporary name still
    holds the file written. On an error the temporary file is removed and ``target`` is untouched.

    >>> with replacing("out.bin") as f:  # doctest: +SKIP
    ...     f.write(b"all or nothing")
    """
    path, fd = exclusive_temp(target)
    ours = os.fstat(fd)
    try:
        with os.fdopen(fd, "r+b", buffering=0) as f:
            yield f
            os.fsync(f.fileno())
        if not _same_file(path, ours):
            raise OSError(f"{path}: the temporary file was replaced while it was written")
        os.replace(path, target)
    finally:
        if _same_file(path, ours):
            os.remove(path)
