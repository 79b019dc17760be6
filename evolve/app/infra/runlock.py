"""One job per run directory: a lock held while a job writes the run.

The lock is ``RUN_DIR/.evens-lock``, opened without following symlinks and locked with ``flock``
for as long as the job runs. Only a regular file with one link is used: a hard link to another file
(which the lock would empty) or a FIFO or device planted under its name is refused in one line. The kernel drops an flock when its process dies, kill -9 and crashes
included, so a dead job never blocks the next one. The file also names its holder (host, process,
start time, Slurm job) for the message a second job gets, and its modification time is a heartbeat:
the job touches it at every checkpoint.

Where the file system cannot flock (some NFS and Lustre mounts answer ENOLCK or EOPNOTSUPP), the
holder it names counts instead. It is alive if it is on this host and its process exists, or if it
is on another host and its heartbeat is younger than ``STALE_SECONDS``. A clean exit empties the
file. The file is never deleted: deleting a locked file lets two jobs lock two different files.
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import time

from evolve.errors import RunDirError

LOCK_NAME = ".evens-lock"
STALE_SECONDS = 900.0  # without flock: another host's lock with no heartbeat for this long is a dead job's


def _holder_text() -> str:
    job = os.environ.get("SLURM_JOB_ID")
    return (f"host={socket.gethostname()} pid={os.getpid()} started={time.strftime('%Y-%m-%dT%H:%M:%S%z')}"
            + (f" slurm_job={job}" if job else "") + "\n")


def _parse(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split() if "=" in part)


def describe_holder(holder: dict[str, str]) -> str:
    """A lock's holder in words: host, process, Slurm job and start."""
    where = f"host {holder.get('host', '?')}, process {holder.get('pid', '?')}"
    if "slurm_job" in holder:
        where += f", Slurm job {holder['slurm_job']}"
    return f"{where}, since {holder.get('started', '?')}"


def holder_alive(holder: dict[str, str], mtime: float, now: float, stale_seconds: float = STALE_SECONDS) -> bool:
    """Is the job that wrote ``holder`` (a lock file last touched at ``mtime``) still running? What counts without
    flock, and what `evens status` asks of a lock file a job may have left behind when it was killed."""
    if holder.get("host") == socket.gethostname():
        try:
            pid = int(holder.get("pid", ""))
        except ValueError:
            return False
        if pid == os.getpid():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return now - mtime < stale_seconds


def lock_holder(run_dir: str, now: float) -> tuple[dict[str, str], dict[str, str]]:
    """(the job holding the run, the job that held it and ended without letting it go), from the lock file alone (it is
    never locked here, so a job starting meanwhile is never stopped): the file names its holder, and a job killed with
    SIGKILL (or its node lost) leaves that name behind. A holder counts as alive as :func:`holder_alive` says, or when it
    is this process."""
    try:
        with open(os.path.join(run_dir, LOCK_NAME), encoding="utf-8", errors="replace") as f:
            holder = _parse(f.read())
            mtime = os.fstat(f.fileno()).st_mtime
    except OSError:
        return {}, {}
    if not holder:
        return {}, {}
    ours = holder.get("host") == socket.gethostname() and holder.get("pid") == str(os.getpid())
    return (holder, {}) if ours or holder_alive(holder, mtime, now) else ({}, holder)


def _check_own_file(path: str, st: os.stat_result) -> None:
    """Refuse what evens never creates as a lock: another file's hard link, a FIFO, a device."""
    if not stat.S_ISREG(st.st_mode):
        kind = ("FIFO" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode)
                else "device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "special file")
        raise RunDirError(f"{path}: is a {kind}, not the run's lock file; remove it and try again")
    if st.st_nlink != 1:
        raise RunDirError(f"{path}: has {st.st_nlink} hard links, so it is another file's name too; refusing to write "
                          "to it as the run's lock (remove it and try again)")


class RunLock:
    """This job's hold on a run directory; :meth:`release` (or process exit) lets it go."""

    def __init__(self, run_dir: str, fd: int, flocked: bool):
        self.run_dir = run_dir
        self.path = os.path.join(run_dir, LOCK_NAME)
        self._fd = fd
        self.flocked = flocked

    @classmethod
    def acquire(cls, run_dir: str, stale_seconds: float = STALE_SECONDS) -> RunLock:
        """Take ``run_dir``'s lock, or raise :class:`RunDirError` naming the job that holds it."""
        path = os.path.join(run_dir, LOCK_NAME)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RunDirError(f"{path}: is a symbolic link; refusing to use it as the run's lock") from None
            raise RunDirError(f"{run_dir}: cannot create the run's lock ({exc.strerror or exc})") from None
        try:
            _check_own_file(path, os.fstat(fd))  # before anything is read or written through it
            holder = _parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
            flocked = True
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    holder = _parse(os.pread(fd, 4096, 0).decode("utf-8", "replace")) or holder
                    raise RunDirError(f"{run_dir}: another job is using this run ({describe_holder(holder)}); "
                                      "wait for it to end, or stop it first") from None
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise RunDirError(f"{run_dir}: cannot lock the run ({exc.strerror or exc})") from None
                flocked = False
            if not flocked and holder and holder_alive(holder, os.fstat(fd).st_mtime, time.time(), stale_seconds):
                raise RunDirError(f"{run_dir}: another job is using this run ({describe_holder(holder)}); wait for it to "
                                  f"end, or, if it is dead, delete {path}")
            os.ftruncate(fd, 0)
            os.pwrite(fd, _holder_text().encode(), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(run_dir, fd, flocked)

    def heartbeat(self) -> None:
        """Show that the job is alive (without flock, other hosts judge a lock by this)."""
        if self._fd >= 0:
            try:
                os.utime(self._fd)
            except OSError:
                pass

    def release(self) -> None:
        """Empty the lock (the run is free) and drop it. Safe to call twice."""
        if self._fd < 0:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass
        os.close(self._fd)  # closing drops the flock
        self._fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

