"""Under mpiexec: results longer than the master's receive buffer (a curve of 10,000 epochs) arrive
whole, among short ones, with their payloads. Prints one JSON line from rank 0."""
import json
import sys

import numpy as np
from mpi4py import MPI

from ensemble.results import Evaluation
from evolve.transport.mpi_transport import RESULT_BYTES, MPIMasterTransport, MPIWorkerChannel
from evolve.transport.protocol import Task
from evolve.transport.worker import serve

comm = MPI.COMM_WORLD
TASKS = 6


def evaluate(task: Task) -> Evaluation:
    long = task.id % 2 == 0
    curve = [task.id + i / 10_000 for i in range(10_000 if long else 3)]
    ev = Evaluation(status="ok", fitness=float(task.id), metrics={"val_accuracy": 0.5}, seconds=0.0, epochs_done=len(curve), message="é" * task.id, curve=curve)
    if task.id % 3 == 0:
        ev.val_pred, ev.test_pred = np.full((4, 2), task.id, np.float32), np.full((6, 2), task.id, np.float32)
        ev.weights = {"w": np.arange(5, dtype=np.float64) * task.id}
    return ev


if comm.rank == 0:
    transport = MPIMasterTransport(comm)
    got, sent = {}, 0
    for worker in transport.workers:
        transport.send(worker, Task(sent, {}, {}, 0))
        sent += 1
    while len(got) < TASKS:
        worker, result = transport.receive(timeout=30)
        got[result.task_id] = result.evaluation
        if sent < TASKS:
            transport.send(worker, Task(sent, {}, {}, 0))
            sent += 1
    transport.stop()
    ok = all(ev.curve == evaluate(Task(i, {}, {}, 0)).curve and ev.message == "é" * i and ev.fitness == i for i, ev in got.items())
    payloads = all(np.array_equal(ev.weights["w"], np.arange(5) * i) and ev.val_pred[0, 0] == i for i, ev in got.items() if i % 3 == 0)
    longer = len(evaluate(Task(0, {}, {}, 0)).curve) * 8 > RESULT_BYTES
    print(json.dumps({"received": sorted(got), "ok": ok, "payloads": payloads, "longer_than_buffer": longer}), flush=True)
    sys.exit(0 if ok and payloads and longer and sorted(got) == list(range(TASKS)) else 1)
else:
    serve(MPIWorkerChannel(comm), evaluate)
