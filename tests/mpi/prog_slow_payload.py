"""Under mpiexec -n 3: the master takes other results while a worker's wanted payload is on its way.

Rank 1 offers a payload and, once asked for it, takes 1.5 s before sending it (a large network's
weights on a slow link); rank 2 answers each of its tasks in 0.05 s, without payloads. The master must
keep taking rank 2's results meanwhile (a master that waited for the payload would take none), and then hand over rank 1's result whole. Prints one JSON line
from rank 0."""
import json
import sys
import time

import numpy as np
from mpi4py import MPI

from ensemble.results import Evaluation
from evolve.transport.mpi_transport import MPIMasterTransport, MPIWorkerChannel
from evolve.transport.protocol import Task
from evolve.transport.worker import serve

comm = MPI.COMM_WORLD
comm.Barrier()  # rank 2 ready when rank 1 is: its import of torch may lag seconds on a loaded machine
DELAY, FAST_SECONDS, AT_LEAST = 1.5, 0.05, 10  # in 1.5 s, some 30 of rank 2's 0.05 s tasks


def evaluate(task: Task) -> Evaluation:
    ev = Evaluation(status="ok", fitness=0.5, metrics={"val_accuracy": 0.5}, seconds=0.0, epochs_done=1)
    if comm.rank == 2:
        time.sleep(FAST_SECONDS)
    if comm.rank == 1:
        ev.val_pred, ev.test_pred = np.full((4, 2), 7, np.float32), np.full((6, 2), 7, np.float32)
        ev.weights = {"w": np.arange(1000, dtype=np.float64)}
    return ev


class SlowSender(MPIWorkerChannel):
    def _wanted(self):
        wanted = super()._wanted()
        if wanted:
            time.sleep(DELAY)
        return wanted


if comm.rank == 0:
    transport = MPIMasterTransport(comm)
    transport.send(1, Task(0, {}, {}, 0))
    transport.send(2, Task(1, {}, {}, 0))
    sent, fast_before_slow, slow = 2, 0, None
    start = time.monotonic()
    while slow is None:
        worker, result = transport.receive(timeout=30)
        if worker == 1:
            slow = result.evaluation
            slow_after = time.monotonic() - start
            break
        fast_before_slow += 1
        transport.send(2, Task(sent, {}, {}, 0))
        sent += 1
    transport.stop()
    whole = bool(slow.has_payload and np.array_equal(slow.weights["w"], np.arange(1000)) and slow.val_pred[0, 0] == 7)
    print(json.dumps({"fast_before_slow": fast_before_slow, "slow_after_s": round(slow_after, 2), "whole": whole}), flush=True)
    sys.exit(0 if whole and fast_before_slow >= AT_LEAST and slow_after >= DELAY else 1)
else:
    serve(SlowSender(comm) if comm.rank == 1 else MPIWorkerChannel(comm), evaluate)
