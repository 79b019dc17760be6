"""What a network adds to the run's ensemble: the value that ``search.selection = "ensemble"`` breeds by.

As in neural ensemble search (Zaidi et al., NeurIPS 2021), the search values a network by the
ensemble it would make, not by its own fitness alone: a network as strong as another but wrong on
other samples is worth more to the ensemble. An individual's value is the validation score of the
run's current ensemble (chosen from the hall of fame as the run chooses it) with the network added
at the weight of one more pick of ``ensemble.size`` (1 / (size + 1), however many picks bagged
selection pooled): minus the log-loss for a classification (a proper scoring rule, which tells
diversity apart where accuracy is saturated), minus the RMSE for a regression. Higher is better. A
network that is in the ensemble is valued the same way (its weight grows), so every individual is
measured on one scale.

Only networks in the hall of fame have validation predictions on the master; any other is valued
-inf (the population keeps the hall's best, and a member that falls out of the hall is the first to
be replaced). The ensemble is chosen again only when the hall of fame changes; a value costs one
scoring of the validation split, and is kept until then (so a change of the hall costs one selection
and a scoring for each member of the population).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from .hall_of_fame import HallOfFame, Member
from .problem import Problem
from .select import Selection


class EnsembleValue:
    """``value(ids)``: each id's value to the current ensemble (see the module docstring)."""

    def __init__(self, hall: HallOfFame, problem: Problem, val_y: np.ndarray, choose: Callable[[list[Member]], Selection | None],
                 size: int):
        self.hall, self.problem, self.val_y, self.choose = hall, problem, val_y, choose
        self.weight = 1.0 / (size + 1)  # of the network valued, beside the ensemble's average
        self._hall_ids: tuple[int, ...] | None = None
        self._values: dict[int, float] = {}
        self._average: np.ndarray | None = None
        self._by_id: dict[int, Member] = {}

    def _refresh(self) -> None:
        ids = tuple(self.hall.ids)
        if ids == self._hall_ids:
            return
        self._hall_ids, self._values = ids, {}
        members = list(self.hall)
        self._by_id = {m.id: m for m in members}
        selection = self.choose(members)
        self._average = None
        if selection is not None:
            picks = selection.path[: selection.picks]
            self._average = sum(np.asarray(self._by_id[i].val_pred, dtype=np.float64) for i in picks) / len(picks)

    def _value(self, ident: int) -> float:
        member = self._by_id.get(ident)
        if member is None:
            return -math.inf
        pred = np.asarray(member.val_pred, dtype=np.float64)
        average = pred if self._average is None else (1.0 - self.weight) * self._average + self.weight * pred
        return float(self.problem.selection_key(self.problem.scores(average, self.val_y), "loss")[0])

    def __call__(self, ids: Sequence[int]) -> list[float]:
        self._refresh()
        out = []
        for ident in ids:
            if ident not in self._values:
                self._values[ident] = self._value(ident)
            out.append(self._values[ident])
        return out
