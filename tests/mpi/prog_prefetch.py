"""Under mpiexec -n 3: tasks queued on a worker (search.prefetch) come back in order, and a stop skips those
not started.

The master sends each worker three tasks at once (one to train, two queued), takes each worker's first
result, waits half a training, and stops (with --drain: drains, takes every result, then stops). A
training takes 1 s: by the stop, each worker has started its second task (it starts a queued task the
moment it reports), and must skip its third (at a drain, answer it "skipped"). Prints one JSON line from rank 0:
the ids of the first results, the first ids sent to each worker, and how many tasks each worker trained.
"""
import json
import sys
import time

from mpi4py import MPI

from ensemble.results import Evaluation
from evolve.transport.mpi_transport import TAG_RESULT, MPIMasterTransport, MPIWorkerChannel
from evolve.transport.protocol import Task
from evolve.transport.worker import serve

comm = MPI.COMM_WORLD
# Every rank past its imports before the first task goes out: a worker that began a training or more after
# the other (importing torch takes seconds on a loaded machine) let the other start its third task before
# the stop came (seen as a hang in the Probe below).
comm.Barrier()
DRAIN = "--drain" in sys.argv  # after the first results, a drain instead of a stop: every task comes back, the third skipped
trained = 0
SECONDS = 1.0  # a training: the master stops (or drains) the workers halfway through their second


def evaluate(task: Task) -> Evaluation:
    global trained
    trained += 1
    time.sleep(SECONDS)
    return Evaluation(status="ok", fitness=0.5, metrics={"val_accuracy": 0.5}, seconds=SECONDS, epochs_done=1)


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
            if len(first) == 2:
                # half a training's margin either side on a loaded machine: each worker has started its
                # second task (one descheduled as it reported once missed it), and not yet its third
                time.sleep(SECONDS / 2)
                if DRAIN:
                    transport.drain()
    transport.stop()
else:
    serve(MPIWorkerChannel(comm), evaluate)
counts = comm.gather(trained, root=0)
if comm.rank == 0 and not DRAIN:
    # the results of the second tasks came after the stop: taken here, as MPICH's finalize wants no
    # message left unreceived (counted, not assumed 2: a worker that trained a third ends the test, not hangs it)
    status = MPI.Status()
    for _ in range(sum(counts[w] - len(statuses[w]) for w in (1, 2))):
        comm.Probe(source=MPI.ANY_SOURCE, tag=TAG_RESULT, status=status)
        comm.Recv([bytearray(status.Get_count(MPI.BYTE)), MPI.BYTE], source=status.Get_source(), tag=TAG_RESULT)
if comm.rank == 0:
    print(json.dumps({"first": [first[1], first[2]], "sent_first": [sent[1][0], sent[2][0]], "trained": counts[1:],
                      "statuses": statuses}), flush=True)
