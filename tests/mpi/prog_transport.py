"""Under mpiexec: the master's search loop driving real workers over MPI messages."""
import json
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, sys.argv[1])  # the tests folder, for the fitness landscape
from simulate import TEST_SHAPE, VAL_SHAPE, landscape  # noqa: E402

from evolve.ga import GAParams  # noqa: E402
from evolve.master import SearchSettings, SearchState, run_search  # noqa: E402
from evolve.mpi_transport import MPIMasterTransport, MPIWorkerChannel  # noqa: E402
from evolve.space import parse_space  # noqa: E402
from evolve.worker import serve  # noqa: E402

comm = MPI.COMM_WORLD
budget = 5 * comm.size
done = 0


def evaluate(task):
    if task.id == 3:
        raise RuntimeError("worker-side failure")
    return landscape(task)


if comm.rank == 0:
    state = SearchState.fresh(0)
    transport = MPIMasterTransport(comm, VAL_SHAPE, TEST_SHAPE)
    space = parse_space({}).for_sample_shape((1, 8, 8))
    run_search(state, transport, space, SearchSettings(budget, GAParams(population=4), 3, 0))
    transport.stop()
    local = {
        "records": len(state.records),
        "ids": sorted(r.id for r in state.records) == list(range(budget)),
        "workers": sorted({r.worker for r in state.records}),
        "errors": [r.message for r in state.records if r.status == "error"],
        "member_probs_sum_to_one": all(np.allclose(m.val_probs.sum(axis=1), 1.0) for m in state.members),
    }
else:
    done = serve(MPIWorkerChannel(comm), evaluate, VAL_SHAPE, TEST_SHAPE)
    local = None
counts = comm.gather(done, root=0)
ok = None
if comm.rank == 0:
    local["served"] = counts[1:]
    print(json.dumps(local))
    ok = (
        local["records"] == budget
        and local["ids"]
        and local["workers"] == list(range(1, comm.size))
        and sum(counts) == budget
        and local["errors"] == ["RuntimeError: worker-side failure"]
        and local["member_probs_sum_to_one"]
    )
sys.exit(0 if comm.bcast(ok, root=0) else 1)
