"""This rank's share of its node: a device and CPU threads, from what the environment says.

The environment (affinity, Slurm's variables) is read here, at the edge, and
passed as plain numbers to :mod:`ensemble.device`.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from data_bcast.host import usable_cores
from ensemble.device import choose_device, cpu_threads

if TYPE_CHECKING:
    import torch

__all__ = ["affinity", "launcher_threads", "ranks_sharing", "spare_cores", "take_device", "trainer_threads", "usable_cores"]  # usable_cores: data_bcast.host's, the one reading of affinity


def _count(name: str) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else 0


def launcher_threads() -> int:
    """Threads per task that the user or the launcher asked for: ``OMP_NUM_THREADS`` (the user's, or srun's
    from ``--cpus-per-task``), else Slurm's ``SLURM_CPUS_PER_TASK``; 0 where neither says."""
    return _count("OMP_NUM_THREADS") or _count("SLURM_CPUS_PER_TASK")


def affinity() -> frozenset[int]:
    """The cores this process may run on."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return frozenset(range(os.cpu_count() or 1))


def ranks_sharing(mine: frozenset[int] | None, masks: list[frozenset[int] | None]) -> int:
    """How many of the training ranks whose core sets are ``masks`` (None: a rank that trains nothing) may run on
    one of the cores in ``mine``: all of them where none is bound, one where each is bound to its own cores."""
    if not mine:
        return 1
    return max(1, sum(1 for m in masks if m and m & mine))


def spare_cores(cores: int) -> int:
    """Of the ``cores`` this process may run on, those other work leaves it: all of them where a scheduler bound it to
    some of the machine's (they are its own), else the machine's cores less its load average over the last minute
    (rounded), at least 1. Threads beyond the idle cores are worse than none: on a 2-core machine at load 4, a rank
    with 2 torch threads trained 3 times slower than with 1 (scripts/bench/bench_threads.py)."""
    machine = os.cpu_count() or cores
    if cores < machine:
        return cores
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average on this system
        return cores
    return max(1, min(cores, machine - int(load + 0.5)))


def trainer_threads(sharing: int, threads: int = 0) -> int:
    """The torch threads of a rank's training: ``train.threads`` if set, else what the launcher asked for
    (:func:`launcher_threads`), else this rank's spare cores (:func:`spare_cores`) divided among the ``sharing``
    training ranks that may run on them, so that a node's ranks do not oversubscribe its cores."""
    return cpu_threads(spare_cores(usable_cores()), sharing, threads, launcher_threads())


def take_device(prefer: str, local_index: int, sharing: int, threads: int = 0, workers_per_gpu: int = 0) -> torch.device:
    """Set this rank's torch threads (:func:`trainer_threads`) and pick its device."""
    import torch

    torch.set_num_threads(trainer_threads(sharing, threads))
    return choose_device(local_index, prefer, workers_per_gpu)
