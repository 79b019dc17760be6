"""Choose a worker's device and CPU thread count from facts the caller gathers.

Nothing here reads the environment or asks MPI: the driver passes the node-local
rank, the ranks on the node and the cores it may use.
"""
from __future__ import annotations

import torch

DEVICES = ("auto", "cpu", "cuda")


def choose_device(local_rank: int, prefer: str = "auto") -> torch.device:
    """``cuda:(local_rank mod GPUs)`` when CUDA is wanted and present, else the CPU.

    With one rank per GPU (the usual ``srun --gpus-per-task=1`` or node-local
    ranks 0..G-1) every worker gets a GPU of its own.
    """
    if prefer not in DEVICES:
        raise ValueError(f"unknown device {prefer!r} (known: {', '.join(DEVICES)})")
    if prefer == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if count == 0:
        if prefer == "cuda":
            raise RuntimeError("the device 'cuda' was asked for, but no CUDA device is visible on this node")
        return torch.device("cpu")
    device = torch.device("cuda", local_rank % count)
    torch.cuda.set_device(device)  # so that nothing, library code included, opens a context on GPU 0
    return device


def cpu_threads(cores: int, ranks_sharing: int, requested: int = 0, cores_per_task: int = 0) -> int:
    """Threads per rank so that the ranks sharing ``cores`` together do not oversubscribe them.

    ``requested`` (the config's ``train.threads``) wins; then ``cores_per_task`` (what the
    scheduler gave each task, e.g. Slurm's ``--cpus-per-task``); else the cores are divided.
    """
    if requested > 0:
        return requested
    if cores_per_task > 0:
        return cores_per_task
    return max(1, cores // max(1, ranks_sharing))
