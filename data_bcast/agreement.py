"""Errors that every rank agrees on, so that all raise together and none waits in a collective.

A rank that finds an error (a bad file, NaN while streaming, a chunk that arrived damaged) does not
raise at once: the error is gathered from every rank and the first is given to all, saying where it
happened.
"""
from __future__ import annotations

import socket

from mpi4py import MPI


def located(message: str) -> str:
    """An error message that says where it happened: ``message (rank R on HOST)``, R in the world."""
    return f"{message} (rank {MPI.COMM_WORLD.rank} on {socket.gethostname()})"


def first_error(comm: MPI.Comm, error: str | None, root: int) -> str | None:
    """Collective: every rank's error (or None) gathered, and the first given to every rank, saying
    on which rank and host it happened."""
    errors = comm.gather(error and located(error), root=root)
    first = next((e for e in errors if e), None) if comm.rank == root else None
    return comm.bcast(first, root=root)
