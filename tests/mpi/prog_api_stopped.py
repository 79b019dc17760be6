"""Under mpiexec (any number of ranks): a search started from Python that a signal stops.

argv: the config, the run directory. Each rank prints one JSON line once run_search_from has ended: its
rank, the exit status of the SearchFailed it raised (None if it returned), and whether the stop signals'
handlers are the ones it found (a caller's Ctrl-C works again; a worker's signals are not left ignored).
"""
import json
import signal
import sys

from mpi4py import MPI
from user_signal_nets import build

from evolve import SearchFailed, run_search_from

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)

# A budget that no test outlasts: the signal, not the end of the search, must end it (with 400 short trainings the
# search could finish before its first periodic checkpoint, which the test waits for).
if __name__ == "__main__":
    found = [signal.getsignal(s) for s in STOP_SIGNALS]
    try:
        run_search_from(sys.argv[1], builder=build, overrides={"search.evaluations": 100000, "search.checkpoint_seconds": 1, "space.channels": [4, 6]}, out=sys.argv[2],
                        quiet=True)
        status = None
    except SearchFailed as exc:
        status = exc.status
    kept = [signal.getsignal(s) for s in STOP_SIGNALS] == found
    print(json.dumps({"rank": MPI.COMM_WORLD.rank, "status": status, "handlers_kept": kept}), flush=True)
