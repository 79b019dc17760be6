"""Under mpiexec: the CPU a worker uses while it waits for its next task (MPIWorkerChannel.next_task),
and how long a task then takes to reach it. Prints one JSON line from rank 0.

Usage: prog_idle_cpu.py SECONDS
"""
import json
import os
import sys
import time

from mpi4py import MPI

from evolve.transport.mpi_transport import MPIMasterTransport, MPIWorkerChannel
from evolve.transport.protocol import Task

seconds = float(sys.argv[1])
comm = MPI.COMM_WORLD
pids = comm.gather(os.getpid(), root=0)


def cpu(pid):
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


if comm.rank == 0:
    transport = MPIMasterTransport(comm)
    time.sleep(1.0)  # the workers are waiting by now
    before = {w: cpu(pids[w]) for w in transport.workers}
    time.sleep(seconds)
    used = {w: (cpu(pids[w]) - before[w]) / seconds for w in transport.workers}
    delays = []
    for w in transport.workers:
        sent = time.time()
        transport.send(w, Task(1, {}, {}, 0))
        delays.append(comm.recv(source=w, tag=99) - sent)
    transport.stop()
    print(json.dumps({"cpu_fraction": used, "delivery_seconds": delays}), flush=True)
else:
    channel = MPIWorkerChannel(comm)
    task = channel.next_task()
    comm.send(time.time(), dest=0, tag=99)
    assert channel.next_task() is None
