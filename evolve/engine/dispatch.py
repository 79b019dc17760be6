"""Tasks out to workers and results back: who is free, what each worker holds, what is outstanding.

The :class:`Dispatcher` is the master's bookkeeping of its workers, apart from what to train
(the strategy's business) and what to remember (the search loop's):

* **slots**: a worker may hold up to ``depth`` tasks, the one it trains and, with
  ``search.prefetch``, some queued behind it that it starts the moment it sends a result, without
  waiting for the master's answer. ``idle`` has a slot for every task a worker could take now
  (every worker's first task before any second);
* **queues**: each worker's tasks in the order sent; its results come back in that order (MPI
  does not reorder messages between two ranks), and a queued task's clock starts when the one
  before it comes back;
* **the journal**: every task is noted before it leaves and every result when it is back
  (:class:`Journal`), so a job that dies knows what was out;
* **what is outstanding**, for a checkpoint or a resume, and **hangs**: a worker silent past its
  training's time limit.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Protocol

from evolve.search.records import Pending
from evolve.transport.protocol import Result, Task, Transport, Wants

BATCH = 16  # at most this many results taken in one turn of the loop (those already waiting)


class Journal(Protocol):
    """Where the master notes each dispatch and each result between checkpoints (see
    :class:`evolve.runfile.inflight.InFlightLog`), so a job that dies knows what was out."""

    def sent(self, individual: Pending, attempts: int) -> None: ...  # noted: goes out after the next flush

    def done(self, ident: int) -> None: ...  # noted

    def flush(self) -> None: ...  # tasks noted are about to go out, or the master is about to wait: write what is noted now


@dataclass(slots=True)
class Sent:
    """A task out on a worker."""

    individual: Pending
    task: Task
    since: float  # clock: when it went out, or when the task before it on its worker came back
    started: float  # wall clock, likewise


class Dispatcher:
    """The master's view of its workers' tasks. ``depth`` is how many tasks a worker may hold."""

    def __init__(self, transport: Transport, depth: int, clock: Callable[[], float], wall_clock: Callable[[], float],
                 journal: Journal | None = None):
        self.transport, self.clock, self.wall_clock, self.journal = transport, clock, wall_clock, journal
        self.idle = deque(w for _ in range(depth) for w in transport.workers)
        self.out: dict[int, deque[Sent]] = {w: deque() for w in transport.workers}
        self.inflight = 0  # tasks out, training or queued
        self.suspects = 0  # of them, individuals that were out when a job died (attempts counted)
        self._outbox: list[tuple[int, Task]] = []  # noted in the journal, not yet sent
        self._poll = getattr(transport, "poll", None)  # optional: a result already waiting, or None, never waiting
        self._next_hang_check = clock()

    def free_worker(self, remaining: int) -> int | None:
        """The worker that takes the next task, or None if none should now; ``remaining``: tasks the budget
        still allows. In the last round (no more tasks left than workers) nothing is queued behind a
        busy worker, so no worker idles while another holds two."""
        while self.idle:
            worker = self.idle[0]
            if not self.out[worker] or remaining > len(self.out):
                return worker
            self.idle.popleft()
        return None

    def has_slot(self, worker: int) -> bool:
        """May ``worker`` take a task now (idle, or with room in its queue: it starts when its training ends)?"""
        return worker in self.out and worker in self.idle

    def send(self, worker: int, individual: Pending, task: Task) -> None:
        """Give ``task`` to ``worker`` (a :meth:`free_worker`, or out of turn another that :meth:`has_slot`: a promotion's
        holder); it goes out at the next :meth:`flush`."""
        if self.idle and self.idle[0] == worker:
            self.idle.popleft()
        elif self.has_slot(worker):
            self.idle.remove(worker)
        else:
            raise ValueError(f"worker rank {worker} is not free")
        if self.journal is not None:  # a job death counts against the task its worker trains, not those queued
            self.journal.sent(individual, individual.attempts + (0 if self.out[worker] else 1))
        self.out[worker].append(Sent(individual, task, self.clock(), self.wall_clock()))
        self.inflight += 1
        self.suspects += individual.attempts > 0
        self._outbox.append((worker, task))

    def flush(self) -> None:
        """Send the tasks given since the last flush: every one noted in the journal first, in one write."""
        if self.journal is not None:
            self.journal.flush()
        for worker, task in self._outbox:
            self.transport.send(worker, task)
        self._outbox.clear()

    def results(self, timeout: float, wants: Wants, more: Callable[[], bool]) -> Iterator[tuple[int, Result, Sent]]:
        """Results as they come back, with the task each answers: the first within ``timeout`` seconds, then
        those already waiting (up to :data:`BATCH`) while ``more()`` says so. Each result's worker is free
        again for another task; a result SKIPPED at a drain is given too (its task never ran)."""
        self.flush()
        got = self.transport.receive(timeout=timeout, wants=wants)
        taken = 0
        while got is not None:
            worker, result = got
            yield worker, result, self._returned(worker, result)
            taken += 1
            if self._poll is None or taken >= BATCH or not self.inflight or not more():
                return
            got = self._poll(wants)

    def _returned(self, worker: int, result: Result) -> Sent:
        tasks = self.out[worker]
        sent = tasks.popleft()
        if sent.individual.id != result.task_id:
            raise RuntimeError(f"worker rank {worker} returned evaluation {result.task_id}, not {sent.individual.id}, the oldest it holds")
        self.idle.append(worker)
        self.inflight -= 1
        self.suspects -= sent.individual.attempts > 0
        if tasks:  # the worker starts its next task now: a job death from here on counts against it
            tasks[0].since, tasks[0].started = self.clock(), self.wall_clock()
            if self.journal is not None:
                self.journal.sent(tasks[0].individual, tasks[0].individual.attempts + 1)
        return sent

    def finished(self, ident: int) -> None:
        """Individual ``ident`` is recorded: nothing of it is to be redone (noted in the journal; written with
        its next flush)."""
        if self.journal is not None:
            self.journal.done(ident)

    def running(self) -> list[tuple[int, float]]:
        """(worker, clock when its training started) of every worker training."""
        return [(w, tasks[0].since) for w, tasks in self.out.items() if tasks]

    def hung(self, after: float | None) -> tuple[int, Sent] | None:
        """A worker silent for ``after`` seconds since its training started, and that task; None if there is
        none, or ``after`` is None. Looks at most once a second."""
        now = self.clock()
        if after is None or now < self._next_hang_check:
            return None
        self._next_hang_check = now + 1.0
        trainings = [(tasks[0].since, w) for w, tasks in self.out.items() if tasks]
        if not trainings:
            return None
        since, worker = min(trainings)
        return (worker, self.out[worker][0]) if now - since > after else None

    def outstanding(self, deaths: Callable[[int], int]) -> list[Pending]:
        """Every individual out, what a resume must redo: the one each worker trains with ``deaths(worker)``
        added to its attempts, those queued behind it as they were (one that starts after a checkpoint is
        noted in the journal with its attempt, see :meth:`_returned`)."""
        return [replace(s.individual, attempts=s.individual.attempts + (deaths(w) if k == 0 else 0))
                for w, tasks in self.out.items() for k, s in enumerate(tasks)]

    def view(self) -> dict:
        """What each worker holds, as plain JSON for the run file (``evens status`` reads it): the worker
        ranks, ``[rank, id, started]`` of each training (wall clock) and ``[rank, id]`` of each task queued."""
        return {"workers": sorted(self.out),
                "training": [[w, tasks[0].individual.id, tasks[0].started] for w, tasks in self.out.items() if tasks],
                "queued": [[w, s.individual.id] for w, tasks in self.out.items() for s in list(tasks)[1:]]}

    def queued(self) -> int:
        """Tasks waiting behind a training."""
        return self.inflight - len(self.running())

    def drop_queued(self) -> int:
        """Ask every worker to drop the tasks queued behind its training (they come back SKIPPED); how many."""
        queued = self.queued() if hasattr(self.transport, "drain") else 0
        if queued:
            self.transport.drain()
        return queued
