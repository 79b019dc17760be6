"""Under mpiexec -n 3: tasks queued on a worker (search.prefetch) come back in order, and a stop skips those
not started.

The master sends each worker three tasks at once (one to train, two queued), takes each worker's first
result, and stops (with --drain: drains, takes every result, then stops). A training takes 1 s: by
the stop, each worker has started its second task (it starts a queued task the moment it reports),
and must skip its third (at a drain, answer it "skipped"). Prints one JSON line from rank 0:
the ids of the first results, the first ids sent to each worker, and how many tasks each worker trained.
"""
import json
import sys
import time

from mpi4py import MPI

from ensemble.results import Evaluation
from evolve.mpi_transport import TAG_RESULT, MPIMasterTransport, MPIWorkerChannel
from evolve.protocol import Task
from evolve.worker import serve

comm = MPI.COMM_WORLD
DRAIN = "--drain" in sys.argv  # after the first results, a drain instead of a stop: every task comes back, the third skipped
trained = 0
SECONDS = 1.0  # a training: the master has this long to stop (or drain) each worker before it starts its third task


def evaluate(task: Task) -> Evaluation:
    global trained
    trained += 1
    time.sleep(SECONDS)
    return Evaluation("ok", 0.5, {"val_accuracy": 0.5}, SECONDS, 1)


if comm.rank == 0:
    transport = MPIMasterTransport(comm)
    sent = {1: [], 2: []}
    for k in range(3):
        for worker in (1, 2):
            ident = 10 * worker + k
            transport.send(worker, Task(ident, {}, {}, 0))
            sent[worker].append(ident)
    first, statuses = {}, {1: [], 2: []}
    while len(first) < 2 or (DRAIN and sum(map(len, statuses.values())) < 6):
        got = transport.receive(timeout=30)
        if got is None:
            sys.exit("no result in 30 s")
        worker, result = got
        if result.task_id != sent[worker][len(statuses[worker])]:
            sys.exit(f"worker {worker} returned {result.task_id} out of order")
        statuses[worker].append(result.evaluation.status)
        if worker not in first:
            first[worker] = result.task_id
            if DRAIN and len(first) == 2:
                transport.drain()
    transport.stop()
else:
    serve(MPIWorkerChannel(comm), evaluate)
counts = comm.gather(trained, root=0)
if comm.rank == 0 and not DRAIN:
    # the results of the second tasks came after the stop: taken here, as MPICH's finalize wants no
    # message left unreceived
    status = MPI.Status()
    for _ in range(2):
        comm.Probe(source=MPI.ANY_SOURCE, tag=TAG_RESULT, status=status)
        comm.Recv([bytearray(status.Get_count(MPI.BYTE)), MPI.BYTE], source=status.Get_source(), tag=TAG_RESULT)
if comm.rank == 0:
    print(json.dumps({"first": [first[1], first[2]], "sent_first": [sent[1][0], sent[2][0]], "trained": counts[1:],
                      "statuses": statuses}), flush=True)
