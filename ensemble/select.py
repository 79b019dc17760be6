"""Choose the ensemble from the hall of fame, on the validation split only.

* ``greedy`` (Caruana et al., "Ensemble selection from libraries of models",
  ICML 2004): start from the best member, then repeatedly add the member (any,
  again if it helps: selection with replacement) whose addition scores best on
  the validation split, for ``size`` picks; keep the prefix of those picks that
  scored best (the earliest, on ties). A member's weight is its share of the
  picks. The first pick is the best member, and the prefix kept scores at least
  as well as it, so greedy selection never does worse on validation than the
  best single network.
* ``top_k``: the best ``size`` members by fitness, equal weights.

"Scores best" is the problem's selection key: accuracy with ties broken by the
lower log-loss for classification (accuracy alone ties too often on a few
hundred samples to steer the search), RMSE for regression. The test split is
never looked at to choose; it is only scored along the way, for the curve that
reports show.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from .hall_of_fame import Member
from .problem import Problem

METHODS = ("greedy", "top_k")


@dataclass(frozen=True)
class Selection:
    """An ensemble chosen from the hall of fame, and how it got there."""

    method: str
    size: int  # picks asked for
    path: tuple[int, ...]  # the member id taken at each pick, in order
    picks: int  # the ensemble is path[:picks]
    curve_val: tuple[float, ...]  # headline metric (accuracy or RMSE) of path[:p], p = 1, 2, ...
    curve_test: tuple[float, ...]

    @property
    def ids(self) -> list[int]:
        """The distinct members, in the order they were first picked."""
        return list(dict.fromkeys(self.path[: self.picks]))

    @property
    def weights(self) -> list[float]:
        """Each member's share of the picks, aligned with :attr:`ids`; they sum to 1."""
        counts = Counter(self.path[: self.picks])
        return [counts[i] / self.picks for i in self.ids]

    def to_dict(self) -> dict:
        return {**asdict(self), "path": list(self.path), "curve_val": list(self.curve_val), "curve_test": list(self.curve_test)}

    @classmethod
    def from_dict(cls, d: dict) -> Selection:
        return cls(
            str(d["method"]), int(d["size"]), tuple(int(i) for i in d["path"]), int(d["picks"]),
            tuple(float(v) for v in d["curve_val"]), tuple(float(v) for v in d["curve_test"]),
        )


def select_ensemble(
    members: Sequence[Member], problem: Problem, val_y: np.ndarray, test_y: np.ndarray, method: str = "greedy", size: int = 5
) -> Selection | None:
    """Choose from ``members`` (best first, as the hall of fame keeps them); None if there are none."""
    if method not in METHODS:
        raise ValueError(f"unknown ensemble method {method!r} (known: {', '.join(METHODS)})")
    if size < 1:
        raise ValueError(f"an ensemble needs at least one pick, got {size}")
    if not members:
        return None
    val = [np.asarray(m.val_pred, dtype=np.float64) for m in members]
    test = [np.asarray(m.test_pred, dtype=np.float64) for m in members]
    if method == "top_k":
        order = list(range(min(size, len(members))))
    else:
        order = _greedy(val, problem, val_y, size)
    val_sum, test_sum = np.zeros_like(val[0]), np.zeros_like(test[0])
    keys, curve_val, curve_test = [], [], []
    for p, i in enumerate(order, start=1):
        val_sum += val[i]
        test_sum += test[i]
        val_scores = problem.scores(val_sum / p, val_y)
        keys.append(problem.selection_key(val_scores))
        curve_val.append(val_scores[problem.metric])
        curve_test.append(problem.scores(test_sum / p, test_y)[problem.metric])
    picks = len(order) if method == "top_k" else 1 + max(range(len(keys)), key=lambda p: (keys[p], -p))
    return Selection(method, size, tuple(members[i].id for i in order), picks, tuple(curve_val), tuple(curve_test))


def _greedy(val: list[np.ndarray], problem: Problem, val_y: np.ndarray, size: int) -> list[int]:
    """Indices picked by forward selection with replacement, starting from index 0 (the best)."""
    order, running = [0], val[0].copy()
    for p in range(2, size + 1):
        # Strictly better only: on a tie the earlier (better-ranked) member wins.
        best, best_key = None, None
        for i, v in enumerate(val):
            key = problem.selection_key(problem.scores((running + v) / p, val_y))
            if best_key is None or key > best_key:
                best, best_key = i, key
        order.append(best)
        running += val[best]
    return order
