"""Run directories: where a run's checkpoint and summary live.

A new run gets a directory that does not exist yet or is empty, so nothing the
user owns is overwritten. Resuming needs a directory holding a checkpoint.
"""
from __future__ import annotations

import json
import os
import time

from .checkpoint import CHECKPOINT_NAME
from .errors import RunDirError

SUMMARY_NAME = "summary.json"


def default_run_dir(config_path: str | None, root: str = "runs") -> str:
    stem = os.path.splitext(os.path.basename(config_path))[0] if config_path else "run"
    base = os.path.join(root, f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    candidate, n = base, 1
    while os.path.exists(candidate):
        n += 1
        candidate = f"{base}-{n}"
    return candidate


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
