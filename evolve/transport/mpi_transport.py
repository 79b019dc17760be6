"""The master/worker protocol over MPI.

A task goes out as a small pickled tuple: its id, seed, entry bar and watch, and the genome's key
(:meth:`~evolve.search.space.SearchSpace.key`); each worker is sent the search space once (its
config, ``TAG_SPACE``) and builds the network and training settings from the key itself, so the
master never builds them (a space whose config does not parse back to it is sent as settings, a
pickled dict). The tuple is pickled, in C, because packing the key into binary in Python costs the
master more. A result is a compact binary header (:mod:`evolve.transport.wire`: status, fitness,
metrics, times, curve; a few hundred bytes), never pickled, which the master receives into a
preallocated buffer through one persistent receive from any worker, started again after each
result: no probe, no unpickling, and decoding it executes nothing. A header longer than that buffer
is announced by a short marker and follows on its own tag.

A worker whose network cleared the task's entry bar offers its payload in the header (the arrays'
names, shapes and dtypes); the master answers every offer on ``TAG_WANT``: True if the network
enters the hall of fame now, and the worker then sends predictions and weights packed into one
aligned byte buffer with a single buffer-based ``Send`` (never pickled), else False. The master
receives it in the background (``Irecv``) and goes on taking other results; the result is handed
to the search once its payload is whole. An offer that arrives meanwhile waits to be decided until
then, against the hall as it is then, so no two payloads asked for compete for one place (a result
without an offer cannot enter the hall: it did not clear a bar that has only risen since).

A worker waits for that answer (or the stop) alone: tasks the master queued behind its training
(``search.prefetch``) wait in MPI's queue meanwhile. Before each task it starts, a worker takes
every message that has come and looks among them for the stop and the drain: a stop skips the tasks
queued before it, a drain (``TAG_DRAIN``, sent as a drain begins) answers each of them with a
result whose status is ``skipped``, so that the master waits only for the trainings running.

A job that ends with trainings out (a stop without a drain, or one past its deadline; a full disk) ends
as cleanly as one whose workers are idle, where the workers train in processes of their own
(:meth:`MPIMasterTransport.end`): the master sends every worker ``TAG_END``; a worker waiting for its
training's result asks for it on that wait's poll timeouts (:meth:`MPIWorkerChannel.end_requested`) and
stops the training, one waiting for a task or an answer takes it as the stop. Each ends its training
process and lets its fork server end, then says so (``TAG_ENDED``) and finalizes MPI as at any end; the
master drops the results that come meanwhile (its checkpoint has their tasks as out). A worker that has
not answered within :data:`END_SECONDS` (hung) is left to the caller's MPI_Abort.

Both ends wait by testing (the master its receive, a worker with ``Iprobe``), yielding the CPU
between tests and then sleeping (see :func:`_wait_for`), so the master stays responsive to signals
and a waiting rank uses almost no CPU; results already waiting are taken without waiting
(:meth:`MPIMasterTransport.poll`).
"""
from __future__ import annotations

import os
import sys
import time
from collections import deque

import numpy as np
from mpi4py import MPI

from data_bcast.layout import array_specs, array_views, pack_arrays, packed_layout
from ensemble.results import failed_evaluation
from evolve.search.space_config import parse_space

from .protocol import SKIPPED, Result, Task, Wants, want_all
from .wire import long_marker, long_size, pack_result, unpack_result

TAG_TASK, TAG_STOP, TAG_RESULT, TAG_PAYLOAD, TAG_WANT, TAG_SPACE, TAG_KEYED, TAG_LONG, TAG_DRAIN = 11, 12, 13, 14, 15, 16, 17, 18, 19
TAG_END, TAG_ENDED = 20, 21  # master -> worker: end now, a training abandoned; worker -> master: ended (see MPIMasterTransport.end)
RESULT_BYTES = 1 << 16  # the master's result buffer; a longer header follows a marker, on TAG_LONG
PAYLOAD_DRAIN_SECONDS = 60.0  # at stop, how long the payloads still on their way are waited for
END_SECONDS = 10.0  # at end, how long every worker is waited for to say it has ended (its training and fork server gone)


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
    layout = packed_layout(specs)  # (planned once: for the buffer's size and for the views)
    buffer = np.empty(layout.total_bytes, dtype=np.uint8)
    comm.Recv([buffer, MPI.BYTE], source=source, tag=payload_tag)
    return header, array_views(layout, buffer)


# Waiting for a message: first up to ``spins`` ``sched_yield``s (cheap, and a process sharing the core
# runs meanwhile), then naps that double from 0.1 ms to MAX_NAP. A nap costs far more CPU than a yield
# (a timer and two context switches), so a message that comes within a few yields is taken without
# one, and a long wait still costs little: short naps keep a task's delivery prompt for a small share
# of a core (docs/reliability.md, "Idle workers").
# A blocking receive would spin in the MPI library instead (MPICH polls without yielding), taking a
# core from whatever shares it. The master yields briefly (its results come from many workers); a
# worker, which waits only for the master's answer, for longer (some milliseconds) before napping.
SPINS, WORKER_SPINS = 64, 10_000
MAX_NAP = 0.002


def _wait_for(comm: MPI.Comm, source: int, tag: int, status: MPI.Status, timeout: float | None, spins: int = SPINS) -> bool:
    """Wait until a message from ``source`` with ``tag`` is waiting (True; ``status`` describes it) or
    ``timeout`` seconds pass (False)."""
    iprobe = comm.Iprobe
    return _wait_until(lambda: iprobe(source=source, tag=tag, status=status), timeout, spins)


def _wait_until(ready, timeout: float | None, spins: int = SPINS) -> bool:
    """Call ``ready()`` until it is true (True) or ``timeout`` seconds pass (False), yielding, then napping."""
    for _ in range(spins):
        os.sched_yield()
        if ready():
            return True
    deadline = None if timeout is None else time.monotonic() + timeout
    nap = 1e-4
    while not ready():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(nap)
        nap = min(nap * 2, MAX_NAP)
    return True


def _space_message(space) -> dict:
    """What a worker is told of the search space: its [space] table and its model builder (if any)."""
    return {"space": space.to_config(), "builder": space.builder}


def _space_from(message: dict):
    return parse_space(message["space"], message["builder"])


class MPIMasterTransport:
    """Rank ``master`` of ``comm`` talks to every other rank as a worker."""

    queues = True  # a worker takes tasks sent while it trains, in order (search.prefetch)

    def __init__(self, comm: MPI.Comm, master: int = 0):
        self.comm = comm
        self.workers = [r for r in range(comm.size) if r != master]
        self._status = MPI.Status()
        self._space = None  # the search space of the last keyed task ...
        self._space_travels = False  # ... whether it survives its config's round trip (then workers decode keys)
        self._told: set[int] = set()  # the workers that have that space
        self._buffer = bytearray(RESULT_BYTES)  # where results arrive ...
        self._request: MPI.Prequest | None = None  # ... through this persistent receive from any worker
        self._waiting = False  # whether it is started and not yet completed
        self._payload: tuple | None = None  # the wanted payload on its way: (worker, result, its Layout, buffer, Irecv request)
        self._offers: deque[tuple] = deque()  # offers that came meanwhile, undecided: (worker, result, offer)

    def send(self, worker: int, task: Task) -> None:
        if task.key is not None and self._decodes(worker, task.space):
            # id, seed, bar, watch and the key: the worker builds the settings (specs) from the key itself
            self.comm.send((task.id, task.seed, task.entry_bar, task.watch, task.key, task.fold), dest=worker, tag=TAG_KEYED)
        else:
            self.comm.send(task.plain(), dest=worker, tag=TAG_TASK)

    def _decodes(self, worker: int, space) -> bool:
        """Can ``worker`` decode keys of ``space``? The first time, it is sent the space's config."""
        if space is not self._space:
            self._space, self._told = space, set()
            self._space_travels = _space_from(_space_message(space)) == space
        if not self._space_travels:
            return False
        if worker not in self._told:
            self.comm.send(_space_message(space), dest=worker, tag=TAG_SPACE)
            self._told.add(worker)
        return True

    def _arrived(self) -> bool:
        """Has the persistent receive a result (in ``self._buffer``, described by ``self._status``)? Starts it if need be."""
        if not self._waiting:
            if self._request is None:
                self._request = self.comm.Recv_init([self._buffer, MPI.BYTE], source=MPI.ANY_SOURCE, tag=TAG_RESULT)
            self._request.Start()
            self._waiting = True
        if self._request.Test(self._status):
            self._waiting = False
            return True
        return False

    def receive(self, timeout: float | None = None, wants: Wants = want_all) -> tuple[int, Result] | None:
        got = self.poll(wants)
        if got is not None:  # (most turns at scale: no waiting to set up)
            return got
        found: list = []

        def ready() -> bool:
            found.append(self.poll(wants))
            return found[-1] is not None

        return found[-1] if _wait_until(ready, timeout) else None

    def poll(self, wants: Wants = want_all) -> tuple[int, Result] | None:
        """A finished result if one is here now, else None at once: a wanted payload that has arrived
        whole, or a result that needs none. A wanted payload is received in the background (``Irecv``):
        the master never waits on a worker's payload while others have results for it. An offer that
        arrives meanwhile is decided once that payload has been handed over, against the hall as it is
        then, so two payloads asked for never compete for one place."""
        if self._payload is not None:
            worker, result, layout, buffer, request = self._payload
            if request.Test():
                self._payload = None
                result.evaluation.take_payload(array_views(layout, buffer))
                return worker, result
        elif self._offers:
            got = self._offered(*self._offers.popleft(), wants)
            if got is not None:
                return got
        while self._arrived():
            worker, result, offer = self._decode()
            if not offer:
                return worker, result
            if self._payload is not None or self._offers:
                self._offers.append((worker, result, offer))  # decided after the payload on its way
                continue
            got = self._offered(worker, result, offer, wants)
            if got is not None:
                return got
        return None

    def _offered(self, worker: int, result: Result, offer: list, wants: Wants) -> tuple[int, Result] | None:
        """Decide an offer: the result without its payload, or None: the payload is asked for and comes in the background."""
        if not wants(result.task_id, result.evaluation.fitness, result.evaluation.loss):
            self.comm.send(False, dest=worker, tag=TAG_WANT)
            return worker, result
        self.comm.send(True, dest=worker, tag=TAG_WANT)
        layout = packed_layout(offer)  # (planned once, and kept to unpack the payload with)
        buffer = np.empty(layout.total_bytes, dtype=np.uint8)
        self._payload = (worker, result, layout, buffer, self.comm.Irecv([buffer, MPI.BYTE], source=worker, tag=TAG_PAYLOAD))
        return None  # the worker is sending it: meanwhile, the next result

    def _decode(self) -> tuple[int, Result, list | None]:
        """The result the persistent receive just took: (worker, result without payload, payload offered)."""
        status = self._status
        worker, count = status.Get_source(), status.Get_count(MPI.BYTE)
        message = self._buffer
        size = long_size(message, count)
        if size is not None:  # a long header: it follows on its own tag
            message = bytearray(size)
            self.comm.Recv([message, MPI.BYTE], source=worker, tag=TAG_LONG)
            count = size
        try:
            task_id, evaluation, offer = unpack_result(message, count)
        except ValueError as exc:
            raise ValueError(f"a malformed result from worker rank {worker}: {exc}") from None
        return worker, Result(task_id, evaluation), offer

    def drain(self) -> None:
        """Tell every worker to drop the tasks queued behind its training (each comes back ``skipped``)."""
        MPI.Request.Waitall([self.comm.isend(None, dest=w, tag=TAG_DRAIN) for w in self.workers])

    def stop(self) -> None:
        self._let_go(PAYLOAD_DRAIN_SECONDS)
        requests = [self.comm.isend(None, dest=w, tag=TAG_STOP) for w in self.workers]
        MPI.Request.Waitall(requests)

    def end(self, seconds: float = END_SECONDS) -> list[int]:
        """Tell every worker to end now, the training it runs (if any) abandoned, and wait up to ``seconds`` for each
        to say it has (``TAG_ENDED``: its training process and fork server are gone; it then finalizes MPI with the
        master). The results that come meanwhile are dropped: the caller's checkpoint has their tasks as out.
        Returns the workers that did not answer (hung, or training in the rank itself): the caller aborts the job."""
        deadline = time.monotonic() + seconds
        self._let_go(seconds)
        requests = [self.comm.isend(None, dest=w, tag=TAG_END) for w in self.workers]
        silent, status, iprobe, recv = set(self.workers), MPI.Status(), self.comm.Iprobe, self.comm.Recv

        def answered() -> bool:
            while iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):  # (every message a worker sends, in order)
                worker, tag = status.Get_source(), status.Get_tag()
                recv([bytearray(status.Get_count(MPI.BYTE)), MPI.BYTE], source=worker, tag=tag)  # a result (dropped), or the answer
                if tag == TAG_ENDED:
                    silent.discard(worker)
            return not silent

        if _wait_until(answered, max(0.0, deadline - time.monotonic())):
            MPI.Request.Waitall(requests)  # (each was received: a worker answers only after it took its TAG_END)
        return sorted(silent)

    def _let_go(self, seconds: float) -> None:
        """Before the stop or the end: a payload on its way is taken first (up to ``seconds``): its worker is inside a Send
        that must complete (the workers of undecided offers take the stop or end as their answer, and skip the tasks
        queued before it); the receive of results is cancelled."""
        if self._payload is not None and not _wait_until(self._payload[4].Test, seconds):
            self._payload[4].Cancel()  # a worker that never finishes sending: let the job's end deal with it
        self._payload = None
        self._offers.clear()
        if self._request is not None:
            if self._waiting:  # nothing will come now (a result that did is dropped, as one never received would be)
                self._request.Cancel()
                self._request.Wait()
                self._waiting = False
            self._request.Free()
            self._request = None


class MPIWorkerChannel:
    """A worker rank's end: blocks for the master's next message."""

    def __init__(self, comm: MPI.Comm, master: int = 0):
        self.comm = comm
        self.master = master
        self.offers = self.sent = 0  # payloads offered, and sent because the master wanted them
        self.ending = False  # the master said to end now (TAG_END): next_task gives None, and say_ended answers it
        self._inbox: deque[tuple[int, object]] = deque()  # messages taken from MPI's queue, not yet acted on
        self._space = None  # the search space the master sent, to decode keyed tasks with
        self._status = MPI.Status()

    def _next_message(self) -> tuple[int, object]:
        if self._inbox:
            return self._inbox.popleft()
        status = self._status
        if not self.comm.Iprobe(source=self.master, tag=MPI.ANY_TAG, status=status):
            _wait_for(self.comm, self.master, MPI.ANY_TAG, status, None, WORKER_SPINS)
        message = self.comm.recv(source=self.master, tag=status.Get_tag())
        return status.Get_tag(), message

    def _stopping(self) -> bool:
        """Looks past the tasks queued here for a stop (then drops them: True) or a drain (then answers
        each task before it with a ``skipped`` result and goes on: False).

        Every message that has come is taken into the inbox first, in order: an ``Iprobe`` that finds
        nothing may only have made progress (MPICH moves arrived messages along a few at a time), so
        a tag-specific probe can miss a stop or drain behind several tasks; the inbox cannot."""
        iprobe, master, status, inbox = self.comm.Iprobe, self.master, self._status, self._inbox
        while iprobe(source=master, tag=MPI.ANY_TAG, status=status) or iprobe(source=master, tag=MPI.ANY_TAG, status=status):
            tag = status.Get_tag()
            inbox.append((tag, self.comm.recv(source=master, tag=tag)))
        if not inbox:
            return False
        tags = [tag for tag, _ in inbox]
        if TAG_STOP in tags or TAG_END in tags:
            self.ending = self.ending or TAG_END in tags
            inbox.clear()  # (nothing is sent after the stop or the end)
            return True
        if TAG_DRAIN in tags:
            while True:
                tag, message = inbox.popleft()
                if tag == TAG_DRAIN:
                    break
                if tag == TAG_SPACE:
                    self._space = _space_from(message)
                elif tag in (TAG_KEYED, TAG_TASK):
                    ident = message[0] if tag == TAG_KEYED else message["id"]
                    self.send_result(Result(ident, failed_evaluation("dropped from the queue at a drain", SKIPPED)))
        return False

    def next_task(self) -> Task | None:
        if self.ending:  # (seen while a training ran: the tasks queued behind it are not started)
            self._inbox.clear()
            return None
        tag = TAG_DRAIN
        while tag in (TAG_DRAIN, TAG_SPACE):
            if self._stopping():
                return None
            tag, message = self._next_message()
            if tag == TAG_SPACE:
                self._space = _space_from(message)
        if tag in (TAG_STOP, TAG_END):
            self.ending = tag == TAG_END
            return None
        if tag == TAG_KEYED:
            ident, seed, entry_bar, watch, key, fold = message
            return Task.from_key(ident, self._space, key, seed, entry_bar, watch, fold)
        return Task(**message)

    def _wanted(self) -> bool:
        """The master's answer to an offer: True (send the payload) or False; the stop or the end, which next_task
        takes, answers it too. Tasks queued meanwhile stay in MPI's queue."""
        iprobe, master = self.comm.Iprobe, self.master
        _wait_until(lambda: iprobe(source=master, tag=TAG_WANT) or iprobe(source=master, tag=TAG_STOP) or iprobe(source=master, tag=TAG_END),
                    None, WORKER_SPINS)
        return iprobe(source=master, tag=TAG_WANT) and bool(self.comm.recv(source=master, tag=TAG_WANT))

    def end_requested(self) -> bool:
        """Has the master said to end now (``TAG_END``)? Asked, never waiting, while a training runs (the wait for its
        result: evolve.transport.isolation); once it has, next_task gives None."""
        if not self.ending and self.comm.Iprobe(source=self.master, tag=TAG_END):
            # Every message the master sent before it (tasks queued here, a drain) is taken too, in order, and dropped:
            # MPI wants each received before the rank finalizes (MPICH killed a rank that left two, 1 run in 5).
            status = self._status
            while True:
                self.comm.recv(source=self.master, tag=MPI.ANY_TAG, status=status)
                if status.Get_tag() == TAG_END:
                    break
            self._inbox.clear()
            self.ending = True
        return self.ending

    def say_ended(self) -> None:
        """If the master said to end now: tell it this rank has (called once its training process and fork server are gone)."""
        if self.ending:
            self.comm.send(None, dest=self.master, tag=TAG_ENDED)

    def send_result(self, result: Result) -> None:
        ev = result.evaluation
        arrays = ev.payload()
        offer = array_specs(arrays) if arrays else None
        message = pack_result(result.task_id, ev, offer)
        if len(message) > RESULT_BYTES:
            self.comm.Send([long_marker(len(message)), MPI.BYTE], dest=self.master, tag=TAG_RESULT)
            self.comm.Send([message, MPI.BYTE], dest=self.master, tag=TAG_LONG)
        else:
            self.comm.Send([message, MPI.BYTE], dest=self.master, tag=TAG_RESULT)
        if not offer:
            return
        self.offers += 1
        if not self._wanted():
            return
        _, buffer = pack_arrays(arrays)
        self.comm.Send([buffer, MPI.BYTE], dest=self.master, tag=TAG_PAYLOAD)
        self.sent += 1


def world() -> MPI.Comm:
    """All the ranks of the job."""
    return MPI.COMM_WORLD


def library_name() -> str:
    """The MPI library mpi4py runs on, in one line ("MPICH Version: 5.0.2", "Open MPI v5.0.5, ...")."""
    return " ".join(MPI.Get_library_version().strip().splitlines()[0].split())


ABORT_GRACE = 0.3  # seconds between this rank's last words and the abort: the launcher forwards them meanwhile


def abort(comm: MPI.Comm, code: int) -> None:
    """End every rank of ``comm`` now; used when one rank cannot go on and the others must not wait.
    What this rank printed is flushed first, and the launcher given a moment to pass it on: MPICH's
    tears the job down at once and can drop a last line still in its pipe (seen once in 4 suite runs)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    time.sleep(ABORT_GRACE)
    comm.Abort(code)


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
