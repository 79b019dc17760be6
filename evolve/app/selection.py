"""Choosing a run's ensemble from its hall of fame: during the run, and again afterwards (`evens select`)."""
from __future__ import annotations

from ensemble.hall_of_fame import HallOfFame
from ensemble.problem import problem_from_dict
from ensemble.select import Selection, select_ensemble

from ..checkpoint import RunInfo


def select_for_run(hall: HallOfFame, info: RunInfo, method: str | None = None, size: int | None = None) -> Selection | None:
    """The ensemble the run's config asks for (or ``method``/``size``), chosen on the validation split."""
    ens = info.config["ensemble"]
    problem = problem_from_dict(info.data["problem"])
    return select_ensemble(list(hall), problem, info.val_y, info.test_y, method or ens["method"], size or ens["size"])


class SelectionCache:
    """:func:`select_for_run`, computed again only when the hall of fame has changed.

    The hall changes rarely once a search has found good networks, and choosing costs
    (picks x candidates) scorings of the validation split, so every checkpoint can carry
    a ready-to-use ensemble at almost no cost.
    """

    def __init__(self, info: RunInfo):
        self.info = info
        self._key: tuple | None = None
        self._selection: Selection | None = None

    def __call__(self, hall: HallOfFame) -> Selection | None:
        key = tuple(hall.ids)
        if key != self._key:
            self._selection = select_for_run(hall, self.info)
            self._key = key
        return self._selection
