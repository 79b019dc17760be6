"""Under mpiexec: the real `evens run`, with h5py.File refused on every worker rank.

A worker that tried to open the dataset would fail the run; the file opens seen
by each rank are gathered and printed by rank 0 as JSON after the run.
"""
import json
import sys

import h5py
from mpi4py import MPI

from evolve.app.commands.cli import main

comm = MPI.COMM_WORLD
opened = []
if comm.rank != 0:
    def spy(name, *a, **k):
        opened.append(str(name))
        raise PermissionError(f"worker rank {comm.rank} opened {name}")

    h5py.File = spy

code = main(sys.argv[1:])
all_opened = comm.gather(opened, root=0)
codes = comm.gather(code, root=0)
if comm.rank == 0:
    print(json.dumps({"worker_opens": all_opened[1:], "codes": codes}))
sys.exit(code)
