"""What the search remembers of each individual: a finished :class:`Record`, or a :class:`Pending` one.

Both are declared with :func:`ensemble.results.column`, so the run file's columns and the CSV are
derived from these fields (see :mod:`evolve.runfile.columns` and :mod:`evolve.app.presentation.csv_table`).
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

from ensemble.hall_of_fame import standing
from ensemble.results import OUTCOME_FIELDS, Outcome, column, kinds


@dataclass(slots=True, kw_only=True)
class Pending:
    """An individual sent out whose result has not come back (in flight, or the run stopped or died)."""

    id: int = column("integer")
    genome: list[float] = column("vector")  # one float in [0, 1] per gene (evolve.search.space)
    parents: tuple[int, int] = column("pair", default=(-1, -1))  # record ids; -1: none
    operators: str = column("label", default="random")  # what made it (see Record.operators)
    attempts: int = column("integer", default=0)  # job deaths (or hung workers given up on) it was out at; at 2 it is not sent again
    rung: int = column("integer", default=0)  # search.promotion: the rung this stage trains to (0: the first)
    network: int = column("integer", default=-1)  # a promotion: the id of the network's first stage (-1: this is it)


@dataclass(slots=True, kw_only=True)
class Record(Outcome):
    """One finished evaluation: the individual, how its training ended (:class:`~ensemble.results.Outcome`), where and when."""

    id: int = column("integer")
    genome: list[float] = column("vector")
    parents: tuple[int, int] = column("pair", default=(-1, -1))
    # "random", "crossover", "mutation", "crossover+mutation" or "copy", a sampler's ("optuna-tpe"), or "promotion" (a network
    # trained on to its next rung: parents[0] is its stage before); "+redo" when sent again after a stop
    operators: str = column("label", default="random")
    rung: int = column("integer", default=0)  # search.promotion: the rung this stage reached (status "paused" below the last)
    network: int = column("integer", default=-1)  # a promotion's record: the id of the network's first stage (-1: this is it)
    worker: int = column("integer", default=-1)  # the MPI rank that trained it; -1: none
    started: float = column("real", default=0.0)  # wall-clock time (s since the epoch) when it started
    finished: float = column("real", default=0.0)  # ... and when its result arrived

    @classmethod
    def of(cls, individual: Pending, outcome: Outcome, worker: int = -1, started: float = 0.0, finished: float = 0.0) -> Record:
        """The record of ``individual``'s evaluation, which ended as ``outcome`` (an Evaluation, say)."""
        values = dict(zip(_OF_FIELDS, _SHARED_OF(individual) + _OUTCOME_OF(outcome)))  # (once an evaluation, on the master)
        values["genome"], values["parents"] = list(values["genome"]), tuple(values["parents"])
        return cls(worker=worker, started=started, finished=finished, **values)


def networks(records: list[Record]) -> int:
    """How many networks the records are: their first stages (every record, without successive halving)."""
    return sum(1 for r in records if r.network < 0)


def network_of(r: Record | Pending) -> int:
    """The id of the network a record or pending stage belongs to: its first stage's."""
    return r.network if r.network >= 0 else r.id


SHARED = tuple(name for name in kinds(Pending) if name in kinds(Record))  # what a record keeps of its individual
_SHARED_OF, _OUTCOME_OF = attrgetter(*SHARED), attrgetter(*OUTCOME_FIELDS)  # Record.of's fields, each a tuple of values
_OF_FIELDS = SHARED + OUTCOME_FIELDS


def best_first(record: Record) -> tuple[float, float, int]:
    """The sort key that puts successful records best first, in the hall of fame's order
    (:func:`ensemble.hall_of_fame.standing`): higher fitness; among equal fitness (common with accuracy on
    a few hundred validation rows), the lower validation loss, which separates a confident right answer
    from a lucky one; then the earlier id. (scripts/bench/study_calibration.py measured the loss
    tie-break on the best single network.)"""
    return standing(record.fitness, record.loss, record.id)
