"""A network's evaluation as the tasks it takes: one training, or one per fold of a cross-validation.

The search loop proposes networks; the :class:`Evaluations` turn each into its parts and put the
parts' results back together, so the :class:`~evolve.engine.dispatch.Dispatcher` sends tasks and
knows nothing of folds. A network is *open* from its first part out until its record is made:

* with ``data.folds = k``, its k fold trainings are k tasks, each sent to whichever worker is free;
  when all are back the network's evaluation is their combination (:func:`ensemble.folds.combine_folds`:
  the mean fitness, the out-of-fold predictions over every training row, the bagged test predictions
  and the k models). A part that fails, times out or is stopped early ends the network as a whole, as
  that part ended: its parts not yet sent never go, and those still out are let go when they come back;
* otherwise it is one task, and its result is the network's.

What an open network has done survives a checkpoint (``SearchState.folding``: its parts back, with their
payloads), so a resumed search trains only the folds still missing.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Iterator

import numpy as np

from ensemble.folds import assign_folds, combine_folds
from ensemble.problem import Problem
from ensemble.results import Evaluation
from evolve.search.records import Pending


@dataclass(frozen=True)
class FoldPlan:
    """How the run cross-validates: ``folds`` k, each training row's fold, and what scores a combination."""

    folds: int
    fold: np.ndarray  # (n_train,) fold of each training row
    problem: Problem
    train_y: np.ndarray
    test_y: np.ndarray
    refit: bool = False  # ensemble.refit: one more part, the network trained on every training row, is the member

    @classmethod
    def of(cls, folds: int, train_y: np.ndarray, test_y: np.ndarray, problem: Problem, seed: int, refit: bool = False) -> FoldPlan:
        """The plan every worker follows: the folds :func:`ensemble.folds.assign_folds` deals with ``seed``."""
        return cls(folds, assign_folds(train_y, folds, seed, problem.kind == "classification"), problem, train_y, test_y, refit)

    @property
    def parts(self) -> list[int]:
        """The parts of a network: its folds, and with ``refit`` the part :data:`folds` (every row, no validation)."""
        return list(range(self.folds + self.refit))

    def combine(self, done: dict[int, Evaluation]) -> Evaluation:
        return combine_folds([done[j] for j in range(self.folds)], self.fold, self.problem, self.train_y, self.test_y,
                             done.get(self.folds))


def combine_paused(done: dict[int, Evaluation]) -> Evaluation:
    """A cross-validated network's stage to a rung (search.promotion): the folds' mean fitness and metrics (the
    refit, which has no validation rows, left out), their spread, and their seconds and epochs summed."""
    folds = [ev for j, ev in sorted(done.items()) if math.isfinite(ev.fitness)]
    metrics = {name: float(np.mean([ev.metrics.get(name, math.nan) for ev in folds])) for name in folds[0].metrics}
    metrics["fold_std"] = float(np.std([ev.fitness for ev in folds], ddof=1)) if len(folds) > 1 else 0.0
    return Evaluation(status="paused", fitness=float(np.mean([ev.fitness for ev in folds])), metrics=metrics,
                      seconds=sum(ev.seconds for ev in done.values()), epochs_done=sum(ev.epochs_done for ev in done.values()))


def is_refit(fold: tuple) -> bool:
    """Is this task's part the refit on every training row (``(k, k)``)?"""
    return bool(fold) and fold[0] == fold[1]


@dataclass(slots=True)
class Open:
    """A network being evaluated: its individual, its key, and its parts (fold indices; ``[-1]`` for one whole training)."""

    individual: Pending
    key: tuple
    unsent: deque = field(default_factory=deque)  # parts not out
    out: int = 0  # parts out now
    done: dict[int, Evaluation] = field(default_factory=dict)  # parts back, in the order they came

    def mark_redo(self) -> None:
        """Sent again after a stop or a job's end: its operators say so (as a record will)."""
        if not self.individual.operators.endswith("+redo"):
            self.individual = replace(self.individual, operators=f"{self.individual.operators}+redo")


WHOLE = -1  # the part of a network that is not cross-validated: its one training
WHOLE_PART = (WHOLE,)


class Evaluations:
    """The open networks, in the order they were opened. ``plan`` None: every network is one task.

    Kept at O(1) per task however many workers there are: the networks with parts not yet out wait in
    :attr:`queue`, and :meth:`counted` (the open networks the budget counts) and :meth:`parts_left` are
    counters, not scans."""

    def __init__(self, plan: FoldPlan | None = None):
        self.plan = plan
        self.open: dict[int, Open] = {}
        self.queue: dict[int, Open] = {}  # open networks with parts not yet out, in the order they began waiting
        self.unstarted: set[int] = set()  # networks to redo (a resume) with nothing out or back yet: not yet counted
        self.unsent = 0  # parts not yet out, over every open network
        self.let_go: dict[int, int] = {}  # networks recorded while parts of them were out: id -> parts still out
        self.promotions: set[int] = set()  # open stages of networks promoted to a further rung: not counted against the budget

    @property
    def parts(self) -> int:
        return len(self.plan.parts) if self.plan is not None else 1

    def start(self, individual: Pending, key: tuple, done: dict[int, Evaluation] | None = None, redo: bool = False) -> Open:
        """Open ``individual``'s evaluation; ``done``: the parts a previous job finished, ``redo``: it was out when the
        last job ended (a resume). A redone network counts against the budget once a part of it goes out."""
        if self.plan is None:
            evaluation = Open(individual, key, deque(WHOLE_PART), 0, {})
        else:
            done = dict(done or {})
            evaluation = Open(individual, key, deque(p for p in self.plan.parts if p not in done), 0, done)
        if redo:
            evaluation.mark_redo()
            if not done:
                self.unstarted.add(individual.id)
        self.open[individual.id] = evaluation
        if individual.network >= 0:
            self.promotions.add(individual.id)
        self.unsent += len(evaluation.unsent)
        self._wait(evaluation)
        return evaluation

    def counted(self) -> int:
        """The open networks the budget counts: all but redone ones not yet begun in this session, and promotions."""
        return len(self.open) - len(self.unstarted | self.promotions)

    def parts_left(self) -> int:
        """Parts not yet out of the networks counted and the promotions (what they still need of the workers)."""
        return self.unsent - len(self.unstarted - self.promotions) * self.parts

    def waiting(self) -> Iterator[Open]:
        """The open networks with parts not yet out, in the order they began waiting."""
        return iter(self.queue.values())

    def is_started(self, evaluation: Open) -> bool:
        """Has it begun in this session, or is it a promotion (which the budget of networks does not count)?"""
        return evaluation.individual.id not in self.unstarted or evaluation.individual.id in self.promotions

    def take_part(self, evaluation: Open, part: int | None = None) -> tuple[int, ...]:
        """A part of ``evaluation`` to send, the next unless ``part`` names one not yet out: ``(j, k)`` for fold j of k,
        ``()`` for a whole training."""
        if part is None:
            part = evaluation.unsent.popleft()
        else:
            evaluation.unsent.remove(part)
        evaluation.out += 1
        self.unsent -= 1
        self.unstarted.discard(evaluation.individual.id)
        if not evaluation.unsent:
            del self.queue[evaluation.individual.id]
        return () if part == WHOLE else (part, self.plan.folds)

    def skipped(self, ident: int, fold: tuple) -> None:
        """A part that never ran (dropped at a drain): it goes out again, before new networks."""
        if ident in self.let_go:
            self._release(ident)
            return
        evaluation = self.open[ident]
        evaluation.out -= 1
        evaluation.unsent.appendleft(fold[0] if fold else WHOLE)
        self.unsent += 1
        self._wait(evaluation)

    def _wait(self, evaluation: Open) -> None:
        if evaluation.unsent:
            self.queue[evaluation.individual.id] = evaluation

    def wants(self, ident: int) -> bool | None:
        """Does a part of network ``ident`` come back whole? True for a fold of an open network (the
        network's payload is made of them all), False for a part let go; None: the hall of fame decides."""
        if ident in self.let_go:
            return False
        return True if self.plan is not None and ident in self.open else None

    def returned(self, ident: int, fold: tuple, ev: Evaluation) -> tuple[Open, Evaluation] | None:
        """A part back. The network's evaluation once it is complete, or ended by a part that was not ``ok``;
        None while parts are still to come (or for a part of a network already recorded)."""
        if ident in self.let_go:
            self._release(ident)
            return None
        evaluation = self.open[ident]
        evaluation.out -= 1
        if not fold:
            return self._close(evaluation), ev
        held, k = fold
        if ev.status not in ("ok", "paused"):
            where = "the refit on every training row" if held == k else f"fold {held + 1} of {k}"
            ev.message = f"{where}: {ev.message}" if ev.message else where
            ev.epochs_done += sum(p.epochs_done for p in evaluation.done.values())
            ev.seconds += sum(p.seconds for p in evaluation.done.values())
            return self._close(evaluation), ev.drop_payload()
        evaluation.done[held] = ev
        if len(evaluation.done) < len(self.plan.parts):
            return None
        if any(p.status == "paused" for p in evaluation.done.values()):  # a stage to a rung: its folds' scores, no models yet
            return self._close(evaluation), combine_paused(evaluation.done)
        return self._close(evaluation), self.plan.combine(evaluation.done)

    def _close(self, evaluation: Open) -> Open:
        ident = evaluation.individual.id
        del self.open[ident]
        self.promotions.discard(ident)
        if self.queue.pop(ident, None) is not None:  # parts never sent: a part before them ended the network
            self.unsent -= len(evaluation.unsent)
        if evaluation.out:
            self.let_go[evaluation.individual.id] = evaluation.out
        return evaluation

    def _release(self, ident: int) -> None:
        self.let_go[ident] -= 1
        if not self.let_go[ident]:
            del self.let_go[ident]

    def pending(self, out: list[Pending]) -> list[Pending]:
        """Every open network once, as a resume must redo it: ``out`` (the dispatcher's tasks out, each with its
        attempts) gives the attempts of those with parts out; networks already recorded are left out."""
        attempts: dict[int, Pending] = {}
        for p in out:
            if p.id in self.open and (p.id not in attempts or p.attempts > attempts[p.id].attempts):
                attempts[p.id] = p
        return [attempts.get(ident, e.individual) for ident, e in self.open.items()]

    def folding(self) -> dict[int, dict[int, Evaluation]]:
        """The parts each open network has back (fold -> its evaluation, payload included): what a checkpoint keeps."""
        return {ident: dict(e.done) for ident, e in self.open.items() if e.done}

