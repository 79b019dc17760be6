"""One checkpoint of a run, open whole, for readers beside a job that may be writing it (status, report, select).

A job checkpoints by writing its new segments, renaming a new state file over ``checkpoint.h5``, then removing the
segments that file no longer lists (:func:`evolve.runfile.checkpoint.save`). A reader that opens the state file, then
every segment it lists, before it reads anything holds one checkpoint whole, however many the job writes meanwhile: an
open file outlives its name. Only that opening can meet a checkpoint (a segment listed, then merged and removed before
it was opened): :func:`open_run` then opens the new checkpoint, again while the state file keeps being replaced, for up
to ``patience`` seconds. A failure on a state file nobody replaced is damage, reported at once, in one line::

    with open_run(path) as run:
        state, info = run.load()  # the state file alone
        with damage_as_one_line(path):
            for segment, start, columns in run.history.slices(("status", "fitness")):
                ...
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator

from evolve.errors import RunDirError

from . import checkpoint
from .history import History

TRY_AGAIN_SECONDS = 0.05  # between two openings that met a checkpoint


class RunVersion(contextlib.AbstractContextManager):
    """A checkpoint open whole: its state file (``file``) and, with ``segments``, every segment it lists (``history``).
    Raises what a failed opening raises (``ValueError`` for a listed segment that is gone); :func:`open_run` judges it."""

    def __init__(self, path: str, segments: bool = True):
        self.path = path
        self.file = checkpoint.open_state_file(path)
        self.history: History | None = None
        try:
            checkpoint.check_format(self.file, path)  # another format is named as one, not as a damaged listing
            if segments:
                self.history = History(checkpoint.segments_folder(path), checkpoint.listed_in(self.file))
        except BaseException:
            self.file.close()
            raise

    def load(self, history: bool = False, memory: bool = False, weights: bool = False, say=None):
        """The run as :func:`evolve.runfile.checkpoint.load` reads it, from this checkpoint: with ``history``, every record,
        from the segments held open (an instance opened with them)."""
        if history and self.history is None:
            raise ValueError("a run opened without its segments cannot give its history")
        return checkpoint.load_open(self.file, self.path, weights, say, history, memory, proposed_hashes=False, segments=self.history)

    def close(self) -> None:
        if self.history is not None:
            self.history.close()
        self.file.close()

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def damage_as_one_line(path: str) -> Iterator[None]:
    """Damage met while reading a history held open (a segment failing its CRC-32 or its layout) as one RunDirError
    naming the run file ``path``: segments held open cannot be taken away, so a failure there is never a job's doing."""
    try:
        yield
    except (KeyError, ValueError, OSError, RuntimeError) as exc:
        raise RunDirError(f"{path}: damaged run file ({type(exc).__name__}: {exc})") from None


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def open_run(path: str, segments: bool = True, patience: float = 60.0) -> RunVersion:
    """The checkpoint at ``path``, open whole (see the module's docstring); opened again while an opening fails because
    a job replaced the state file meanwhile. :class:`RunDirError` for damage, or after ``patience`` seconds of that."""
    deadline = time.monotonic() + patience
    while True:
        before = _identity(path)
        try:
            return RunVersion(path, segments)
        except (OSError, KeyError, ValueError, RuntimeError) as exc:  # (h5py: RuntimeError for some damaged headers)
            if _identity(path) == before or time.monotonic() > deadline:
                raise RunDirError(f"{path}: damaged checkpoint ({type(exc).__name__}: {exc})") from None
        time.sleep(TRY_AGAIN_SECONDS)


def read_run(path: str, history: bool = True, memory: bool = True, patience: float = 60.0):
    """The checkpoint at ``path`` without weights, from one version (see :func:`open_run`): ``history=False`` reads the
    state file alone; ``memory=False`` leaves the master's memory on disk."""
    with open_run(path, segments=history, patience=patience) as run:
        return run.load(history=history, memory=memory)
