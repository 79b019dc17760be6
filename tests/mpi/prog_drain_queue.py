"""Under mpiexec -n 3: a drain sent behind several queued tasks still reaches the worker before it starts any of them.

Rank 0 sends each worker a task (0.5 s), then, while they train, K more (queued) and the drain. Each
worker must train its first task only and answer the K queued ones "skipped" (MPICH hands arrived
messages to probes a few at a time, so a worker that probed for the drain's tag alone could miss it).
Prints one line from rank 0: K, then each worker's statuses in order (o: ok, s: skipped).
"""
import json
import sys
import time

from mpi4py import MPI

from ensemble.results import Evaluation
from evolve.mpi_transport import MPIMasterTransport, MPIWorkerChannel
from evolve.protocol import Task
from evolve.worker import serve

comm = MPI.COMM_WORLD
K = int(sys.argv[1])


def evaluate(task: Task) -> Evaluation:
    time.sleep(0.5)
    return Evaluation("ok", 0.5, {"val_accuracy": 0.5}, 0.5, 1)


if comm.rank == 0:
    transport = MPIMasterTransport(comm)
    for w in transport.workers:
        transport.send(w, Task(100 * w, {}, {}, 0))
    time.sleep(0.2)
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
