"""Builders that misbehave as guests (tests/test_user_code_guest.py): one calls MPI, one hangs, one exits, one
starts a process of its own that would outlive its training."""
import os
import subprocess
import sys
import time

from torch import nn


def plain(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(sample_shape[0] * sample_shape[1], outputs))


def calls_mpi(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    from mpi4py import MPI

    MPI.COMM_WORLD.Barrier()  # the job's world as the user believes it: the master would wait here for ever
    return plain(genes, sample_shape, outputs)


def hangs(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    time.sleep(3600)
    return plain(genes, sample_shape, outputs)


def exits(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    sys.exit(3)


def forks(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    """Starts a process that sleeps for minutes and holds the caller's stderr, and notes its pid in $GUEST_PIDS."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.path.join(os.environ["GUEST_PIDS"], str(child.pid)), "w"):
        pass
    return plain(genes, sample_shape, outputs)
