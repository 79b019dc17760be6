"""Under mpiexec: a bad data file must raise the same DataError on every rank, and no rank may hang.

Usage: prog_bad_data.py DATA.h5 [replicate|shard]
"""
import sys

from mpi4py import MPI

from data_bcast.broadcast import LoadOptions, broadcast_dataset
from data_bcast.h5file import DataError

comm = MPI.COMM_WORLD
mode = sys.argv[2] if len(sys.argv) > 2 else "replicate"
try:
    broadcast_dataset(comm, sys.argv[1] if comm.rank == 0 else None, LoadOptions(mode=mode))
    message = None
except DataError as exc:
    message = str(exc)
messages = comm.gather(message, root=0)
if comm.rank == 0:
    print(repr(messages))
    ok = all(m is not None and m == messages[0] for m in messages)
else:
    ok = None
sys.exit(0 if comm.bcast(ok, root=0) else 1)
