"""Run directories: where a run's checkpoint and summary live.

A new run gets a directory that does not exist yet or is empty, so nothing the
user owns is overwritten. Resuming needs a directory holding a checkpoint.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from evolve.app.infra.runlock import LOCK_NAME, RunLock, describe_holder, lock_holder
from evolve.errors import RunDirError
from evolve.runfile.checkpoint import CHECKPOINT_NAME
from evolve.runfile.tempfiles import exclusive_temp

SUMMARY_NAME = "summary.json"


CLAIM_NAME = ".evens-run"  # a new run's mark; it says whether the run created the directory
REQUEUES_NAME = ".evens-requeues"  # scripts/slurm/evens-job.sh's count of requeues that recorded no new evaluation
OWN_FILES = {CLAIM_NAME, LOCK_NAME, REQUEUES_NAME}  # what a start that died before its first checkpoint leaves ...
DEVICES_NAME = "devices.json"  # each worker's rank, host, device and GPU UUID, for the latest session
# ... and, beside the claim, what one killed while writing its first checkpoint may leave: the workers' devices,
# the in-flight log, the side files (the paused networks' genomes, the networks proposed), the segments' folder and the state file's temporary (tempfiles.exclusive_temp)
STARTED_FILES = {DEVICES_NAME, *(os.path.splitext(CHECKPOINT_NAME)[0] + end for end in (".inflight", ".genomes", ".proposed", ".evaluations"))}


def _leftovers(names: set[str]) -> set[str]:
    """Of ``names`` (a directory's), those a start of evens that never completed a checkpoint left: its claim and
    lock, and with its claim there, what it wrote before its first checkpoint was complete."""
    claimed = CLAIM_NAME in names
    return {n for n in names if n in OWN_FILES or (claimed and (n in STARTED_FILES or (n.startswith(".") and n.endswith(".tmp"))))}


def check_new_run_dir(path: str) -> None:
    """A new run may use ``path`` only if it does not exist, is empty, or holds only what a start that
    died before its first checkpoint was complete left (:func:`_leftovers`: such a directory is taken over)."""
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise RunDirError(f"{path}: exists and is not a directory")
    if os.path.exists(os.path.join(path, CHECKPOINT_NAME)):
        raise RunDirError(f"{path}: already holds a run; continue it with --resume {path}, or choose another --out")
    names = set(os.listdir(path))
    if names - _leftovers(names):
        raise RunDirError(f"{path}: directory is not empty; choose an empty or new --out")


def _clear_leftovers(path: str) -> None:
    """Remove what a start that died before its first complete checkpoint left, but its claim and lock (held now)."""
    names = set(os.listdir(path))
    for name in _leftovers(names) - OWN_FILES:
        where = os.path.join(path, name)
        if os.path.isdir(where) and not os.path.islink(where):
            for inside in os.listdir(where):  # segments and their temporaries: files evens wrote
                os.remove(os.path.join(where, inside))
            os.rmdir(where)
        else:
            os.remove(where)


@dataclass
class Claim:
    """A new run's hold on its directory: the lock, and whether this run created the directory."""

    path: str
    lock: RunLock
    created: bool

    def release(self) -> None:
        """Undo the claim of a run that never wrote a checkpoint: the directory is left as the user had
        it (removed if this run created it, else emptied of the run's own files)."""
        self.lock.release()
        if os.path.exists(os.path.join(self.path, CHECKPOINT_NAME)):
            return
        for name in OWN_FILES:
            try:
                os.remove(os.path.join(self.path, name))
            except OSError:
                pass
        if self.created:
            try:
                os.rmdir(self.path)
            except OSError:
                pass


def claim_run_dir(path: str) -> Claim:
    """Make ``path`` this run's: create it if needed, check it is empty, and lock it.

    Raises :class:`RunDirError` if it cannot be created, is not empty, or another job holds it.
    """
    check_new_run_dir(path)
    created = not os.path.exists(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"{path}: cannot create the run directory ({exc.strerror or exc})") from None
    had_lock = os.path.lexists(os.path.join(path, LOCK_NAME))
    lock = RunLock.acquire(path)  # a job holding it: RunDirError, naming that job
    claim = Claim(path, lock, created)
    try:
        _clear_leftovers(path)
    except OSError as exc:
        lock.release()
        raise RunDirError(f"{path}: cannot clear what a killed start left ({exc.strerror or exc})") from None
    if set(os.listdir(path)) - OWN_FILES:  # something arrived between the check and the lock
        lock.release()
        if not had_lock:
            os.remove(os.path.join(path, LOCK_NAME))
        raise RunDirError(f"{path}: directory is not empty; choose an empty or new --out")
    try:
        fd = os.open(os.path.join(path, CLAIM_NAME), os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(f"created={int(created)}\n")
    except OSError as exc:
        claim.release()
        raise RunDirError(f"{path}: cannot write in the run directory ({exc.strerror or exc})") from None
    return claim


def claim_default_run_dir(config_path: str | None, root: str = "runs") -> Claim:
    """Claim ``runs/<config stem>-<time>``, adding -2, -3, ... while a name is taken."""
    stem = os.path.splitext(os.path.basename(config_path))[0] if config_path else "run"
    base = os.path.join(root, f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    for n in range(1, 1000):
        candidate = base if n == 1 else f"{base}-{n}"
        if os.path.exists(candidate):
            continue
        try:
            return claim_run_dir(candidate)
        except RunDirError:
            if not os.path.exists(candidate):  # not a name clash: a real problem
                raise
    raise RunDirError(f"{base}: too many runs started in the same second")


def checkpoint_path(run_dir: str) -> str:
    """The checkpoint of an existing run directory; an error if there is none."""
    if not os.path.isdir(run_dir):
        raise RunDirError(f"{run_dir}: no such run directory")
    path = os.path.join(run_dir, CHECKPOINT_NAME)
    if not os.path.isfile(path):
        raise RunDirError(no_checkpoint(run_dir))
    return path


def no_checkpoint(run_dir: str) -> str:
    """Why a run directory holds no checkpoint, in one line: a job that claimed it is starting, or one that claimed it
    ended before its first checkpoint, or it is not a run directory."""
    holder, gone = lock_holder(run_dir, time.time())
    if holder:
        return (f"{run_dir}: a job has claimed this run and is starting ({describe_holder(holder)}); it has written no "
                f"{CHECKPOINT_NAME} yet, so try again after its first checkpoint")
    if gone or os.path.exists(os.path.join(run_dir, CLAIM_NAME)):
        by = f" ({describe_holder(gone)})" if gone else ""
        return (f"{run_dir}: the job that claimed this run{by} ended before its first checkpoint, so it holds no run; "
                f"`evens run CONFIG --out {run_dir}` starts a new one in it")
    return f"{run_dir}: no {CHECKPOINT_NAME} here; is this a run directory?"


def write_json(path: str, obj) -> None:
    tmp = exclusive_temp(path)
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
