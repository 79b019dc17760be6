"""Under mpiexec (any number of ranks): a search started from Python with a builder passed as a function.

argv: the config, the run directory. Prints from each rank one JSON line: its rank, what
run_search_from returned (the run directory on rank 0, None elsewhere) and whether the stop signals'
handlers are the ones it found.
"""
import json
import signal
import sys

from mpi4py import MPI
from user_signal_nets import build

from evolve import run_search_from

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)

if __name__ == "__main__":  # the guard every launching script needs (docs/custom-models.md)
    found = [signal.getsignal(s) for s in STOP_SIGNALS]
    got = run_search_from(sys.argv[1], builder=build, overrides={"search.evaluations": 4, "space.channels": [4, 6]}, out=sys.argv[2],
                          quiet=True)
    kept = [signal.getsignal(s) for s in STOP_SIGNALS] == found
    print(json.dumps({"rank": MPI.COMM_WORLD.rank, "returned": got, "handlers_kept": kept}), flush=True)
