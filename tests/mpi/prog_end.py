"""Under mpiexec -n 3: the master ends the job while both workers train (MPIMasterTransport.end, issue 35 defect 17).

Rank 0 sends each worker a task and two more queued behind it; once both have said they started the first (a message
on a tag of this test's own), it ends the job. Each worker's training asks ``end_requested`` while it runs, as a
training process's rank does (evolve.transport.isolation), and stops (Ended): it starts none of the queued tasks,
says it has ended, and every rank ends normally. With ``silent``, rank 2 trains without asking (a rank that trains
in itself, or a hung one): ``end`` gives up on it after its bound and names it, and rank 0 aborts the job (75).
Usage: prog_end.py answer|silent REPORT. Rank 0 writes REPORT (JSON; a file, as a line printed just before an
abort may be lost): the workers that did not answer, whether ``end`` kept to its bound, and (where the job ends
normally) how many trainings each worker began.
"""
import json
import sys
import time

from mpi4py import MPI

from ensemble.results import Evaluation
from evolve.transport.mpi_transport import MPIMasterTransport, MPIWorkerChannel, abort
from evolve.transport.protocol import Ended, Task
from evolve.transport.worker import serve

comm = MPI.COMM_WORLD
SILENT, REPORT = sys.argv[1] == "silent", sys.argv[2]
BOUND = 3.0  # end's bound here (seconds)
TAG_STARTED = 77  # this test's own: a worker tells rank 0 it has begun its first training
began = 0


def training(channel: MPIWorkerChannel):
    def evaluate(task: Task) -> Evaluation:
        global began
        began += 1
        if began == 1:
            comm.send(task.id, dest=0, tag=TAG_STARTED)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not (SILENT and comm.rank == 2) and channel.end_requested():
                raise Ended("ended")
            time.sleep(0.05)
        return Evaluation(status="ok", fitness=0.5, metrics={"val_accuracy": 0.5}, seconds=60, epochs_done=1)

    return evaluate


if comm.rank == 0:
    transport = MPIMasterTransport(comm)
    for k in range(3):  # the first trains, two are queued behind it
        for w in transport.workers:
            transport.send(w, Task(100 * w + k, {}, {}, 0))
    for w in transport.workers:
        comm.recv(source=w, tag=TAG_STARTED)
    started = time.monotonic()
    silent = transport.end(BOUND)
    took = time.monotonic() - started
    line = {"silent": silent, "in_bound": took < BOUND + 1.0 and (not silent or took >= BOUND - 0.1)}
    if silent:
        with open(REPORT, "w") as f:
            json.dump(line, f)
        abort(comm, 75)
    channel = None
else:
    channel = MPIWorkerChannel(comm)
    serve(channel, training(channel))
    channel.say_ended()
counts = comm.gather(began, root=0)
if comm.rank == 0:
    with open(REPORT, "w") as f:
        json.dump({**line, "began": counts[1:]}, f)
