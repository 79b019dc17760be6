"""Where an export goes: ``--out`` checked as it will be used, a hidden folder filled beside it and renamed into
place when complete, and the signals that remove that folder on the way out (:mod:`ensemble.export` fills it).

The folder never replaces anything: ``out`` must be new or empty, and not a symbolic link. Each file is written by
Python through a descriptor that created it, so a full disk is an OSError: the folder's failure, not a member's.
SIGTERM, SIGHUP and SIGINT remove the hidden folder too (:class:`ExportEnded`, KeyboardInterrupt).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import tempfile
import threading

from data_bcast.exclusive import fitting, name_max

from .references import first_line
from .store import EnsembleError


def check_destination(out: str) -> None:
    """EnsembleError unless ``out`` names a new or empty folder that is not a symbolic link: an export replaces
    nothing, and it is renamed into place at ``os.path.abspath(out)``, which this checks as the rename will see it."""
    name = os.path.basename(out.rstrip(os.sep))
    if name in ("", ".", ".."):  # "" and "." name the current folder, which the rename would replace
        raise EnsembleError(f"{out!r}: not a folder's name; an export goes into a new or empty folder (--out NEW_FOLDER)")
    target = os.path.abspath(out)
    try:
        mode = os.lstat(target).st_mode
        empty = not stat.S_ISDIR(mode) or not os.listdir(target)
    except FileNotFoundError:
        return
    except OSError as exc:  # a name longer than NAME_MAX, a file on the way where a folder should be, no permission
        raise EnsembleError(f"{out}: cannot put an export there ({exc.strerror})") from None
    if stat.S_ISLNK(mode):
        raise EnsembleError(f"{out}: is a symbolic link; an export goes into a new or empty folder, not through a link")
    if not stat.S_ISDIR(mode):
        raise EnsembleError(f"{out}: exists and is not a folder")
    if not empty:
        raise EnsembleError(f"{out}: not empty; an export goes into a new or empty folder")


class ExportEnded(BaseException):
    """SIGTERM or SIGHUP while exporting (a BaseException, as KeyboardInterrupt is: no ``except Exception`` in torch or
    a user's code takes it for a member's failure). The temporary folder is removed before it leaves
    :func:`export_ensemble`; a command ends with :attr:`status`, 128 + the signal, as ``evens predict`` does."""

    def __init__(self, signum: int):
        super().__init__(f"ended by {signal.Signals(signum).name}; the unfinished export was removed")
        self.status = 128 + signum


ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class EndingSignals:
    """While an export runs, SIGTERM and SIGHUP raise :class:`ExportEnded` and SIGINT KeyboardInterrupt where the
    export is, so that it removes its temporary folder. While held (the folder being made, published or removed)
    a signal waits instead. Off the main thread, where Python cannot set handlers, nothing changes."""

    def __init__(self) -> None:
        self.held, self.waiting = True, 0
        self._previous = {}
        if threading.current_thread() is threading.main_thread():  # a signal ignored (nohup, a background job) stays so
            ignored = {sig for sig in ENDING_SIGNALS if signal.getsignal(sig) == signal.SIG_IGN}
            self._previous = {sig: signal.signal(sig, self._note) for sig in ENDING_SIGNALS if sig not in ignored}

    def _note(self, signum, frame) -> None:
        if self.held:
            self.waiting = self.waiting or signum
            return
        self.held = True  # one signal ends the export; its copies wait, and are dropped
        raise ended(signum)

    def hold(self) -> None:
        self.held = True

    def release(self) -> None:
        """Signals act again; one that came while held acts now."""
        self.held, waiting, self.waiting = False, self.waiting, 0
        if waiting:
            self._note(waiting, None)

    def restore(self) -> int:
        """Put back the handlers found at the start; returns the signal that waited meanwhile (0: none)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        self._previous = {}
        return self.waiting


def ended(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else ExportEnded(signum)


def partial_folder(out: str) -> tuple[str, list[str]]:
    """A new hidden folder beside ``out``, ``.<name>.partial-<random>``, its name cut to fit where ``out``'s fits;
    and the folders above it made for it, deepest first (a failed export removes them again)."""
    parent, name = os.path.split(os.path.abspath(out))
    made, above = [], parent
    while not os.path.lexists(above):
        made.append(above)
        above = os.path.dirname(above)
    try:
        os.makedirs(parent, exist_ok=True)
        prefix = f".{fitting(name, name_max(parent) - len('..partial-') - 8)}.partial-"  # mkdtemp adds 8 characters
        return tempfile.mkdtemp(prefix=prefix, dir=parent), made
    except OSError as exc:
        _remove_empty(made)
        raise EnsembleError(f"{out}: cannot write there ({exc.strerror or first_line(exc)})") from None


def discard(folder: str, made: list[str]) -> None:
    """Remove an unfinished export: the hidden folder and the folders above it that :func:`partial_folder` made."""
    shutil.rmtree(folder, ignore_errors=True)
    _remove_empty(made)


def _remove_empty(folders: list[str]) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def write_new(path: str, data: bytes) -> None:
    """``data`` as the new file ``path`` (never through a symlink, never over a file), flushed to the disk: a full
    disk or quota is an OSError here, before anything is published."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(folder: str, out: str) -> None:
    """Move the finished ``folder`` to ``out`` (a new name, or an empty folder that it replaces), readable as a
    folder made with the user's umask would be."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)
    try:
        os.rename(folder, os.path.abspath(out))
    except OSError as exc:  # a file or a non-empty folder appeared there meanwhile
        raise EnsembleError(f"{out}: cannot put the export there ({exc.strerror}); nothing was replaced") from None
