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
from evolve.search.tally import Tally


@dataclass
class SearchState:
    """The search's state; :meth:`fresh` makes a new one (the run's hall of fame holds ``ensemble.candidates``)."""

    rng: random.Random
    # the evaluations recorded, in the order they finished; a master checkpointing a long search lets go of
    # those a checkpoint committed (see let_go), so these are then the last of them and ``dropped`` counts the rest
    records: list[Record] = field(default_factory=list)
    dropped: int = 0  # records committed to the run file's segments and no longer in ``records`` (let_go)
    dropped_last_id: int = -1  # the id of the last of them
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
    # what the master's parts keep across a resume that reads no history (evolve.engine.memory): arrays by name,
    # {} where some part needs the history
    memory: dict = field(default_factory=dict)
    tally: Tally | None = None  # the account of every record (evolve.search.tally): kept by the master, in every checkpoint
    recent_ids: list[int] = field(default_factory=list)  # loaded: the ids the last checkpoint recorded (in-flight log merge)

    @classmethod
    def fresh(cls, seed: int, candidates: int | None = None) -> SearchState:
        return cls(rng=random.Random(seed), hall_of_fame=HallOfFame(EnsembleConfig().candidates if candidates is None else candidates))

    @property
    def recorded(self) -> int:
        """Evaluations recorded in all: those let go and those in memory."""
        return self.dropped + len(self.records)

    def let_go(self) -> None:
        """Forget the records in memory, which a checkpoint has just committed (the caller's promise): a master
        keeps no history, only what its strategy, rules and hall of fame hold (issue 34)."""
        if self.records:
            self.dropped, self.dropped_last_id = self.recorded, self.records[-1].id
            self.records = []

    def ensemble_weights(self) -> dict[int, float]:
        """The stored ensemble's members, each with its share of the ensemble's picks ({} while none is chosen)."""
        sel = self.selection
        return dict(zip(sel.ids, sel.weights)) if sel is not None else {}

    def by_id(self) -> dict[int, Record]:
        return {r.id: r for r in self.records}

    @property
    def population(self) -> list[int]:
        """Record ids of the strategy's current population."""
        return list(self.strategy.get("population", []))

    @property
    def utilization(self) -> float:
        return self.busy_seconds / self.capacity_seconds if self.capacity_seconds > 0 else 0.0
