"""The master/worker protocol over MPI.

A task is a small pickled dict sent with ``send``. A result is a small pickled
header (status, fitness, metrics, times: a few hundred bytes). A worker whose
network cleared the task's entry bar offers its payload in the header (the
arrays' names, shapes and dtypes); the master answers ``TAG_WANT`` only if the
network enters the hall of fame now, and the worker then sends predictions and
weights packed into one aligned byte buffer with a single buffer-based ``Send``
(never pickled). An unwanted offer is simply never answered: the worker learns
it from the next message, which is its next task or the stop. The master learns that a result is waiting with
``Iprobe`` and a short, growing sleep, so it stays responsive to signals and uses
almost no CPU; each worker simply blocks on its next message.
"""
from __future__ import annotations

import time
import numpy as np
from mpi4py import MPI

from data_bcast.layout import array_specs, pack_arrays, packed_size, unpack_arrays
from ensemble.results import Evaluation

from .protocol import Result, Task, Wants, want_all

TAG_TASK, TAG_STOP, TAG_RESULT, TAG_PAYLOAD, TAG_WANT = 11, 12, 13, 14, 15


def send_arrays(comm: MPI.Comm, header: dict, arrays: dict[str, np.ndarray], dest: int, tag: int, payload_tag: int) -> None:
    """Send a small header (pickled) and, if there are any, named arrays as one raw buffer."""
    specs, buffer = pack_arrays(arrays) if arrays else (None, None)
    comm.send({**header, "arrays": specs}, dest=dest, tag=tag)
    if specs:
        comm.Send([buffer, MPI.BYTE], dest=dest, tag=payload_tag)


def recv_arrays(comm: MPI.Comm, source: int, tag: int, payload_tag: int) -> tuple[dict, dict[str, np.ndarray]]:
    """Receive what :func:`send_arrays` sent: (header, arrays); the arrays share one buffer."""
    header = comm.recv(source=source, tag=tag)
    specs = header.pop("arrays")
    if not specs:
        return header, {}
    buffer = np.empty(packed_size(specs), dtype=np.uint8)
    comm.Recv([buffer, MPI.BYTE], source=source, tag=payload_tag)
    return header, unpack_arrays(specs, buffer)


class MPIMasterTransport:
    """Rank ``master`` of ``comm`` talks to every other rank as a worker."""

    def __init__(self, comm: MPI.Comm, master: int = 0):
        self.comm = comm
        self.workers = [r for r in range(comm.size) if r != master]

    def send(self, worker: int, task: Task) -> None:
        self.comm.send(vars(task), dest=worker, tag=TAG_TASK)  # plain values already: no deep copy (asdict) needed

    def receive(self, timeout: float | None = None, wants: Wants = want_all) -> tuple[int, Result] | None:
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
        task_id, offer = header.pop("task_id"), header.pop("offer")
        payload = None
        if offer and wants(task_id, header["fitness"]):
            self.comm.send(None, dest=worker, tag=TAG_WANT)
            buffer = np.empty(packed_size(offer), dtype=np.uint8)
            self.comm.Recv([buffer, MPI.BYTE], source=worker, tag=TAG_PAYLOAD)
            payload = unpack_arrays(offer, buffer)
        return worker, Result(task_id, Evaluation.from_parts(header, payload))

    def stop(self) -> None:
        requests = [self.comm.isend(None, dest=w, tag=TAG_STOP) for w in self.workers]
        MPI.Request.Waitall(requests)


class MPIWorkerChannel:
    """A worker rank's end: blocks for the master's next message."""

    def __init__(self, comm: MPI.Comm, master: int = 0):
        self.comm = comm
        self.master = master
        self.offers = self.sent = 0  # payloads offered, and sent because the master wanted them
        self._early: tuple[int, object] | None = None  # a message that arrived while an offer was open

    def _next_message(self) -> tuple[int, object]:
        if self._early is not None:
            message, self._early = self._early, None
            return message
        status = MPI.Status()
        message = self.comm.recv(source=self.master, tag=MPI.ANY_TAG, status=status)
        return status.Get_tag(), message

    def next_task(self) -> Task | None:
        tag, message = self._next_message()
        if tag == TAG_STOP:
            return None
        return Task(**message)

    def send_result(self, result: Result) -> None:
        ev = result.evaluation
        arrays = ev.payload()
        offer = array_specs(arrays) if arrays else None
        self.comm.send({"task_id": result.task_id, **ev.header(), "offer": offer}, dest=self.master, tag=TAG_RESULT)
        if not offer:
            return
        self.offers += 1
        tag, message = self._next_message()
        if tag != TAG_WANT:  # the master moved on: the network did not enter the hall after all
            self._early = (tag, message)
            return
        _, buffer = pack_arrays(arrays)
        self.comm.Send([buffer, MPI.BYTE], dest=self.master, tag=TAG_PAYLOAD)
        self.sent += 1


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


def node_rank(comm: MPI.Comm) -> tuple[int, int]:
    """(this rank's index among the ranks on its node, how many ranks the node runs)."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    try:
        return node.rank, node.size
    finally:
        node.Free()


def sum_over_ranks(comm: MPI.Comm):
    """An allreduce for :func:`ensemble.combine.combine`: element-wise sums of numpy arrays over ``comm``."""

    def allreduce(array: np.ndarray) -> np.ndarray:
        array = np.ascontiguousarray(array)
        total = np.empty_like(array)
        comm.Allreduce(array, total, op=MPI.SUM)
        return total

    return allreduce
