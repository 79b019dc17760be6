"""The master's search loop: keep every worker busy, remember everything.

:func:`run_search` is a plain function over explicit state (:class:`SearchState`)
and an injected :class:`~evolve.protocol.Transport`, so the same loop runs over
MPI, in one process in the tests, and under a simulator. It owns dispatch: the
moment a worker returns a result it gets the next individual. What that
individual is, a strategy decides (:mod:`evolve.strategy`: steady-state
``async``, ``generational`` with a barrier per generation, or ``nsga2``: generational
with a second objective).

Every result becomes a :class:`Record`. A result that enters the hall of fame
arrives whole (predictions and weights) and is kept there; the hall's entry bar
goes out with every task, and the master asks for a payload only when it
arrives, so everything else arrives as a small header.
"""
from __future__ import annotations

import gc
import math
import random
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from ensemble.hall_of_fame import HallOfFame, Member
from ensemble.select import Selection

from .ga import GAParams
from .protocol import SKIPPED, Result, Task, Transport
from .early_stop import MedianRule
from .records import Pending, Record
from .space import SearchSpace
from .strategy import make_strategy


@dataclass
class SearchState:
    rng: random.Random
    records: list[Record] = field(default_factory=list)
    strategy: dict = field(default_factory=dict)  # the strategy's own state, plain JSON (see evolve.strategy)
    pending: list[Pending] = field(default_factory=list)
    hall_of_fame: HallOfFame = field(default_factory=lambda: HallOfFame(32))
    selection: Selection | None = None  # the ensemble chosen from the hall of fame, as last saved
    next_id: int = 0
    busy_seconds: float = 0.0  # summed over workers: time with a task in hand
    capacity_seconds: float = 0.0  # summed over workers: time in the search loop
    workers_busy: int = 0  # when run_search returns: workers still training (not saved)

    @classmethod
    def fresh(cls, seed: int, candidates: int = 32) -> SearchState:
        return cls(rng=random.Random(seed), hall_of_fame=HallOfFame(candidates))

    def by_id(self) -> dict[int, Record]:
        return {r.id: r for r in self.records}

    @property
    def population(self) -> list[int]:
        """Record ids of the strategy's current population."""
        return list(self.strategy.get("population", []))

    @property
    def utilization(self) -> float:
        return self.busy_seconds / self.capacity_seconds if self.capacity_seconds > 0 else 0.0


@dataclass(frozen=True)
class SearchSettings:
    budget: int  # total evaluations, across resumes
    ga: GAParams
    candidates: int  # hall of fame capacity
    seed: int
    checkpoint_seconds: float = 10.0
    mode: str = "async"  # the strategy: "async", "generational" or "nsga2" (evolve.strategy)
    objective: str = "params"  # nsga2's second objective, minimised: "params" or "latency" (evolve.strategy.OBJECTIVES)
    early_stopping: bool = False  # the median stopping rule (evolve.early_stop); async mode only
    warmup: int = 2  # ... never before this many epochs
    eval_timeout: float = 0.0  # seconds a training may take; 0: no limit
    drain_seconds: float = 0.0  # after a stop request, how long to wait for the trainings running (0: not at all)
    hang_seconds: float = 0.0  # a worker silent for eval_timeout plus this long is hung (0, or no eval_timeout: never)
    prefetch: int = 0  # tasks each worker holds queued behind the one it trains (0: a task goes out when its worker is free)


_MASK64 = (1 << 64) - 1


def task_seed(search_seed: int, ident: int) -> int:
    """The torch seed of evaluation ``ident``: fixed by the search seed and the id alone.

    splitmix64 of the pair: well mixed, and a microsecond where numpy's SeedSequence takes 25.
    """
    z = (search_seed * 0x9E3779B97F4A7C15 + ident + 1) * 0x9E3779B97F4A7C15 & _MASK64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK64
    return (z ^ (z >> 31)) >> 32  # 32 bits, as torch.manual_seed and numpy take them


CRASHED_MESSAGE = "in flight when 2 jobs ended; not sent again"
MAX_ATTEMPTS = 2  # an individual out at this many job deaths is recorded as "crashed" instead of sent again


class HungWorker(Exception):
    """A worker said nothing for its training's time limit plus ``settings.hang_seconds``.

    Raised by :func:`run_search` after it has left the search in ``state`` ready to checkpoint (the
    hung worker's individual counted as out at a job's end, the others not).
    """

    def __init__(self, worker: int, ident: int, seconds: float):
        super().__init__(f"worker rank {worker} has not answered for {seconds:.0f} s (evaluation {ident})")
        self.worker, self.ident, self.seconds = worker, ident, seconds


class Journal(Protocol):
    """Where the master notes each dispatch and each result between checkpoints (see
    :class:`evolve.inflight.InFlightLog`), so a job that dies knows what was out."""

    def sent(self, individual: Pending, attempts: int) -> None: ...  # noted: goes out after the next flush

    def done(self, ident: int) -> None: ...  # noted

    def flush(self) -> None: ...  # tasks noted are about to go out, or the master is about to wait: write what is noted now


BATCH = 16  # at most this many results taken in one loop turn (those already waiting, with a transport that says so)


def run_search(
    state: SearchState,
    transport: Transport,
    space: SearchSpace,
    settings: SearchSettings,
    *,
    checkpoint: Callable[[SearchState], None] | None = None,
    on_result: Callable[[Record, SearchState], None] | None = None,
    should_stop: Callable[[], int] = lambda: 0,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    poll_seconds: float = 0.2,
    journal: Journal | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> bool:
    """Evaluate until ``settings.budget`` evaluations are recorded; True if finished, False if stopped.

    ``should_stop()`` counts stop requests (signals). At the first, no more individuals go out; the
    trainings running are waited for, and recorded, for up to ``settings.drain_seconds``; a second
    request ends the wait. The individuals still out are left in ``state.pending`` and are sent
    again first when the search resumes.

    An individual in ``state.pending`` carries how many job deaths it was out at (``attempts``): one
    out at :data:`MAX_ATTEMPTS` is recorded as ``"crashed"`` and never sent again, so a network that
    kills its worker (and with it the job) cannot stop a resumed search from finishing. A checkpoint
    written while trainings run counts each individual out as out at one more death (if the job dies
    before the next checkpoint, it was); the last checkpoint of a job that ends in order does not.

    Raises :class:`HungWorker` when a worker has been silent for its training's time limit plus
    ``settings.hang_seconds`` (only with a time limit), after leaving ``state`` ready to checkpoint.
    """
    with _history_frozen():
        return _search(state, transport, space, settings, checkpoint, on_result, should_stop, clock, wall_clock, poll_seconds,
                       journal, say)


YOUNG_COLLECTION = 50_000  # the collector's first threshold while a search runs (Python's default: 700)


@contextmanager
def _history_frozen():
    """Keep Python's cyclic garbage collector off the search's history while the search runs.

    The history only grows (every record, every hall member stays), and a full collection walks all
    of it: at a million records some 350 ms (measured on the 2-core VM), every time the collector's counts say so. So what is
    alive when the search starts, and after each checkpoint, is moved out of its reach
    (``gc.freeze``); it still goes when nothing refers to it. A cycle of garbage frozen this way is
    freed when the search returns (``gc.unfreeze``, unless the caller had frozen objects itself).

    The young objects are collected less often (:data:`YOUNG_COLLECTION` allocations apart, not 700):
    the loop makes no reference cycles (a search of 24,608 evaluations leaves 634 objects of cyclic
    garbage, all from setting it up), so a young collection only walks the records and members made
    since the last one. Every 700 allocations that cost 1.3-1.5 us an evaluation of bench_master.py's
    search in one process (the 2-core VM); every 50,000 nothing, as ``gc.freeze`` at each checkpoint
    resets the count first.
    """
    mine = gc.get_freeze_count() == 0  # a caller who froze objects of their own keeps them frozen
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(thresholds[0], YOUNG_COLLECTION), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if mine:
            gc.unfreeze()


def _search(state: SearchState, transport: Transport, space: SearchSpace, settings: SearchSettings, checkpoint, on_result,
            should_stop, clock, wall_clock, poll_seconds, journal, say) -> bool:
    strategy = make_strategy(settings.mode, space, settings.ga, state.rng, state.records, state.pending, state.strategy,
                             objective=settings.objective)
    # Early stopping follows results in the order they arrive, so a generational search (whose
    # results must not depend on that order) never uses it.
    rule = _Bars(MedianRule(state.records), len(state.records)) if settings.early_stopping and settings.mode == "async" else None
    # Workers time inference only when the search needs it (ensemble.train.Watch.measure_latency).
    measure_latency = settings.mode == "nsga2" and settings.objective == "latency"
    records, budget, send, receive, tell = state.records, settings.budget, transport.send, transport.receive, strategy.tell
    poll = getattr(transport, "poll", None)  # optional: a result already waiting, or None, never waiting
    redo: deque[Pending] = deque()
    for p in state.pending:
        if p.attempts < MAX_ATTEMPTS:
            redo.append(_redone(p))
            continue
        now = wall_clock()
        crashed = Record(p.id, list(p.genome), tuple(p.parents), "crashed", float("-inf"), {}, 0.0, 0, -1, now, now,
                         CRASHED_MESSAGE, p.operators)
        say(f"warning: evaluation {p.id} was in flight when {p.attempts} jobs ended; recorded as crashed, not sent again")
        records.append(crashed)
        tell(crashed)
        if rule is not None:
            rule.tell(crashed)
        if on_result is not None:
            on_result(crashed, state)
    state.pending = []
    # Each worker holds up to 1 + prefetch tasks: the one it trains and those queued behind it, which it
    # starts the moment it sends a result, without waiting for the master's answer. ``idle`` has a slot
    # for every task a worker could take now (all workers' first tasks before any second), ``out`` each
    # worker's tasks in the order sent (its results come back in that order): (individual, task,
    # started (clock), (wall)), the times of a queued task set again when it starts, when the one
    # before it comes back.
    # Only in async mode (a generation's barrier would leave its last children queued behind busy
    # workers while others idle) and over a transport whose workers queue (``queues``: MPI's, the
    # simulations'; in one process a queued task gains nothing and is bred from an older population).
    depth = 1 + settings.prefetch if settings.mode == "async" and getattr(transport, "queues", False) else 1
    idle = deque(w for _ in range(depth) for w in transport.workers)
    out: dict[int, deque[tuple[Pending, Task, float, float]]] = {w: deque() for w in transport.workers}
    inflight = 0  # tasks out, running or queued
    hall = state.hall_of_fame
    hall.grow(settings.candidates)  # a resume may ask for more candidates; members kept are never dropped
    loop_start, capacity_before = clock(), state.capacity_seconds
    last_checkpoint = clock()

    def account() -> None:
        state.capacity_seconds = capacity_before + len(transport.workers) * (clock() - loop_start)

    def outstanding(deaths: Callable[[int], int], queued: bool = True) -> list[Pending]:
        """Sent out but not back, then not yet re-sent: what a resume must redo first; ``deaths(worker)``
        is what being out now adds to an individual's attempts, to the one its worker trains and, with
        ``queued``, to those queued behind it (at a checkpoint: one may start, and kill the job, before
        the next; not at a hang: the worker will never start them)."""
        # (5x faster than dataclasses.replace: 7 against 37 ms for 27,648 out)
        pending = [Pending(p.id, p.genome, p.parents, p.operators, p.attempts + (deaths(w) if queued or k == 0 else 0))
                   for w, tasks in out.items() for k, (p, _, _, _) in enumerate(tasks)]
        return pending + list(redo)

    def running() -> list[tuple[int, float]]:
        """(worker, when its training started) of every worker training."""
        return [(w, tasks[0][2]) for w, tasks in out.items() if tasks]

    def propose() -> tuple[Pending, tuple] | None:
        """The next individual and its key (what it decodes to: see SearchSpace.key)."""
        if redo:
            individual = redo.popleft()
            return individual, space.key(individual.genome)
        proposal = strategy.ask()
        if proposal is None:
            return None  # the strategy waits for results (a generation's barrier)
        state.next_id += 1
        return Pending(state.next_id - 1, proposal.genome, proposal.parents, proposal.operators), proposal.key

    def save_point(deaths: Callable[[int], int] = lambda worker: 0, queued: bool = True) -> None:
        account()
        state.pending = outstanding(deaths, queued)
        state.strategy = strategy.to_state()

    # The settings go out as the genome's key (Task.from_key): the master never builds them, except
    # for a network that enters the hall of fame. Epochs is a gene the key holds like any other.
    epochs_at = space.names.index("epochs")
    time_limit, warmup, seed = settings.eval_timeout, settings.warmup, settings.seed
    # a worker silent this long after its task went out is hung (no time limit: no bound to judge by)
    hung_after = time_limit + settings.hang_seconds if time_limit > 0 and settings.hang_seconds > 0 else None
    wants = lambda ident, fitness: hall.qualifies(fitness, ident)  # noqa: E731
    stopped, unsaved = False, False
    drain_until: float | None = None  # while draining: when to give up on the trainings still out
    next_hang_check = clock()
    sending: list[tuple[int, Task]] = []  # the tasks of one loop turn: noted in the journal, then sent
    while True:
        requests = should_stop()
        if requests and not stopped:
            stopped = True
            if inflight and settings.drain_seconds > 0 and requests < 2:
                drained_from, recorded_before = len(running()), len(records)
                drain_until, drain_start = clock() + settings.drain_seconds, clock()
                queued = inflight - drained_from if hasattr(transport, "drain") else 0
                say(f"draining: waiting up to {settings.drain_seconds:g} s for {drained_from} trainings"
                    + (f"; {queued} queued behind them {'is' if queued == 1 else 'are'} dropped unless started, to be redone on resume"
                       if queued else ""))
                if queued:
                    transport.drain()  # the tasks queued behind the trainings come back skipped
                if checkpoint is not None and unsaved:  # what was done before the signal is safe at once, should
                    save_point(lambda worker: 1)        # the job be killed (Slurm's KillWait) during the drain
                    checkpoint(state)
                    state.pending = []
                    last_checkpoint, unsaved = clock(), False
        elif requests >= 2 and drain_until is not None:
            say(f"draining: a second signal; stopping now with {len(running())} of {drained_from} trainings still out "
                "(they are redone on resume)")
            break
        while idle and not stopped and len(records) + inflight < budget:
            if out[idle[0]] and budget - len(records) - inflight <= len(out):
                idle.popleft()  # the last round: a task queued behind another would leave a free worker idle
                continue
            proposed = propose()
            if proposed is None:
                break
            individual, key = proposed
            worker = idle.popleft()
            if rule is not None:
                watch = {"time_limit": time_limit, "stop_below": rule.bars(key[epochs_at]), "warmup": warmup}
            else:
                watch = {"time_limit": time_limit}
            if measure_latency:
                watch["measure_latency"] = True
            task = Task.from_key(individual.id, space, key, task_seed(seed, individual.id), hall.entry_bar(), watch)
            if journal is not None:
                journal.sent(individual, individual.attempts + 1)
            out[worker].append((individual, task, clock(), wall_clock()))
            inflight += 1
            sending.append((worker, task))
        if sending:
            if journal is not None:
                journal.flush()  # every task noted before any goes out: one write for all of them
            for worker, task in sending:
                send(worker, task)
            sending.clear()
        if not inflight:
            if drain_until is not None:
                say(f"draining: all {len(records) - recorded_before} trainings recorded in {clock() - drain_start:.1f} s")
            break  # the caller writes the final checkpoint
        if stopped and drain_until is None:
            break
        now = clock()
        if drain_until is not None and now >= drain_until:
            say(f"draining: {len(running())} of {drained_from} trainings still out after {settings.drain_seconds:g} s "
                "(they are redone on resume)")
            break
        if hung_after is not None and now >= next_hang_check:
            next_hang_check = now + 1.0  # once a second: a look at every worker out
            worker, since = min(running(), key=lambda wd: wd[1])
            if now - since > hung_after:
                ident = out[worker][0][0].id
                state.busy_seconds += sum(now - d for _, d in running())
                save_point(lambda w: 1 if w == worker else 0, queued=False)  # the hung individual is to blame, the others not
                raise HungWorker(worker, ident, now - since)
        if checkpoint is not None and unsaved and now - last_checkpoint >= settings.checkpoint_seconds:
            # Written after the free workers have their next task, so none idles during the write. Each
            # individual out counts as out at one more job death, in case this job dies before the next.
            save_point(lambda worker: 1)
            checkpoint(state)
            state.pending = []
            last_checkpoint, unsaved = clock(), False
            gc.freeze()  # what lives now is history (see _history_frozen)
        timeout = poll_seconds if drain_until is None else max(0.0, min(poll_seconds, drain_until - now))
        if journal is not None:
            journal.flush()
        got = receive(timeout=timeout, wants=wants)
        taken = 0
        while got is not None:
            worker, result = got
            tasks = out[worker]
            individual, task, dispatched, started = tasks.popleft()
            if individual.id != result.task_id:
                raise RuntimeError(f"worker rank {worker} returned evaluation {result.task_id}, not {individual.id}, the oldest it holds")
            idle.append(worker)
            inflight -= 1
            now, finished = clock(), wall_clock()
            if tasks:  # the worker starts its next task now
                p, t, _, _ = tasks[0]
                tasks[0] = (p, t, now, finished)
            ev = result.evaluation
            if ev.status == SKIPPED:  # dropped from its worker's queue at a drain: it never ran
                redo.append(individual)
                got = poll(wants) if poll is not None and inflight else None
                continue
            state.busy_seconds += now - dispatched
            record = _record(individual, result, worker, started, finished)
            records.append(record)
            if journal is not None:
                journal.done(record.id)
            tell(record)
            if rule is not None:
                rule.tell(record)
            if record.status == "ok" and ev.has_payload:
                hall.offer(Member(record.id, record.fitness, task.network, task.training, ev.val_pred, ev.test_pred, ev.weights or {}))
            unsaved = True
            if on_result is not None:
                on_result(record, state)
            # Results already waiting are taken in the same turn (their workers' next tasks then go out
            # with one journal write), unless a checkpoint is due: it is written after every result
            # when checkpoint_seconds is 0.
            taken += 1
            if poll is None or taken >= BATCH or not inflight or (
                    checkpoint is not None and clock() - last_checkpoint >= settings.checkpoint_seconds):
                break
            got = poll(wants)

    now = clock()
    trainings = running()
    state.busy_seconds += sum(now - since for _, since in trainings)
    state.workers_busy = len(trainings)
    save_point()
    return not stopped


class _Bars:
    """The early-stopping bars tasks carry (:meth:`MedianRule.bars`), rebuilt only as often as they can move.

    A bar is the median of thousands of values late in a search; one more result moves it by half a
    rank at most. So the bars are rebuilt after every result while fewer than 64 are known, and then
    once per ``n // 64`` new results: a task's bars always reflect all but at most 1/64 of the results
    told so far (a bar that the trainings still running will move anyway). Each length is built once
    per rebuild, not once per task.
    """

    def __init__(self, rule: MedianRule, told: int):
        self.rule, self.told = rule, told
        self.built_at = -1
        self.cache: dict[int, tuple[float, ...]] = {}

    def tell(self, record: Record) -> None:
        self.rule.tell(record)
        self.told += 1

    def bars(self, epochs: int) -> tuple[float, ...]:
        if self.told - self.built_at > self.told >> 6:
            self.cache.clear()
            self.built_at = self.told
        bars = self.cache.get(epochs)
        if bars is None:
            bars = self.cache[epochs] = self.rule.bars(epochs)
        return bars


def _redone(individual: Pending) -> Pending:
    """An individual sent again after a stop: its lineage says so."""
    if individual.operators.endswith("+redo"):
        return individual
    return replace(individual, operators=f"{individual.operators}+redo")


def _record(individual: Pending, result: Result, worker: int, started: float, finished: float) -> Record:
    ev = result.evaluation
    status, fitness, message = ev.status, float(ev.fitness), ev.message
    if status == "ok" and not math.isfinite(fitness):  # a worker's bug must not put NaN into the search
        status, fitness, message = "error", -math.inf, f"the worker returned a fitness of {fitness}"
    return Record(individual.id, list(individual.genome), tuple(individual.parents), status, fitness,
                  {k: float(v) for k, v in ev.metrics.items()}, float(ev.seconds), int(ev.epochs_done), worker, started,
                  finished, message, individual.operators, [float(f) for f in ev.curve])
