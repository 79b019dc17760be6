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
            raise RuntimeError("train.device = 'cuda' but no CUDA device is visible on this node")
        return torch.device("cpu")
    return torch.device("cuda", local_rank % count)


def cpu_threads(cores: int, ranks_on_node: int, requested: int = 0) -> int:
    """Threads per rank so that the node's ranks together do not oversubscribe its cores."""
    if requested > 0:
        return requested
    return max(1, cores // max(1, ranks_on_node))
