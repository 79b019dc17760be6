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

__all__ = ["slurm_cpus_per_task", "take_device", "trainer_threads", "usable_cores"]  # usable_cores: data_bcast.host's, the one reading of affinity


def slurm_cpus_per_task() -> int:
    value = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return int(value) if value.isdigit() else 0


def trainer_threads(ranks_here: int, threads: int = 0) -> int:
    """The torch threads of a rank's training, so that the node's ranks do not oversubscribe its cores."""
    return cpu_threads(usable_cores(), ranks_here, threads, slurm_cpus_per_task())


def take_device(prefer: str, local_index: int, ranks_here: int, threads: int = 0, workers_per_gpu: int = 0) -> torch.device:
    """Set this rank's torch threads (:func:`trainer_threads`) and pick its device."""
    import torch

    torch.set_num_threads(trainer_threads(ranks_here, threads))
    return choose_device(local_index, prefer, workers_per_gpu)
