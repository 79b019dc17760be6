"""The Dispatcher alone (evolve.engine.dispatch): slots and prefetch order, results in order, drains,
hangs, and what is outstanding when a job dies; on a virtual clock, no search."""
import pytest
from fakes import SimulatedTransport, VirtualClock

from ensemble.results import Evaluation, failed_evaluation
from evolve.engine.dispatch import BATCH, Dispatcher
from evolve.search.records import Pending
from evolve.transport.protocol import SKIPPED, Result, Task


def individual(ident: int, attempts: int = 0) -> Pending:
    return Pending(id=ident, genome=[0.5], attempts=attempts)


def task(ident: int) -> Task:
    return Task(ident, {}, {}, seed=ident)


class Journal:
    """Records what the dispatcher notes and flushes, and what the transport had been sent at each flush."""

    def __init__(self, transport):
        self.transport, self.events = transport, []

    def sent(self, p, attempts):
        self.events.append(("sent", p.id, attempts))

    def done(self, ident):
        self.events.append(("done", ident))

    def flush(self):
        self.events.append(("flush", len(self.transport.sends)))


class Loopback:
    """Workers that answer in the order tasks were sent, each result when asked; ``poll`` gives the waiting ones."""

    def __init__(self, workers=2):
        self.workers = list(range(1, workers + 1))
        self.sends, self.waiting, self.drained = [], [], 0

    def send(self, worker, task):
        self.sends.append((worker, task.id))
        self.waiting.append((worker, Result(task.id, Evaluation(status="ok", fitness=0.5))))

    def receive(self, timeout=None, wants=None):
        return self.waiting.pop(0) if self.waiting else None

    def poll(self, wants=None):
        return self.receive()

    def drain(self):
        self.drained += 1


def fill(dispatch: Dispatcher, first: int, remaining: int = 100) -> list[int]:
    """Give tasks to free workers until none should take one; the workers, in order."""
    given, ident = [], first
    while (worker := dispatch.free_worker(remaining)) is not None:
        dispatch.send(worker, individual(ident), task(ident))
        given.append(worker)
        ident += 1
        remaining -= 1
    dispatch.flush()
    return given


def test_every_worker_gets_its_first_task_before_any_gets_a_second_and_tasks_go_out_only_when_flushed():
    transport = Loopback(workers=3)
    dispatch = Dispatcher(transport, depth=2, clock=lambda: 0.0, wall_clock=lambda: 0.0)
    worker = dispatch.free_worker(100)
    dispatch.send(worker, individual(0), task(0))
    assert transport.sends == [] and dispatch.inflight == 1  # held until the flush
    dispatch.flush()
    assert fill(dispatch, 1) == [2, 3, 1, 2, 3]
    assert [w for w, _ in transport.sends] == [1, 2, 3, 1, 2, 3] and dispatch.inflight == 6
    with pytest.raises(ValueError, match="worker rank 1 is not free"):
        dispatch.send(1, individual(9), task(9))


def test_a_worker_with_a_free_slot_may_take_a_task_out_of_turn_and_a_full_one_may_not():
    transport = Loopback(workers=3)
    dispatch = Dispatcher(transport, depth=1, clock=lambda: 0.0, wall_clock=lambda: 0.0)
    assert dispatch.has_slot(3) and dispatch.free_worker(100) == 1
    dispatch.send(3, individual(0), task(0))  # a promotion's holder, idle at a barrier, before worker 1 in turn
    assert not dispatch.has_slot(3) and list(dispatch.idle) == [1, 2]
    with pytest.raises(ValueError, match="worker rank 3 is not free"):
        dispatch.send(3, individual(1), task(1))
    dispatch.send(1, individual(1), task(1))
    dispatch.flush()
    assert [w for w, _ in transport.sends] == [3, 1]


def test_the_last_round_queues_nothing_behind_a_busy_worker():
    dispatch = Dispatcher(Loopback(workers=3), depth=2, clock=lambda: 0.0, wall_clock=lambda: 0.0)
    assert fill(dispatch, 0, remaining=5) == [1, 2, 3]  # 2 left for 3 workers: none is queued behind a training
    assert dispatch.queued() == 0


def test_results_come_back_with_their_tasks_and_a_queued_task_starts_when_the_one_before_it_returns():
    clock = VirtualClock()
    transport = SimulatedTransport({1: 1.0, 2: 3.0}, clock=clock, depth=2)
    dispatch = Dispatcher(transport, depth=2, clock=clock, wall_clock=clock)
    fill(dispatch, 0)  # worker 1: 0 then 2; worker 2: 1 then 3
    got = list(dispatch.results(0.2, lambda i, f: False, more=lambda: True))
    assert [(w, r.task_id, s.individual.id) for w, r, s in got] == [(1, 0, 0)]  # no poll: one result a turn
    assert clock.now == 1.0 and dispatch.out[1][0].individual.id == 2 and dispatch.out[1][0].since == 1.0
    assert dispatch.running() == [(1, 1.0), (2, 0.0)]


def test_a_hang_is_the_training_silent_past_the_limit_looked_for_at_most_once_a_second():
    clock = VirtualClock()
    dispatch = Dispatcher(Loopback(workers=3), depth=2, clock=clock, wall_clock=clock)
    fill(dispatch, 0)
    clock.now = 9.5
    assert dispatch.hung(None) is None and dispatch.hung(10.0) is None  # no limit; none silent for 10 s yet
    clock.now = 10.2
    assert dispatch.hung(10.0) is None  # silent past the limit, but looked at 0.7 s ago: not again within a second
    clock.now = 10.6
    worker, sent = dispatch.hung(10.0)
    assert (worker, sent.individual.id) == (1, 0)  # the first of the longest trainings


def test_a_turn_takes_the_results_already_waiting_up_to_a_batch_and_stops_when_told():
    transport = Loopback(workers=BATCH + 4)
    dispatch = Dispatcher(transport, depth=1, clock=lambda: 0.0, wall_clock=lambda: 0.0)
    fill(dispatch, 0)
    assert len(list(dispatch.results(0.0, None, more=lambda: True))) == BATCH
    taken = []
    for _ in dispatch.results(0.0, None, more=lambda: len(taken) < 2):
        taken.append(1)
    assert len(taken) == 2 and dispatch.inflight == 2


def test_a_result_for_another_task_than_the_oldest_its_worker_holds_is_a_bug_said_loudly():
    transport = Loopback(workers=1)
    dispatch = Dispatcher(transport, depth=2, clock=lambda: 0.0, wall_clock=lambda: 0.0)
    fill(dispatch, 0)
    transport.waiting.reverse()
    with pytest.raises(RuntimeError, match="returned evaluation 1, not 0"):
        list(dispatch.results(0.0, None, more=lambda: True))


def test_the_journal_notes_every_task_before_it_leaves_and_an_individual_done_once_it_is_recorded():
    transport = Loopback(workers=2)
    journal = Journal(transport)
    dispatch = Dispatcher(transport, depth=1, clock=lambda: 0.0, wall_clock=lambda: 0.0, journal=journal)
    dispatch.send(dispatch.free_worker(10), individual(0, attempts=1), task(0))
    dispatch.send(dispatch.free_worker(10), individual(1), task(1))
    dispatch.flush()
    assert journal.events == [("sent", 0, 2), ("sent", 1, 1), ("flush", 0)]  # noted, written, then sent
    transport.waiting[1] = (2, Result(1, failed_evaluation("dropped", SKIPPED)))
    list(dispatch.results(0.0, None, more=lambda: True))
    assert journal.events[3:] == [("flush", 2)]  # results back are not yet records (a fold of several, a skipped one)
    dispatch.finished(0)  # the loop recorded individual 0
    assert journal.events[4:] == [("done", 0)]


def test_the_journal_counts_a_job_death_against_a_queued_task_only_once_it_starts():
    transport = Loopback(workers=1)
    journal = Journal(transport)
    dispatch = Dispatcher(transport, depth=2, clock=lambda: 0.0, wall_clock=lambda: 0.0, journal=journal)
    fill(dispatch, 0)  # 0 trains, 1 is queued behind it
    assert journal.events == [("sent", 0, 1), ("sent", 1, 0), ("flush", 0)]
    next(dispatch.results(0.0, None, more=lambda: False))  # 0 is back: its worker starts 1 now
    assert journal.events[3:] == [("flush", 2), ("sent", 1, 1)]


def test_a_drain_drops_only_the_queued_tasks_and_a_transport_that_cannot_is_left_alone():
    transport = Loopback(workers=2)
    dispatch = Dispatcher(transport, depth=2, clock=lambda: 0.0, wall_clock=lambda: 0.0)
    fill(dispatch, 0)
    assert dispatch.queued() == 2 and dispatch.drop_queued() == 2 and transport.drained == 1
    del Loopback.drain
    try:
        assert dispatch.drop_queued() == 0 and transport.drained == 1
    finally:
        Loopback.drain = lambda self: setattr(self, "drained", self.drained + 1)


def test_what_is_outstanding_at_a_death_counts_the_trainings_not_the_queued():
    clock = VirtualClock()
    dispatch = Dispatcher(Loopback(workers=2), depth=2, clock=clock, wall_clock=clock)
    for ident, attempts in enumerate((0, 1, 0, 0)):
        dispatch.send(dispatch.free_worker(10), individual(ident, attempts), task(ident))
    every = {p.id: p.attempts for p in dispatch.outstanding(lambda worker: 1)}
    assert every == {0: 1, 1: 2, 2: 0, 3: 0}  # 2 and 3 are queued behind 0 and 1: never to blame
    hung = {p.id: p.attempts for p in dispatch.outstanding(lambda worker: 1 if worker == 1 else 0)}
    assert hung == {0: 1, 1: 1, 2: 0, 3: 0}  # only worker 1's training is to blame
    assert {p.id for p in dispatch.outstanding(lambda worker: 0)} == {0, 1, 2, 3}
