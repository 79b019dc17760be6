"""Under mpiexec (any number of ranks): a search started from Python with a builder passed as a function.

argv: the config, the run directory. Prints from each rank one JSON line: its rank and what
run_search_from returned (the run directory on rank 0, None elsewhere).
"""
import json
import sys

from mpi4py import MPI
from user_signal_nets import build

from evolve import run_search_from

if __name__ == "__main__":  # the guard every launching script needs (docs/custom-models.md)
    got = run_search_from(sys.argv[1], builder=build, overrides={"search.evaluations": 4, "space.channels": [4, 6]}, out=sys.argv[2],
                          quiet=True)
    print(json.dumps({"rank": MPI.COMM_WORLD.rank, "returned": got}), flush=True)
