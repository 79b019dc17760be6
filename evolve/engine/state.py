"""What a search is at any moment: its records, its strategy's state, what is out, and its hall of fame.

Everything in it is plain data, so a checkpoint stores it whole (:mod:`evolve.runfile.checkpoint`)
and a resume carries on from it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from ensemble.hall_of_fame import HallOfFame
from ensemble.select import Selection
from evolve.config.schema import EnsembleConfig
from evolve.search.records import Pending, Record


@dataclass
class SearchState:
    """The search's state; :meth:`fresh` makes a new one (the run's hall of fame holds ``ensemble.candidates``)."""

    rng: random.Random
    records: list[Record] = field(default_factory=list)
    strategy: dict = field(default_factory=dict)  # the strategy's own state, plain JSON (see evolve.search.strategy)
    pending: list[Pending] = field(default_factory=list)
    # data.folds: the fold trainings each pending network has back (id -> fold -> its Evaluation, payload
    # included), so that a resume trains only the rest (evolve.engine.evaluations)
    folding: dict = field(default_factory=dict)
    hall_of_fame: HallOfFame = field(default_factory=lambda: HallOfFame(EnsembleConfig().candidates))
    selection: Selection | None = None  # the ensemble chosen from the hall of fame, as last saved
    next_id: int = 0
    busy_seconds: float = 0.0  # summed over workers: time with a task in hand
    capacity_seconds: float = 0.0  # summed over workers: time in the search loop
    workers_busy: int = 0  # when run_search returns: workers still training (not saved)
    # the dispatcher's view at the last save point (Dispatcher.view, with "session_started" and "saved_at",
    # wall clock): what `evens status` shows; a resume never reads it
    dispatch: dict = field(default_factory=dict)

    @classmethod
    def fresh(cls, seed: int, candidates: int | None = None) -> SearchState:
        return cls(rng=random.Random(seed), hall_of_fame=HallOfFame(EnsembleConfig().candidates if candidates is None else candidates))

    def by_id(self) -> dict[int, Record]:
        return {r.id: r for r in self.records}

    @property
    def population(self) -> list[int]:
        """Record ids of the strategy's current population."""
        return list(self.strategy.get("population", []))

    @property
    def utilization(self) -> float:
        return self.busy_seconds / self.capacity_seconds if self.capacity_seconds > 0 else 0.0
