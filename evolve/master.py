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

import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ensemble.hall_of_fame import HallOfFame, Member
from ensemble.select import Selection

from .ga import GAParams
from .protocol import Result, Task, Transport
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


_MASK64 = (1 << 64) - 1


def task_seed(search_seed: int, ident: int) -> int:
    """The torch seed of evaluation ``ident``: fixed by the search seed and the id alone.

    splitmix64 of the pair: well mixed, and a microsecond where numpy's SeedSequence takes 25.
    """
    z = (search_seed * 0x9E3779B97F4A7C15 + ident + 1) * 0x9E3779B97F4A7C15 & _MASK64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK64
    return (z ^ (z >> 31)) >> 32  # 32 bits, as torch.manual_seed and numpy take them


def run_search(
    state: SearchState,
    transport: Transport,
    space: SearchSpace,
    settings: SearchSettings,
    *,
    checkpoint: Callable[[SearchState], None] | None = None,
    on_result: Callable[[Record, SearchState], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    poll_seconds: float = 0.2,
) -> bool:
    """Evaluate until ``settings.budget`` evaluations are recorded; True if finished, False if stopped.

    On a stop, the individuals still out are left in ``state.pending`` and are sent
    again first when the search resumes.
    """
    strategy = make_strategy(settings.mode, space, settings.ga, state.rng, state.records, state.pending, state.strategy,
                             objective=settings.objective)
    # Early stopping follows results in the order they arrive, so a generational search (whose
    # results must not depend on that order) never uses it.
    rule = _Bars(MedianRule(state.records), len(state.records)) if settings.early_stopping and settings.mode == "async" else None
    # Workers time inference only when the search needs it (ensemble.train.Watch.measure_latency).
    measure_latency = settings.mode == "nsga2" and settings.objective == "latency"
    redo = deque(_redone(p) for p in state.pending)
    state.pending = []
    idle = deque(transport.workers)
    inflight: dict[int, tuple[Pending, Task, float, float]] = {}  # worker -> (individual, task, dispatched (clock), (wall))
    hall = state.hall_of_fame
    hall.grow(settings.candidates)  # a resume may ask for more candidates; members kept are never dropped
    loop_start, capacity_before = clock(), state.capacity_seconds
    last_checkpoint = clock()

    def account() -> None:
        state.capacity_seconds = capacity_before + len(transport.workers) * (clock() - loop_start)

    def outstanding() -> list[Pending]:
        """Sent out but not back, then not yet re-sent: what a resume must redo first."""
        return [p for p, _, _, _ in inflight.values()] + list(redo)

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

    def save_point() -> None:
        account()
        state.pending = outstanding()
        state.strategy = strategy.to_state()

    # The settings go out as the genome's key (Task.from_key): the master never builds them, except
    # for a network that enters the hall of fame. Epochs is a gene the key holds like any other.
    epochs_at = space.names.index("epochs")
    time_limit, warmup, seed = settings.eval_timeout, settings.warmup, settings.seed
    wants = lambda ident, fitness: hall.qualifies(fitness, ident)  # noqa: E731
    records, budget, send, receive, tell = state.records, settings.budget, transport.send, transport.receive, strategy.tell
    stopped, unsaved = False, False
    while True:
        stopped = stopped or should_stop()
        while idle and not stopped and len(records) + len(inflight) < budget:
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
            send(worker, task)
            inflight[worker] = (individual, task, clock(), wall_clock())
        if not inflight or stopped:
            break  # the caller writes the final checkpoint
        if checkpoint is not None and unsaved and clock() - last_checkpoint >= settings.checkpoint_seconds:
            # Written after the free workers have their next task, so none idles during the write.
            save_point()
            checkpoint(state)
            state.pending = []
            last_checkpoint, unsaved = clock(), False
        got = receive(timeout=poll_seconds, wants=wants)
        if got is None:
            continue
        worker, result = got
        individual, task, dispatched, started = inflight.pop(worker)
        idle.append(worker)
        state.busy_seconds += clock() - dispatched
        record = _record(individual, result, worker, started, wall_clock())
        records.append(record)
        ev = result.evaluation
        tell(record)
        if rule is not None:
            rule.tell(record)
        if record.status == "ok" and ev.has_payload:
            hall.offer(Member(record.id, record.fitness, task.network, task.training, ev.val_pred, ev.test_pred, ev.weights or {}))
        unsaved = True
        if on_result is not None:
            on_result(record, state)

    now = clock()
    state.busy_seconds += sum(now - dispatched for _, _, dispatched, _ in inflight.values())
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
    return Pending(individual.id, individual.genome, individual.parents, f"{individual.operators}+redo")


def _record(individual: Pending, result: Result, worker: int, started: float, finished: float) -> Record:
    ev = result.evaluation
    return Record(
        id=individual.id,
        genome=list(individual.genome),
        parents=tuple(individual.parents),
        status=ev.status,
        fitness=float(ev.fitness),
        metrics={k: float(v) for k, v in ev.metrics.items()},
        seconds=float(ev.seconds),
        epochs_done=int(ev.epochs_done),
        worker=worker,
        started=started,
        finished=finished,
        message=ev.message,
        operators=individual.operators,
        curve=[float(f) for f in ev.curve],
    )
