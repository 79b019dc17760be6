"""Under mpiexec -n 3: tasks queued on a worker (search.prefetch) come back in order, and a stop skips those
not started.

The master sends each worker three tasks at once (one to train, two queued), takes each worker's first
result, and stops. A training takes 0.3 s: by the stop, each worker has started its second task (it
starts a queued task the moment it reports), and must skip its third. Prints one JSON line from rank 0:
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
trained = 0


def evaluate(task: Task) -> Evaluation:
    global trained
    trained += 1
    time.sleep(0.3)
    return Evaluation("ok", 0.5, {"val_accuracy": 0.5}, 0.3, 1)


if comm.rank == 0:
    transport = MPIMasterTransport(comm)
    sent = {1: [], 2: []}
    for k in range(3):
        for worker in (1, 2):
            ident = 10 * worker + k
            transport.send(worker, Task(ident, {}, {}, 0))
            sent[worker].append(ident)
    first = {}
    while len(first) < 2:
        got = transport.receive(timeout=30)
        if got is None:
            sys.exit("no result in 30 s")
        worker, result = got
        first.setdefault(worker, result.task_id)
    transport.stop()
else:
    serve(MPIWorkerChannel(comm), evaluate)
counts = comm.gather(trained, root=0)
if comm.rank == 0:
    # the results of the second tasks came after the stop: taken here, as MPICH's finalize wants no
    # message left unreceived
    status = MPI.Status()
    for _ in range(2):
        comm.Probe(source=MPI.ANY_SOURCE, tag=TAG_RESULT, status=status)
        comm.Recv([bytearray(status.Get_count(MPI.BYTE)), MPI.BYTE], source=status.Get_source(), tag=TAG_RESULT)
    print(json.dumps({"first": [first[1], first[2]], "sent_first": [sent[1][0], sent[2][0]], "trained": counts[1:]}), flush=True)
