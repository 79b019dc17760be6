"""Temporary files for atomic writes: unpredictable names, created exclusively, never through a symlink.

A file is written under a temporary name beside its target, then renamed over it. The name holds
random bytes and is created with O_CREAT | O_EXCL | O_NOFOLLOW, so a file or symlink planted in
advance is never followed or overwritten. A job killed mid-write leaves its temporary behind; the
next job to hold the run's lock removes such leftovers (:func:`remove_stale`).
"""
from __future__ import annotations

import glob
import os

from data_bcast.exclusive import SUFFIX
from data_bcast.exclusive import exclusive_temp as created_beside  # (one way to name and create them, the datasets' too)


def exclusive_temp(target: str, mode: int = 0o666) -> str:
    """Create an empty temporary file beside ``target`` (``.<name>.<random>.tmp``) and return its path.
    ``mode`` is filtered by the user's umask, as for any new file (mkstemp would make it private).
    ``<name>`` is cut to fit the folder's NAME_MAX, so the temporary fits wherever the target does."""
    path, fd = created_beside(target, mode)
    os.close(fd)
    return path


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
