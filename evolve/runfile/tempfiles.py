"""Temporary files for atomic writes: unpredictable names, created exclusively, never through a symlink.

A file is written under a temporary name beside its target, then renamed over it. The name holds
random bytes and is created with O_CREAT | O_EXCL | O_NOFOLLOW, so a file or symlink planted in
advance is never followed or overwritten. A job killed mid-write leaves its temporary behind; the
next job to hold the run's lock removes such leftovers (:func:`remove_stale`).
"""
from __future__ import annotations

import glob
import os
import secrets

SUFFIX = ".tmp"
_TOKEN_BYTES = 8  # random bytes in a name, written as twice as many hex digits


def exclusive_temp(target: str, mode: int = 0o666) -> str:
    """Create an empty temporary file beside ``target`` (``.<name>.<random>.tmp``) and return its path.
    ``mode`` is filtered by the user's umask, as for any new file (mkstemp would make it private).
    ``<name>`` is cut to fit the folder's NAME_MAX, so the temporary fits wherever the target does."""
    folder, name = os.path.split(os.path.abspath(target))
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0)
    name = _fitting(name, _name_max(folder) - len(f"..{SUFFIX}") - 2 * _TOKEN_BYTES)
    for _ in range(16):
        path = os.path.join(folder, f".{name}.{secrets.token_hex(_TOKEN_BYTES)}{SUFFIX}")
        try:
            os.close(os.open(path, flags, mode))
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: cannot create a temporary file beside {name}")


def _fitting(name: str, room: int) -> str:
    """``name`` cut at a character to at most ``room`` bytes (never below one character)."""
    while len(os.fsencode(name)) > room and len(name) > 1:
        name = name[:-1]
    return name


def _name_max(folder: str) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):  # not said
        return 255


def remove_stale(folder: str) -> list[str]:
    """Remove temporaries that a killed writer left in ``folder`` (only while holding the run's lock).
    Returns the names removed."""
    removed = []
    for path in glob.glob(os.path.join(folder, f".*.*{SUFFIX}")):
        if os.path.islink(path) or os.path.isfile(path):
            try:
                os.remove(path)
                removed.append(os.path.basename(path))
            except OSError:
                pass
    return removed
