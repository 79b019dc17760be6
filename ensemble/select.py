"""Choose the ensemble from the hall of fame, on the validation split only.

* ``greedy`` (Caruana et al., "Ensemble selection from libraries of models",
  ICML 2004): start from the best member, then repeatedly add the member (any,
  again if it helps: selection with replacement) whose addition scores best on
  the validation split, for ``size`` picks; keep the prefix of those picks that
  scored best (the earliest, on ties). A member's weight is its share of the
  picks. The first pick is the best member, and the prefix kept scores at least
  as well as it, so one greedy pass never does worse on validation than the
  best single network (by its criterion; bagging and ``min_members`` trade a
  little of that for an ensemble that holds on test, below).
* ``top_k``: the best ``size`` members by fitness, equal weights.

"Scores best" is the problem's selection key for ``criterion``: for
classification accuracy with ties broken by the lower log-loss, or (``"loss"``)
the lower log-loss, which keeps improving where accuracy has saturated on a
small validation split; RMSE for regression. With ``bags`` > 0, greedy selection
runs that many times, each on a random half of the members (at least ``BAG_MIN``; Caruana et al.,
"Getting the most out of ensemble selection", ICDM 2006), and the ensemble is their
picks together: a member's weight is its share of the picks, which keeps one lucky
member from taking the whole ensemble. Of the bags, the ensemble keeps the first j
that score best (the most bags among equals), so that no bag is kept whose picks leave
the score unchanged while the log-loss gets worse; and should that still score below
the best member alone, one plain greedy pass (which starts from it) is the ensemble
instead: it never scores below the best network on the rows that decide. With ``min_members`` > 1,
greedy selection (bagged or not) that kept fewer distinct members runs again,
once on all members, with its first ``min_members`` picks forced to be distinct
(each the best of those not yet picked), and that ensemble is taken if its
validation loss (log-loss; RMSE for regression) is no worse, even where its
accuracy is: an ensemble does not collapse to one network when a second one
costs nothing in loss. The test split is never
looked at to choose; it is only scored along the way, for the curve that reports
show.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import NamedTuple, Sequence

import numpy as np

from .hall_of_fame import Member
from .problem import Problem

METHODS = ("greedy", "top_k")
# A bag holds half the members but at least this many: a half of a few would often leave out every
# good network (a search of 5 networks: bags of 2). With up to BAG_MIN members every bag holds all of
# them, and bagged selection is plain greedy selection.
BAG_MIN = 10
CRITERIA = ("accuracy", "loss", "metric")  # "metric": the problem's own (search.metric)


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
    members: Sequence[Member], problem: Problem, val_y: np.ndarray, test_y: np.ndarray | None, method: str = "greedy", size: int = 5,
    *, criterion: str = "accuracy", bags: int = 0, seed: int = 0, min_members: int = 1,
) -> Selection | None:
    """Choose from ``members`` (best first, as the hall of fame keeps them); None if there are none.
    ``bags``, ``seed`` (which halves each bag holds) and ``min_members`` apply to greedy selection.
    ``test_y`` None: no test curve (the search's own use, which never looks at the test split)."""
    if method not in METHODS:
        raise ValueError(f"unknown ensemble method {method!r} (known: {', '.join(METHODS)})")
    if criterion not in CRITERIA:
        raise ValueError(f"unknown selection criterion {criterion!r} (known: {', '.join(CRITERIA)})")
    if size < 1:
        raise ValueError(f"an ensemble needs at least one pick, got {size}")
    if not members:
        return None
    val = [np.asarray(m.val_pred, dtype=np.float64) for m in members]
    test = [np.asarray(m.test_pred, dtype=np.float64) for m in members] if test_y is not None else None
    key = lambda scores: problem.selection_key(scores, criterion)  # noqa: E731
    if method == "top_k":
        chosen = _scored(list(range(min(size, len(members)))), val, test, problem, val_y, test_y, key, keep_best=False)
    elif bags:
        order, ends = _bagged(val, problem, val_y, size, key, bags, np.random.default_rng(seed))
        chosen = _scored(order, val, test, problem, val_y, test_y, key, keep_best=True, ends=ends)
        if key(problem.scores(val[0], val_y)) > key(chosen.kept_scores):  # below the best network: one pass from it instead
            chosen = _scored(_greedy(val, problem, val_y, size, key), val, test, problem, val_y, test_y, key, keep_best=True)
    else:
        chosen = _scored(_greedy(val, problem, val_y, size, key), val, test, problem, val_y, test_y, key, keep_best=True)
    distinct = min(min_members, size, len(members))
    if method == "greedy" and len(set(chosen.order[: chosen.picks])) < distinct:
        forced = _scored(_greedy(val, problem, val_y, size, key, distinct), val, test, problem, val_y, test_y, key, keep_best=True,
                         at_least=distinct)
        loss = lambda c: problem.selection_key(c.kept_scores, "loss")  # noqa: E731, the kept prefix's validation loss
        if loss(forced) >= loss(chosen):
            chosen = forced
    return Selection(method, size, tuple(members[i].id for i in chosen.order), chosen.picks, tuple(chosen.curve_val),
                     tuple(chosen.curve_test))


class _Scored(NamedTuple):
    picks: int  # the prefix of ``order`` kept
    curve_val: list[float]
    curve_test: list[float]  # empty without a test split
    kept_scores: dict[str, float]  # the kept prefix's validation scores
    order: list[int]


def _scored(order: list[int], val, test, problem: Problem, val_y, test_y, key, keep_best: bool, at_least: int = 1,
            ends: list[int] | None = None) -> _Scored:
    """``order`` scored pick by pick: every pick is kept unless ``keep_best``, else the best-scoring prefix that
    holds ``at_least`` distinct members, the shortest among equals; or with ``ends`` (where each of pooled bags
    ends in ``order``) the best prefix of whole bags, the most bags among equals."""
    val_sum = np.zeros_like(val[0])
    test_sum = np.zeros_like(test[0]) if test is not None else None
    keys, scores, curve_val, curve_test, distinct = [], [], [], [], []
    for p, i in enumerate(order, start=1):
        val_sum += val[i]
        scores.append(problem.scores(val_sum / p, val_y))
        keys.append(key(scores[-1]))
        curve_val.append(scores[-1][problem.metric_key])
        if test is not None:
            test_sum += test[i]
            curve_test.append(problem.scores(test_sum / p, test_y)[problem.metric_key])
        distinct.append(len(set(order[:p])))
    if ends is not None:  # pooled bags: a prefix of whole bags, the most bags among equals
        picks = 1 + max((end - 1 for end in ends), key=lambda p: (keys[p], p))
    elif keep_best:
        allowed = [p for p in range(len(order)) if distinct[p] >= at_least] or [len(order) - 1]
        picks = 1 + max(allowed, key=lambda p: (keys[p], -p))
    else:
        picks = len(order)
    return _Scored(picks, curve_val, curve_test, scores[picks - 1], order)


def _bagged(val: list[np.ndarray], problem: Problem, val_y: np.ndarray, size: int, key, bags: int, rng) -> tuple[list[int], list[int]]:
    """Every bag's greedy picks (indices into ``val``), one bag after the other, and where each bag's end in
    that order; each bag is a random half of the members (but at least :data:`BAG_MIN`, or all), in their order
    (so it starts from its best), and keeps the prefix of its picks that scored best."""
    order, ends = [], []
    for _ in range(bags):
        bag = sorted(rng.choice(len(val), size=min(len(val), max(len(val) // 2, BAG_MIN)), replace=False).tolist())
        in_bag = [val[i] for i in bag]
        picks = _greedy(in_bag, problem, val_y, size, key)
        kept = _scored(picks, in_bag, None, problem, val_y, None, key, keep_best=True).picks
        order += [bag[i] for i in picks[:kept]]
        ends.append(len(order))
    return order, ends


def _greedy(val: list[np.ndarray], problem: Problem, val_y: np.ndarray, size: int, key, distinct: int = 1) -> list[int]:
    """Indices picked by forward selection with replacement, starting from index 0 (the best); the first
    ``distinct`` picks are each of a member not picked before."""
    order, running = [0], val[0].copy()
    for p in range(2, size + 1):
        # Strictly better only: on a tie the earlier (better-ranked) member wins.
        best, best_key = None, None
        for i, v in enumerate(val):
            if p <= distinct and i in order:
                continue
            score = key(problem.scores((running + v) / p, val_y))
            if best_key is None or score > best_key:
                best, best_key = i, score
        order.append(best)
        running += val[best]
    return order
