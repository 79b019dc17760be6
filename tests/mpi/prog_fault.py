"""Under mpiexec: the real `evens run` with a fault injected on one rank mid-search.

Usage: prog_fault.py master|interrupt|worker EVENS-RUN-ARGS...
  master: the master's third checkpoint write raises (a full disk, say);
  interrupt: a KeyboardInterrupt reaches the master during its first checkpoint write,
             before its signal handlers are in place;
  worker: rank 1 raises while sending its second result.
Either way the job must end, non-zero, and no rank may wait forever; a full disk is the user's to
fix, so it ends in one line, the others (a bug) with the traceback shown.
"""
import sys

from mpi4py import MPI

from evolve.app.commands.cli import main
from evolve.runfile import checkpoint
from evolve.transport import mpi_transport

where, args = sys.argv[1], sys.argv[2:]
rank = MPI.COMM_WORLD.rank
calls = {"n": 0}

if where == "master" and rank == 0:
    real_save = checkpoint.save

    def failing_save(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        return real_save(*a, **k)

    checkpoint.save = failing_save
elif where == "interrupt" and rank == 0:
    def interrupted_save(*a, **k):
        raise KeyboardInterrupt

    checkpoint.save = interrupted_save
elif where == "worker" and rank == 1:
    real_send = mpi_transport.MPIWorkerChannel.send_result

    def failing_send(self, result):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected worker fault")
        return real_send(self, result)

    mpi_transport.MPIWorkerChannel.send_result = failing_send

sys.exit(main(args))
