"""Under mpiexec -n 3: a drain sent behind several queued tasks still reaches the worker before it starts any of them.

Rank 0 sends each worker a task (1 s), then, once both have said they started it (a message on a
tag of this test's own, so nothing depends on timing), K more (queued) and the drain. Each
worker must train its first task only and answer the K queued ones "skipped" (MPICH hands arrived
messages to probes a few at a time, so a worker that probed for the drain's tag alone could miss it).
Prints one line from rank 0: K, then each worker's statuses in order (o: ok, s: skipped).
"""
import json
import sys
import time

from mpi4py import MPI

from ensemble.results import Evaluation
from evolve.transport.mpi_transport import MPIMasterTransport, MPIWorkerChannel
from evolve.transport.protocol import Task
from evolve.transport.worker import serve

comm = MPI.COMM_WORLD
K = int(sys.argv[1])
SECONDS = 1.0  # a training: the queued tasks and the drain go out as it starts, well before it ends, even loaded
TAG_STARTED = 77  # this test's own: a worker tells rank 0 it has begun its first training
started = False


def evaluate(task: Task) -> Evaluation:
    global started
    if not started:
        started = True
        comm.send(task.id, dest=0, tag=TAG_STARTED)
    time.sleep(SECONDS)
    return Evaluation(status="ok", fitness=0.5, metrics={"val_accuracy": 0.5}, seconds=SECONDS, epochs_done=1)


if comm.rank == 0:
    transport = MPIMasterTransport(comm)
    for w in transport.workers:
        transport.send(w, Task(100 * w, {}, {}, 0))
    for w in transport.workers:
        comm.recv(source=w, tag=TAG_STARTED)
    for k in range(1, K + 1):
        for w in transport.workers:
            transport.send(w, Task(100 * w + k, {}, {}, 0))
    transport.drain()
    statuses = {w: [] for w in transport.workers}
    while sum(map(len, statuses.values())) < (K + 1) * len(transport.workers):
        got = transport.receive(timeout=30)
        if got is None:
            sys.exit("no result in 30 s")
        worker, result = got
        if result.task_id != 100 * worker + len(statuses[worker]):
            sys.exit(f"worker {worker} returned {result.task_id} out of order")
        statuses[worker].append(result.evaluation.status[0])
    transport.stop()
    print(K, json.dumps({w: "".join(s) for w, s in statuses.items()}), flush=True)
else:
    serve(MPIWorkerChannel(comm), evaluate)
