"""Run directories: where a run's checkpoint and summary live.

A new run gets a directory that does not exist yet or is empty, so nothing the
user owns is overwritten. Resuming needs a directory holding a checkpoint.
"""
from __future__ import annotations

import json
import os
import time

from ..checkpoint import CHECKPOINT_NAME
from ..errors import RunDirError

SUMMARY_NAME = "summary.json"


CLAIM_NAME = ".evens-run"  # created exclusively: of two runs racing for a directory, one wins


def check_new_run_dir(path: str) -> None:
    """A new run may use ``path`` only if it does not exist or is an empty directory."""
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise RunDirError(f"{path}: exists and is not a directory")
    if os.path.exists(os.path.join(path, CHECKPOINT_NAME)):
        raise RunDirError(f"{path}: already holds a run; continue it with --resume {path}, or choose another --out")
    if os.listdir(path):
        raise RunDirError(f"{path}: directory is not empty; choose an empty or new --out")


def claim_run_dir(path: str) -> None:
    """Make ``path`` this run's: create it if needed, check it is empty, and take it exclusively.

    Raises :class:`RunDirError` if it cannot be created, is in use, or another run took it first.
    """
    check_new_run_dir(path)
    try:
        os.makedirs(path, exist_ok=True)
        fd = os.open(os.path.join(path, CLAIM_NAME), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise RunDirError(f"{path}: another run has just taken this directory; choose another --out") from None
    except OSError as exc:
        raise RunDirError(f"{path}: cannot create the run directory ({exc.strerror or exc})") from None
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.uname().nodename} {os.getpid()} {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
    if sorted(os.listdir(path)) != [CLAIM_NAME]:  # something else arrived between the check and the claim
        release_run_dir(path)
        raise RunDirError(f"{path}: directory is not empty; choose an empty or new --out")


def claim_default_run_dir(config_path: str | None, root: str = "runs") -> str:
    """Claim ``runs/<config stem>-<time>``, adding -2, -3, ... while a name is taken."""
    stem = os.path.splitext(os.path.basename(config_path))[0] if config_path else "run"
    base = os.path.join(root, f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    for n in range(1, 1000):
        candidate = base if n == 1 else f"{base}-{n}"
        try:
            claim_run_dir(candidate)
            return candidate
        except RunDirError:
            if not os.path.exists(candidate):  # not a name clash: a real problem
                raise
    raise RunDirError(f"{base}: too many runs started in the same second")


def release_run_dir(path: str) -> None:
    """Undo :func:`claim_run_dir` for a run that never started: drop the claim, and the directory if empty."""
    try:
        os.remove(os.path.join(path, CLAIM_NAME))
        os.rmdir(path)
    except OSError:
        pass


def checkpoint_path(run_dir: str) -> str:
    """The checkpoint of an existing run directory; an error if there is none."""
    if not os.path.isdir(run_dir):
        raise RunDirError(f"{run_dir}: no such run directory")
    path = os.path.join(run_dir, CHECKPOINT_NAME)
    if not os.path.isfile(path):
        raise RunDirError(f"{run_dir}: no {CHECKPOINT_NAME} here; is this a run directory?")
    return path


def write_json(path: str, obj) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
