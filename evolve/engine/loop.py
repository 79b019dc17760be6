"""The master's search loop: keep every worker busy, remember everything.

:func:`run_search` reads like DEAP's ``eaSimple``: fill the idle workers, checkpoint when due, take
a result, record it, tell the strategy, offer it to the hall of fame. It is a plain function over
explicit state (:class:`~evolve.engine.state.SearchState`), the run's typed
:class:`~evolve.config.schema.Config`, and an injected :class:`~evolve.transport.protocol.Transport`,
so the same loop runs over MPI, in one process in the tests, and under a simulator. What to train
next, a strategy decides (:mod:`evolve.search.strategy`); which worker takes it, and what is out,
the :class:`~evolve.engine.dispatch.Dispatcher` keeps.

A result that enters the hall of fame arrives whole (predictions and weights) and is kept there; the
hall's entry bar goes out with every task, and the master asks for a payload only when it arrives,
so everything else arrives as a small header.
"""
from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ensemble.contribution import EnsembleValue
from ensemble.hall_of_fame import OPEN, Member
from ensemble.problem import Problem
from ensemble.results import failed_evaluation
from evolve.config.schema import Config
from evolve.search.early_stop import BarCache, MedianRule
from evolve.search.records import Pending, Record, network_of
from evolve.search.space import SearchSpace
from evolve.search.tally import Tally, planned_epochs
from evolve.search.registry import Context, capabilities, make_strategy
from evolve.transport.protocol import SKIPPED, Result, Task, Transport

from . import memory
from .dispatch import Dispatcher, Journal, Sent
from .evaluations import WHOLE, Evaluations, FoldPlan, Open, is_refit
from .promotion import HELD_ELSEWHERE, HOLDERS_MAX, HOLDERS_PER_WORKER, Genomes, Halving
from .state import SearchState

CRASHED_MESSAGE = "in flight when 2 jobs ended; not sent again"
MAX_ATTEMPTS = 2  # an individual out at this many job deaths is recorded as "crashed" instead of sent again
YOUNG_COLLECTION = 50_000  # the garbage collector's first threshold while a search runs (Python's default: 700)
_MASK64 = (1 << 64) - 1


def task_seed(search_seed: int, ident: int, part: int = 0) -> int:
    """The torch seed of evaluation ``ident`` (of its fold ``part - 1``, for a fold training): fixed by the search
    seed, the id and the part alone (splitmix64)."""
    z = (search_seed * 0x9E3779B97F4A7C15 + (ident ^ (part << 40)) + 1) * 0x9E3779B97F4A7C15 & _MASK64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & _MASK64
    return (z ^ (z >> 31)) >> 32  # 32 bits, as torch.manual_seed and numpy take them


class HungWorker(Exception):
    """A worker said nothing for its training's time limit plus ``search.hang_seconds``.

    Raised by :func:`run_search` after it has left the search in ``state`` ready to checkpoint (the
    hung worker's individual counted as out at a job's end, the others not).
    """

    def __init__(self, worker: int, ident: int, seconds: float):
        super().__init__(f"worker rank {worker} has not answered for {seconds:.0f} s (evaluation {ident})")
        self.worker, self.ident, self.seconds = worker, ident, seconds


def run_search(
    state: SearchState,
    transport: Transport,
    space: SearchSpace,
    config: Config,
    *,
    checkpoint: Callable[[SearchState], None] | None = None,
    on_result: Callable[[Record, SearchState], None] | None = None,
    should_stop: Callable[[], int] = lambda: 0,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    poll_seconds: float = 0.2,
    journal: Journal | None = None,
    say: Callable[[str], None] = lambda line: None,
    validation: tuple[Problem, np.ndarray] | None = None,
    folds: FoldPlan | None = None,
    genomes: Genomes | None = None,
    proposed=None,
) -> bool:
    """Evaluate until ``config.search.evaluations`` evaluations are recorded; True if finished, False if stopped.

    ``should_stop()`` counts stop requests (signals). At the first, no more individuals go out; the
    trainings running are waited for, and recorded, for up to ``search.drain_seconds``; a second
    request ends the wait. The individuals still out are left in ``state.pending`` and are sent
    again first when the search resumes.

    An individual in ``state.pending`` carries how many job deaths it was out at (``attempts``): one
    out at :data:`MAX_ATTEMPTS` is recorded as ``"crashed"`` and never sent again, so a network that
    kills its worker (and with it the job) cannot stop a resumed search from finishing. A checkpoint
    written while trainings run counts each individual out as out at one more death (if the job dies
    before the next checkpoint, it was); the last checkpoint of a job that ends in order does not.

    Raises :class:`HungWorker` when a worker has been silent for its training's time limit plus
    ``search.hang_seconds`` (only with a time limit), after leaving ``state`` ready to checkpoint.

    ``validation`` (the problem and the validation labels) is what ``search.selection = "ensemble"``
    values individuals on; that selection needs it. ``folds`` (``data.folds``): each network is evaluated
    by that many fold trainings (:mod:`evolve.engine.evaluations`); None: by one training. ``genomes``: where
    ``search.promotion`` keeps the paused networks' genomes (evolve.runfile.genomes: a file beside the run's state
    file, which the caller syncs before each checkpoint); None: in memory. ``proposed``: where the checkpoints keep the
    networks proposed (evolve.runfile.proposed: a file beside the state file that each checkpoint's memory appends to,
    and the caller syncs); None: in the memory, whole.
    """
    search = _Search(state, transport, space, config, checkpoint, on_result, say, clock, wall_clock, journal, validation, folds, genomes,
                     proposed)
    with _history_frozen():
        return search.run(should_stop, poll_seconds)


def _ensemble_value(state: SearchState, config: Config, validation) -> EnsembleValue | None:
    """What ``search.selection = "ensemble"`` selects by: each individual's value to the ensemble the run
    would choose from its hall of fame now (as evens run chooses it); None for selection by fitness."""
    if config.search.selection != "ensemble":
        return None
    if validation is None:
        raise ValueError("search.selection = \"ensemble\" needs the validation labels (run_search's validation)")
    problem, val_y = validation
    choose = lambda members: config.choose_ensemble(members, problem, val_y)  # noqa: E731, never the test split
    return EnsembleValue(state.hall_of_fame, problem, val_y, choose, config.ensemble.size)


def uses_median_rule(search) -> bool:
    """Does the search stop trainings by the median rule? Early stopping follows results in the order they arrive,
    so a strategy whose proposals must not depend on that order (a generational one) never uses it; with promotion,
    only if asked for within stages."""
    return bool(search.early_stopping and capabilities(search.mode).order_matters and (not search.promotion or search.stage_early_stopping))


@dataclass
class _Drain:
    """A stop request with trainings running: wait for them, up to a deadline."""

    until: float
    since: float
    trainings: int  # running when it began
    recorded_before: int


class _Search:
    """One session of :func:`run_search`: its parts, and the steps of its loop."""

    def __init__(self, state: SearchState, transport: Transport, space: SearchSpace, config: Config, checkpoint, on_result, say,
                 clock, wall_clock, journal, validation, folds, genomes=None, proposed=None):
        self.state, self.space, self.search = state, space, config.search
        self.checkpoint, self.on_result, self.say, self.clock, self.wall_clock = checkpoint, on_result, say, clock, wall_clock
        search = self.search
        caps = capabilities(search.mode)
        # a resume that read no history (checkpoint.load(history=False)) carries on from the parts' memory instead
        carried = memory.carried(state)
        remembered = carried or {}
        if carried is not None and not memory.resumable(remembered, search, uses_median_rule(search)):
            raise ValueError("this search state holds no history and no memory its settings can carry on from; load its run "
                             "file with its history (checkpoint.load)")
        self.strategy = make_strategy(search.mode, Context(space, search, state.rng, state.records, state.pending, state.strategy,
                                                           search.second_objective, _ensemble_value(state, config, validation),
                                                           memory.part(remembered, "strategy")))
        if proposed is not None and hasattr(self.strategy, "keep_proposed_in"):
            self.strategy.keep_proposed_in(proposed)
        self.bars = (BarCache(MedianRule.restored(memory.part(remembered, "median")) if remembered else MedianRule(state.records),
                              state.recorded) if uses_median_rule(search) else None)
        self.halving = None  # rungs and promotions (successive halving)
        if search.promotion:
            self.halving = Halving.restored(search, memory.part(remembered, "halving"), state.pending, genomes) if remembered \
                else Halving.of(search, state, genomes)
            self.halving.holders_max = max(HOLDERS_MAX, HOLDERS_PER_WORKER * len(transport.workers))
        self.folds = folds.folds if folds is not None else 1
        if state.tally is None:  # a new search, or a run file from before the account was kept
            state.tally = Tally.of(state.records, space, self.halving.rungs if self.halving is not None else 0, self.folds)
        # Workers queue tasks only without a barrier (a generation's would leave its last children queued behind
        # busy workers while others idle), over a transport whose workers queue (in one process it gains nothing).
        depth = 1 + search.prefetch if not caps.barrier and getattr(transport, "queues", False) else 1
        self.dispatch = Dispatcher(transport, depth, clock, wall_clock, journal)
        self.transport = transport
        self.hall = state.hall_of_fame
        self.hall.grow(config.ensemble.candidates)  # a resume may ask for more candidates; members kept are never dropped
        self.evaluations = Evaluations(folds)  # networks being evaluated, each one task or one per fold
        self.watch = {"time_limit": search.eval_timeout_seconds}
        self.epochs_at = space.names.index("epochs")  # the key holds epochs like any other gene
        if caps.objectives == 2 and search.second_objective == "latency":
            self.watch["measure_latency"] = True  # workers time inference only when the search needs it
        # a worker silent this long after its training started is hung (no time limit: no bound to judge by)
        timeout, grace = search.eval_timeout_seconds, search.hang_seconds
        self.hung_after = timeout + grace if timeout > 0 and grace > 0 else None
        self.stopped, self.unsaved = False, False
        self.drain: _Drain | None = None
        self.loop_start, self.capacity_before = clock(), state.capacity_seconds
        self.session_started = wall_clock()
        self.last_checkpoint = clock()

    # --- the loop ------------------------------------------------------------------------------

    def run(self, should_stop: Callable[[], int], poll_seconds: float) -> bool:
        """Fill the idle workers, checkpoint when due, take the results as they come; until the budget is
        spent, or a stop ends the session (after the drain, if there is one). True if the search finished."""
        self.take_pending()
        while not self.stop_requested(should_stop()):
            if not self.stopped:
                self.fill_idle_workers()
            if self.over():
                break
            self.check_hangs()
            if self.checkpoint_due():
                self.save(deaths=lambda worker: 1)
                gc.freeze()  # what lives now is history (see _history_frozen)
            wait = poll_seconds if self.drain is None else max(0.0, min(poll_seconds, self.drain.until - self.clock()))
            for worker, result, sent in self.dispatch.results(wait, self.wants, more=lambda: not self.checkpoint_due()):
                self.take(worker, result, sent)
        self.end_session()
        return not self.stopped

    def wants(self, ident: int, fitness: float, loss: float) -> bool:
        """Does the master want this result's payload: does it enter the hall of fame now (every fold of a network
        being cross-validated: its payload is theirs together)?"""
        wanted = self.evaluations.wants(ident)
        return self.hall.qualifies(fitness, ident, loss) if wanted is None else wanted

    def end_session(self) -> None:
        """Account for the trainings still out, and leave ``state`` ready for the caller's last checkpoint."""
        now = self.clock()
        running = self.dispatch.running()
        self.state.busy_seconds += sum(now - since for _, since in running)
        self.state.workers_busy = len(running)
        self.save_point(deaths=lambda worker: 0)

    def take_pending(self) -> None:
        """What was out when the last session ended: redone first, or recorded as crashed after two job
        deaths; a crash is in the checkpoint before anything goes out (the next job may die first)."""
        crashed = False
        for p in self.state.pending:
            if p.attempts < MAX_ATTEMPTS:
                self.evaluations.start(p, self.space.key(p.genome), self.state.folding.get(p.id), redo=True)
                continue
            now = self.wall_clock()
            self.say(f"warning: evaluation {p.id} was in flight when {p.attempts} jobs ended; recorded as crashed, not sent again")
            self.record(Record.of(p, failed_evaluation(CRASHED_MESSAGE, "crashed"), started=now, finished=now))
            crashed = True
        self.state.pending, self.state.folding = [], {}
        if crashed and self.checkpoint is not None:
            self.save(deaths=lambda worker: 1)

    def fill_idle_workers(self) -> None:
        evaluations = self.evaluations
        while True:
            room = self.search.evaluations - self.networks_recorded() - evaluations.counted()  # networks the budget lets begin
            tasks = evaluations.parts_left() + max(room, 0) * evaluations.parts
            if self.halving is not None and self._promotion_due():
                tasks += evaluations.parts
            worker = self.dispatch.free_worker(tasks) if tasks > 0 else None
            if worker is None:
                break
            chosen = self.propose(room, worker)
            if chosen is None:
                break  # the strategy waits for results (a generation's barrier), or a suspect for another
            evaluation, part, target = chosen
            fold = evaluations.take_part(evaluation, part)
            self.dispatch.send(target, evaluation.individual, self.task(evaluation, fold))
        self.dispatch.flush()

    def propose(self, room: int, worker: int) -> tuple[Open, int | None, int] | None:
        """The network whose part goes out next, which part (None: the next) and to whom: ``worker``, unless that part
        is a promotion whose holder has a free slot now (idle at a barrier, or room in its queue), which gets it instead. An open one with parts
        not yet out (the next fold of one being cross-validated, or one to redo, while the budget has ``room`` for
        networks to begin) first, else a promotion ``worker`` holds (or no worker is known to hold), else (with
        ``room``) a new one from the strategy, else a promotion another worker holds (promotion.py: a promotion goes to its holder, which carries
        it on); None if none may go now.

        A suspect (an individual out when a job died) goes out only while no other is out: two suspects
        out together at another death would both be blamed, though one killed the job."""
        evaluations = self.evaluations
        if self.halving is not None and not self.halving.asynchronous:  # the strategy's barrier decided these: all open now,
            while (made := self.strategy.promote()) is not None:        # in its order (ids that do not depend on the workers)
                self._open_promotion(self.halving.stage(self.state, *made))
        elsewhere = None  # an open promotion whose parts left are held by other workers
        for evaluation in evaluations.waiting():
            if (room > 0 or evaluations.is_started(evaluation)) and (evaluation.individual.attempts == 0 or not self.dispatch.suspects):
                part = self._part_for(evaluation, worker)
                if part != HELD_ELSEWHERE:
                    return evaluation, part, worker
                elsewhere = elsewhere or evaluation
        if self.halving is not None:
            promoted = self._promotion(worker)
            if promoted is not None:
                evaluation = self._open_promotion(promoted)
                return evaluation, self._part_for(evaluation, worker), worker
        new = self._new_network(room)
        if new is not None:
            return new, None, worker
        if elsewhere is not None:  # nothing else for this worker: the holder takes it if it has a slot (queued behind its
            network = elsewhere.individual.network  # training, if any), else this worker, from the start
            held = next(((part, h) for part in elsewhere.unsent if self.dispatch.has_slot(h := self.halving.holder(network, part))), None)
            return (elsewhere, *held) if held is not None else (elsewhere, None, worker)
        if self.halving is not None:
            promoted = self._promotion(None)
            if promoted is not None:
                return self._open_promotion(promoted), None, worker
        return None

    def _promotion_due(self) -> bool:
        return self.halving.table.due() if self.halving.asynchronous else self.strategy.promotions_waiting()

    def _promotion(self, worker: int | None) -> Pending | None:
        """A due promotion of the rung table (ASHA) as a stage to send: one that ``worker`` holds (or no worker is known
        to hold), or with None any. (A strategy that promotes at its barrier has its promotions opened by :meth:`propose`.)"""
        return self.halving.promote(self.state, worker) if self.halving.asynchronous else None

    def _new_network(self, room: int) -> Open | None:
        """A new network from the strategy, if the budget has room for it (after the networks to redo) and the strategy
        proposes one."""
        evaluations = self.evaluations
        if room - len(evaluations.unstarted - evaluations.promotions) <= 0:  # networks to redo take the room before new ones
            return None
        proposal = self.strategy.ask()
        if proposal is None:
            return None
        self.state.next_id += 1
        individual = Pending(id=self.state.next_id - 1, genome=proposal.genome, parents=proposal.parents, operators=proposal.operators)
        return self.evaluations.start(individual, proposal.key)

    def _open_promotion(self, promoted: Pending) -> Open:
        self.state.next_id += 1
        return self.evaluations.start(promoted, self.space.key(promoted.genome))

    def _part_for(self, evaluation: Open, worker: int) -> int | None:
        """Which of ``evaluation``'s parts not yet out ``worker`` takes (None: the next): of a promotion, as
        :meth:`Halving.part_for` says."""
        network = evaluation.individual.network
        if self.halving is None or network < 0:
            return None
        return self.halving.part_for(network, evaluation.unsent, worker, self.dispatch.out)

    def task(self, evaluation: Open, fold: tuple) -> Task:
        """The task of one part of a network: its genome's key (the worker decodes its settings), seed, entry bar
        and watch; a fold training comes back whole (see :meth:`wants`), so it carries an open bar."""
        watch = dict(self.watch)
        key, ident = evaluation.key, evaluation.individual.id
        if self.bars is not None and not is_refit(fold):  # (a refit has no validation rows to judge it by)
            watch.update(stop_below=self.bars.bars(key[self.epochs_at]), warmup=self.search.early_stopping_warmup)
        if self.halving is not None:
            watch.update(self.halving.watch(evaluation.individual, key[self.epochs_at]))
        seed = task_seed(self.search.seed, network_of(evaluation.individual), fold[0] + 1 if fold else 0)  # a network's stages: one seed
        return Task.from_key(ident, self.space, key, seed, OPEN if fold else self.hall.entry_bar(), watch, fold)

    def take(self, worker: int, result: Result, sent: Sent) -> None:
        """A result back: recorded, told, offered to the hall of fame once its network's evaluation is complete
        (a task skipped at a drain is redone instead)."""
        ev = result.evaluation
        if ev.status == SKIPPED:
            self.evaluations.skipped(sent.individual.id, sent.task.fold)
            return
        self.state.busy_seconds += self.clock() - sent.since
        if ev.status in ("ok", "paused") and not math.isfinite(ev.fitness) and not is_refit(sent.task.fold):  # a worker's bug must not put NaN into the search
            ev = failed_evaluation(f"the worker returned a fitness of {ev.fitness}", seconds=ev.seconds, epochs_done=ev.epochs_done)
        if self.halving is not None and ev.status == "paused":  # the worker keeps that part's training: its promotion goes there
            self.halving.hold(network_of(sent.individual), sent.task.fold[0] if sent.task.fold else WHOLE, worker)
        complete = self.evaluations.returned(sent.individual.id, sent.task.fold, ev)
        if complete is None:
            return  # more parts to come, or a part of a network recorded already
        evaluation, ev = complete
        record = Record.of(evaluation.individual, ev, worker, sent.started, self.wall_clock())
        if self.halving is not None:
            record = self.halving.reached(record)
        member = None
        if record.status == "ok" and ev.has_payload:
            task = sent.task
            member = Member(id=record.id, fitness=record.fitness, network=task.network, training=task.training, val_pred=ev.val_pred,
                            test_pred=ev.test_pred, weights=ev.weights or {}, loss=ev.loss)
        self.record(record, member)

    def networks_recorded(self) -> int:
        """Records that count against ``search.evaluations``: every network's first stage (all records, without promotion)."""
        return self.state.recorded - (self.halving.promotions_recorded if self.halving is not None else 0)

    def record(self, record: Record, member: Member | None = None) -> None:
        """Remember a result, tell the strategy and the early-stopping bars, and offer ``member`` to the hall of fame."""
        self.state.records.append(record)
        self.state.tally.tell(record, planned_epochs(self.space, record, self.folds))
        if self.halving is not None:
            self.halving.tell(record)
        self.dispatch.finished(record.id)
        if member is not None:  # first: ensemble selection values the newcomer by its predictions
            self.hall.offer(member)
        self.strategy.tell(record)
        if self.bars is not None:
            self.bars.tell(record)
        self.unsaved = True
        if self.on_result is not None:
            self.on_result(record, self.state)

    # --- stops, hangs and checkpoints ---------------------------------------------------------

    def stop_requested(self, requests: int) -> bool:
        """Act on stop requests; True if the loop must end now (a second request during a drain)."""
        if requests and not self.stopped:
            self.stopped = True
            if self.dispatch.inflight and self.search.drain_seconds > 0 and requests < 2:
                self.start_drain()
        elif requests >= 2 and self.drain is not None:
            self.say(f"draining: a second signal; stopping now with {len(self.dispatch.running())} of {self.drain.trainings} "
                     "trainings still out (they are redone on resume)")
            return True
        return False

    def start_drain(self) -> None:
        now, seconds = self.clock(), self.search.drain_seconds
        self.drain = _Drain(now + seconds, now, len(self.dispatch.running()), self.state.recorded)
        queued = self.dispatch.drop_queued()
        self.say(f"draining: waiting up to {seconds:g} s for {self.drain.trainings} trainings"
                 + (f"; {queued} queued behind them {'is' if queued == 1 else 'are'} dropped unless started, to be redone on resume"
                    if queued else ""))
        if self.checkpoint is not None and self.unsaved:  # what was done before the signal is safe at once, should the
            self.save(deaths=lambda worker: 1)            # job be killed (Slurm's KillWait) during the drain

    def over(self) -> bool:
        """Is this session done: nothing out, a stop without a drain, or a drain past its deadline?"""
        if not self.dispatch.inflight:
            if self.drain is not None:
                self.say(f"draining: all {self.state.recorded - self.drain.recorded_before} trainings recorded "
                         f"in {self.clock() - self.drain.since:.1f} s")
            return True  # the caller writes the final checkpoint
        if self.stopped and self.drain is None:
            return True
        if self.drain is not None and self.clock() >= self.drain.until:
            self.say(f"draining: {len(self.dispatch.running())} of {self.drain.trainings} trainings still out after "
                     f"{self.search.drain_seconds:g} s (they are redone on resume)")
            return True
        return False

    def check_hangs(self) -> None:
        """Raise HungWorker if a training has gone past its time limit plus the grace (the Dispatcher looks)."""
        hung = self.dispatch.hung(self.hung_after)
        if hung is not None:
            worker, sent = hung
            now = self.clock()
            self.state.busy_seconds += sum(now - since for _, since in self.dispatch.running())
            self.save_point(deaths=lambda w: 1 if w == worker else 0)  # the hung individual is to blame, the others not
            raise HungWorker(worker, sent.individual.id, now - sent.since)

    def checkpoint_due(self) -> bool:
        return self.checkpoint is not None and self.unsaved and self.clock() - self.last_checkpoint >= self.search.checkpoint_seconds

    def save(self, deaths: Callable[[int], int]) -> None:
        """Write a checkpoint now (written after the free workers have their next task, so none idles during it)."""
        self.save_point(deaths)
        self.checkpoint(self.state)
        self.state.pending = []
        self.last_checkpoint, self.unsaved = self.clock(), False

    def save_point(self, deaths: Callable[[int], int]) -> None:
        """Bring ``state`` up to date for a checkpoint: its accounts, what is out (see Dispatcher.outstanding), the strategy."""
        self.state.capacity_seconds = self.capacity_before + len(self.transport.workers) * (self.clock() - self.loop_start)
        self.state.pending = self.evaluations.pending(self.dispatch.outstanding(deaths))
        self.state.folding = self.evaluations.folding()
        self.state.strategy = self.strategy.to_state()
        self.state.memory = memory.gather(self.search, self.strategy, self.bars, self.halving)
        self.state.dispatch = {**self.dispatch.view(), "session_started": self.session_started, "saved_at": self.wall_clock()}


@contextmanager
def _history_frozen():
    """Keep Python's cyclic garbage collector off the search's history while the search runs.

    The history only grows and a full collection walks all of it, so what is alive when the search
    starts, and after each checkpoint, is moved out of its reach (``gc.freeze``); it still goes when
    nothing refers to it. The loop makes no reference cycles, so young objects are collected
    :data:`YOUNG_COLLECTION` allocations apart, not 700. Restored when the search returns (and
    ``gc.unfreeze``, unless the caller had frozen objects itself).
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
