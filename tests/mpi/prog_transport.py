"""Under mpiexec: the master's search loop driving real workers over MPI messages."""
import json
import sys

import numpy as np
from fakes import landscape, search_config  # (the tests folder is on the launcher's PYTHONPATH)
from mpi4py import MPI

from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.search.space_config import parse_space
from evolve.transport.mpi_transport import MPIMasterTransport, MPIWorkerChannel
from evolve.transport.protocol import Task
from evolve.transport.worker import serve

comm = MPI.COMM_WORLD
budget = 5 * comm.size
done = 0


def evaluate(task):
    if task.id == 3:
        raise RuntimeError("worker-side failure")
    return landscape(task)


def arrived_exactly(member) -> bool:
    """The predictions and weights that crossed the wire are bit for bit what the worker made."""
    made = landscape(Task(member.id, member.network, member.training, 0))
    same = np.array_equal(member.val_pred, made.val_pred) and np.array_equal(member.test_pred, made.test_pred)
    return same and member.weights.keys() == made.weights.keys() and all(
        member.weights[k].dtype == w.dtype and np.array_equal(member.weights[k], w) for k, w in made.weights.items()
    )


payloads = 0
if comm.rank == 0:
    state = SearchState.fresh(0, candidates=3)
    transport = MPIMasterTransport(comm)

    def counting(take):
        def counted(*a, **k):
            global payloads
            got = take(*a, **k)
            payloads += got is not None and got[1].evaluation.has_payload
            return got
        return counted

    class Counting:
        """The transport as the master sees it, counting the payloads it hands over."""
        workers, send, stop = transport.workers, transport.send, transport.stop
        receive, poll = staticmethod(counting(transport.receive)), staticmethod(counting(transport.poll))

    space = parse_space({}).for_sample_shape((1, 8, 8))
    hall_offer, entries = state.hall_of_fame.offer, []
    state.hall_of_fame.offer = lambda m: entries.append(hall_offer(m)) or entries[-1]
    run_search(state, Counting(), space, search_config(budget, 4, 3, 0))
    transport.stop()
    ok_records = sorted((r for r in state.records if r.status == "ok"), key=lambda r: (-r.fitness, r.id))
    local = {
        "records": len(state.records),
        "ids": sorted(r.id for r in state.records) == list(range(budget)),
        "workers": sorted({r.worker for r in state.records}),
        "errors": [r.message for r in state.records if r.status == "error"],
        "hall_is_the_best_three": state.hall_of_fame.ids == [r.id for r in ok_records[:3]],
        "arrived_exactly": all(arrived_exactly(m) for m in state.hall_of_fame),
    }
    channel = None
else:
    channel = MPIWorkerChannel(comm)
    done = serve(channel, evaluate)
    local = None
counts = comm.gather(done, root=0)
offers = comm.gather((channel.offers, channel.sent) if channel else (0, 0), root=0)
ok = None
if comm.rank == 0:
    local["served"] = counts[1:]
    local["offered_sent_received_entered"] = [sum(o for o, _ in offers), sum(s for _, s in offers), payloads, sum(entries)]
    print(json.dumps(local))
    ok = (
        local["records"] == budget
        and local["ids"]
        and local["workers"] == list(range(1, comm.size))
        and sum(counts) == budget
        and local["errors"] == ["RuntimeError: worker-side failure"]
        and local["hall_is_the_best_three"]
        and local["arrived_exactly"]
        # every payload sent was wanted and arrived, and each one entered the hall: none was wasted
        and local["offered_sent_received_entered"][1:] == [payloads] * 2 + [len(entries)]
        and all(entries) and payloads <= local["offered_sent_received_entered"][0]
    )
sys.exit(0 if comm.bcast(ok, root=0) else 1)
