"""The master/worker protocol over MPI.

A task is a small pickled dict sent with ``send``. A result is a small pickled
header followed, for a successful evaluation, by the validation and test class
probabilities as raw float32 buffers (``Send``/``Recv``, never pickled). The
master learns that a result is waiting with ``Iprobe`` and a short, growing
sleep, so it stays responsive to signals and uses almost no CPU; each worker
simply blocks on its next message.
"""
from __future__ import annotations

import time
from dataclasses import asdict, fields

import numpy as np
from mpi4py import MPI

from ensemble.results import Evaluation

from .protocol import Result, Task

TAG_TASK, TAG_STOP, TAG_RESULT, TAG_VAL, TAG_TEST = 11, 12, 13, 14, 15
_ARRAYS = ("val_probs", "test_probs")


class MPIMasterTransport:
    """Rank ``master`` of ``comm`` talks to every other rank as a worker."""

    def __init__(self, comm: MPI.Comm, val_shape: tuple[int, int], test_shape: tuple[int, int], master: int = 0):
        self.comm = comm
        self.workers = [r for r in range(comm.size) if r != master]
        self._shapes = (tuple(val_shape), tuple(test_shape))

    def send(self, worker: int, task: Task) -> None:
        self.comm.send(asdict(task), dest=worker, tag=TAG_TASK)

    def receive(self, timeout: float | None = None) -> tuple[int, Result] | None:
        status = MPI.Status()
        deadline = None if timeout is None else time.monotonic() + timeout
        nap = 1e-4
        while not self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_RESULT, status=status):
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(nap)
            nap = min(nap * 2, 0.01)
        worker = status.Get_source()
        header = self.comm.recv(source=worker, tag=TAG_RESULT)
        val = np.empty(self._shapes[0], dtype=np.float32)
        test = np.empty(self._shapes[1], dtype=np.float32)
        if header.pop("has_probs"):
            self.comm.Recv(val, source=worker, tag=TAG_VAL)
            self.comm.Recv(test, source=worker, tag=TAG_TEST)
        else:
            val.fill(np.nan)
            test.fill(np.nan)
        task_id = header.pop("task_id")
        return worker, Result(task_id, Evaluation(val_probs=val, test_probs=test, **header))

    def stop(self) -> None:
        requests = [self.comm.isend(None, dest=w, tag=TAG_STOP) for w in self.workers]
        MPI.Request.Waitall(requests)


class MPIWorkerChannel:
    """A worker rank's end: blocks for the master's next message."""

    def __init__(self, comm: MPI.Comm, master: int = 0):
        self.comm = comm
        self.master = master

    def next_task(self) -> Task | None:
        status = MPI.Status()
        message = self.comm.recv(source=self.master, tag=MPI.ANY_TAG, status=status)
        if status.Get_tag() == TAG_STOP:
            return None
        return Task(**message)

    def send_result(self, result: Result) -> None:
        ev = result.evaluation
        header = {f.name: getattr(ev, f.name) for f in fields(ev) if f.name not in _ARRAYS}
        has_probs = ev.status == "ok"
        self.comm.send({"task_id": result.task_id, "has_probs": has_probs, **header}, dest=self.master, tag=TAG_RESULT)
        if has_probs:
            self.comm.Send(np.ascontiguousarray(ev.val_probs, dtype=np.float32), dest=self.master, tag=TAG_VAL)
            self.comm.Send(np.ascontiguousarray(ev.test_probs, dtype=np.float32), dest=self.master, tag=TAG_TEST)


def world() -> MPI.Comm:
    """All the ranks of the job."""
    return MPI.COMM_WORLD


def abort(comm: MPI.Comm, code: int) -> None:
    """End every rank of ``comm`` now; used when one rank cannot go on and the others must not wait."""
    comm.Abort(code)


def first_error(comm: MPI.Comm, error: str | None, root: int = 0) -> str | None:
    """Collective: gather each rank's error (or None) and give every rank the first one."""
    errors = comm.gather(error, root=root)
    first = next((e for e in errors if e), None) if comm.rank == root else None
    return comm.bcast(first, root=root)
