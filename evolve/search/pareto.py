"""NSGA-II's second objective and the Pareto front kept as results arrive (see :class:`~.nsga2.NSGA2`)."""
from __future__ import annotations

import bisect
import math

from .records import Record

# NSGA-II's second objective (minimised) -> the evaluation metric that holds it (ensemble.train.train_and_evaluate).
OBJECTIVES = {"params": "params", "latency": "latency_us"}


def objective_value(record: Record, objective: str) -> float | None:
    """The second objective's value of a successful evaluation, or of a stage paused at its rung (see :data:`OBJECTIVES`);
    None if it has none."""
    value = record.metrics.get(OBJECTIVES[objective]) if record.status in ("ok", "paused") else None
    return value if value is not None and math.isfinite(value) and math.isfinite(record.fitness) else None


class ParetoFront:
    """The non-dominated points so far on (fitness, maximised; cost, minimised), kept as they arrive.

    The members are kept sorted by cost; along a non-dominated set the fitness then rises strictly
    with the cost, so a newcomer is placed by bisection (O(log n)) and displaces a contiguous run
    of members. Nothing is ever rescanned. Of two points with the same fitness and cost the one
    with the lower id is kept, so the front does not depend on the order in which results arrive.
    """

    def __init__(self) -> None:
        self._costs: list[float] = []
        self._members: list[tuple[float, float, int]] = []  # (cost, fitness, id), by cost

    def __len__(self) -> int:
        return len(self._members)

    def add(self, ident: int, fitness: float, cost: float) -> bool:
        """Offer a point; True if it joined the front (displacing the members it dominates)."""
        at = bisect.bisect_right(self._costs, cost)
        if at > 0:  # the member of the largest cost <= ``cost`` is the only one that may dominate the newcomer
            c, f, other = self._members[at - 1]
            if f >= fitness:
                if (c, f) == (cost, fitness) and ident < other:
                    self._members[at - 1] = (cost, fitness, ident)  # the same point, reached first by id
                    return True
                return False
        low = bisect.bisect_left(self._costs, cost)
        high = low
        while high < len(self._members) and self._members[high][1] <= fitness:
            high += 1  # costs at least as high, fitness no better: dominated by the newcomer
        self._members[low:high] = [(cost, fitness, ident)]
        self._costs[low:high] = [cost]
        return True

    def ids(self) -> list[int]:
        """The members' ids, by cost (so by fitness too)."""
        return [ident for _, _, ident in self._members]

    def points(self) -> list[tuple[int, float, float]]:
        """(id, fitness, cost) of each member, by cost."""
        return [(ident, f, c) for c, f, ident in self._members]
