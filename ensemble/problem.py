"""What is being learned, and how a prediction is scored: classification or regression.

A problem owns what differs between the two: the size of the network's output,
the metrics, and the fitness the search maximises. Predictions are numpy arrays
of shape (N, outputs): class probabilities for classification, values in the
targets' own units for regression. Everything here is numpy (no torch), so the
search, the ensemble selection and the reports share one scoring code path with
the workers.

* :class:`Classification`: integer labels 0..C-1; metrics ``accuracy`` (an exact
  fraction in double precision) and ``loss`` (mean negative log-likelihood).
* :class:`Regression`: float targets of shape (N,) or (N, T); networks learn the
  targets standardised with the training split's mean and scale, and predict in
  the original units; metrics ``rmse`` and ``r2`` (uniform average over outputs,
  as scikit-learn's ``r2_score``; NaN, undefined, where a constant target is not fitted exactly).

The search optimises a problem's ``metric`` (``search.metric``): by default accuracy, or
RMSE for a regression; one of :data:`METRICS`; or a user's function named
``module:function``, called with the targets and the predictions (class probabilities
for a classification) as numpy arrays, returning a float, higher better unless the
function has ``higher_is_better = False``. Fitness is the metric, negated where lower
is better, so the search always maximises it.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, ClassVar, Union

import numpy as np

from .references import import_by_name, is_reference

LOG_FLOOR = 1e-12
ECE_BINS = 15  # equal-width bins of the expected calibration error, as Guo et al. (2017) use
# The built-in metrics, and whether higher is better; "log_loss" is the classifier's "loss" score.
METRICS = {
    "classification": {"accuracy": True, "balanced_accuracy": True, "macro_f1": True, "log_loss": False},
    "regression": {"rmse": False, "mae": False, "r2": True},
}
_USER_METRICS: dict[str, Callable] = {}


def user_metric(reference: str) -> Callable:
    """The user's metric function ``module:function``, imported once (UserCodeError in one line)."""
    if reference not in _USER_METRICS:
        _USER_METRICS[reference] = import_by_name(reference, "metric")
    return _USER_METRICS[reference]


def check_metric(kind: str, metric: str) -> None:
    """ValueError in one line unless ``metric`` is one a ``kind`` problem can optimise."""
    if metric not in METRICS[kind] and not is_reference(metric):
        raise ValueError(f"search.metric {metric!r} is not a {kind} metric (known: {', '.join(METRICS[kind])}, "
                         "or a function as 'module:function')")


class _Metric:
    """What a problem's chosen metric shares: its score's name, its direction, its fitness."""

    metric: str

    @property
    def metric_key(self) -> str:
        """The name of the chosen metric's score (a user's function: its name)."""
        if is_reference(self.metric):
            return self.metric.split(":")[1]
        return "loss" if self.metric == "log_loss" else self.metric

    @property
    def higher_is_better(self) -> bool:
        return self.user_higher if is_reference(self.metric) else METRICS[self.kind][self.metric]

    def fitness(self, scores: dict[str, float]) -> float:
        """What the search maximises: the chosen metric, negated where lower is better."""
        value = scores[self.metric_key]
        return value if self.higher_is_better else -value

    def better(self, a: float, b: float) -> bool:
        """Is value ``a`` of the chosen metric better than ``b``?"""
        return a > b if self.higher_is_better else a < b

    def _extra(self, pred: np.ndarray, y: np.ndarray, scores: dict[str, float], user: bool = True) -> dict[str, float]:
        """``scores`` with the chosen metric's, when it is not among them already (``user=False``: not a user's,
        which would import the user's code)."""
        if self.metric_key in scores or (not user and is_reference(self.metric)):
            return scores
        if is_reference(self.metric):
            value = float(user_metric(self.metric)(np.asarray(y), np.asarray(pred)))
        else:
            value = self._builtin(self.metric, pred, y)
        return {**scores, self.metric_key: value}


@dataclass(frozen=True)
class Classification(_Metric):
    num_classes: int
    metric: str = "accuracy"  # what the search optimises (METRICS, or "module:function")
    user_higher: bool = True  # a user's metric: is higher better (what its function says, kept so that reading a run imports nothing)

    kind: ClassVar[str] = "classification"

    def __post_init__(self) -> None:
        check_metric(self.kind, self.metric)

    @property
    def outputs(self) -> int:
        return self.num_classes

    @property
    def target_shape(self) -> tuple[int, ...]:
        return ()

    def scores(self, pred: np.ndarray, y: np.ndarray, user: bool = True) -> dict[str, float]:
        """``accuracy`` and ``loss`` of class probabilities ``pred`` (N, C) against labels ``y`` (N,), and the
        search's metric (a user's only with ``user``)."""
        pred, y = np.asarray(pred), np.asarray(y)
        correct = int(np.count_nonzero(np.argmax(pred, axis=-1) == y))
        picked = np.take_along_axis(pred, y[:, None].astype(np.int64), axis=-1)[:, 0].astype(np.float64)
        scores = {"accuracy": correct / y.shape[0], "loss": float(-np.mean(np.log(np.clip(picked, LOG_FLOOR, 1.0))))}
        return scores if self.metric == "accuracy" else self._extra(pred, y, scores, user)

    def calibration(self, pred: np.ndarray, y: np.ndarray, bins: int = ECE_BINS) -> dict[str, float]:
        """How well probabilities ``pred`` (N, C) are calibrated against labels ``y``: ``nll``, the mean
        negative log-likelihood, and ``ece``, the expected calibration error (Guo et al. 2017): over
        ``bins`` equal-width bins of the top probability, the gap between accuracy and mean confidence,
        weighted by each bin's share of the samples."""
        pred, y = np.asarray(pred, dtype=np.float64), np.asarray(y)
        confidence, correct = pred.max(axis=1), (np.argmax(pred, axis=1) == y).astype(np.float64)
        which = np.minimum((confidence * bins).astype(np.int64), bins - 1)
        gap = np.abs(np.bincount(which, correct, minlength=bins) - np.bincount(which, confidence, minlength=bins))
        return {"nll": self.scores(pred, y, user=False)["loss"], "ece": float(gap.sum() / max(1, len(y)))}

    def _builtin(self, metric: str, pred: np.ndarray, y: np.ndarray) -> float:
        """``balanced_accuracy`` (the mean recall over the classes present) or ``macro_f1`` (the mean F1
        over every class predicted or present), as scikit-learn computes them."""
        c = self.num_classes
        confusion = np.bincount(y.astype(np.int64) * c + np.argmax(pred, axis=-1), minlength=c * c).reshape(c, c).astype(np.float64)
        true, predicted, hits = confusion.sum(axis=1), confusion.sum(axis=0), np.diag(confusion)
        if metric == "balanced_accuracy":
            present = true > 0
            return float(np.mean(hits[present] / true[present]))
        seen = (true + predicted) > 0
        return float(np.mean(2 * hits[seen] / (true[seen] + predicted[seen])))

    def selection_key(self, scores: dict[str, float], criterion: str = "accuracy") -> tuple[float, ...]:
        """What ensemble selection maximises: accuracy, ties broken by the lower log-loss; or with
        ``criterion="loss"`` the lower log-loss (a proper scoring rule, which does not saturate on a
        small validation split), ties broken by accuracy; or with ``criterion="metric"`` the search's
        metric, ties broken by the lower log-loss."""
        if criterion == "loss":
            return (-scores["loss"], scores["accuracy"])
        if criterion == "metric":
            return (self.fitness(scores), -scores["loss"])
        return (scores["accuracy"], -scores["loss"])

    def to_dict(self) -> dict:
        return {"kind": self.kind, "num_classes": self.num_classes, "metric": self.metric, "user_higher": self.user_higher}


@dataclass(frozen=True)
class Regression(_Metric):
    target_shape: tuple[int, ...]  # () for y of shape (N,), (T,) for (N, T)
    mean: tuple[float, ...]  # per output, of the training targets
    scale: tuple[float, ...]  # per output: the training targets' standard deviation (1 where it is 0)
    metric: str = "rmse"  # what the search optimises (METRICS, or "module:function")
    user_higher: bool = True  # a user's metric: is higher better (see Classification)

    kind: ClassVar[str] = "regression"

    def __post_init__(self) -> None:
        check_metric(self.kind, self.metric)
        if not (len(self.mean) == len(self.scale) == self.outputs):
            raise ValueError(f"regression with {self.outputs} outputs needs as many means and scales")
        if not all(math.isfinite(m) for m in self.mean) or not all(math.isfinite(s) and s > 0 for s in self.scale):
            raise ValueError("regression mean and scale must be finite, and the scale positive")

    @classmethod
    def from_targets(cls, y_train: np.ndarray, metric: str = "rmse") -> Regression:
        """Standardisation fitted on the training targets (float64, so every rank computes the same)."""
        y = np.asarray(y_train, dtype=np.float64)
        flat = y.reshape(y.shape[0], -1)
        scale = flat.std(axis=0)
        scale[~(scale > 0)] = 1.0
        return cls(tuple(int(s) for s in y.shape[1:]), tuple(float(m) for m in flat.mean(axis=0)), tuple(float(s) for s in scale), metric)

    @property
    def outputs(self) -> int:
        return int(np.prod(self.target_shape, dtype=np.int64)) if self.target_shape else 1

    def scores(self, pred: np.ndarray, y: np.ndarray, user: bool = True) -> dict[str, float]:
        """``rmse`` over all outputs and ``r2`` averaged over outputs, in the targets' units, and the
        search's metric (a user's only with ``user``)."""
        pred = np.asarray(pred, dtype=np.float64).reshape(-1, self.outputs)
        y = np.asarray(y, dtype=np.float64).reshape(-1, self.outputs)
        sse = np.sum((pred - y) ** 2, axis=0)
        sst = np.sum((y - y.mean(axis=0)) ** 2, axis=0)
        # A constant target leaves R² undefined (a division by zero): NaN, unless the fit is perfect (1). Not
        # scikit-learn's force_finite 0, which reads as "no better than the mean" on a target with no variance.
        r2 = np.where(sst > 0, 1.0 - sse / np.where(sst > 0, sst, 1.0), np.where(sse == 0, 1.0, np.nan))
        scores = {"rmse": float(np.sqrt(sse.sum() / y.size)), "r2": float(r2.mean())}
        if self.metric in ("rmse", "r2"):
            return scores
        return self._extra(pred.reshape((-1, *self.target_shape)), y.reshape((-1, *self.target_shape)), scores, user)

    def _builtin(self, metric: str, pred: np.ndarray, y: np.ndarray) -> float:
        """``mae``: the mean absolute error over all outputs, in the targets' units."""
        return float(np.mean(np.abs(np.asarray(pred, dtype=np.float64) - np.asarray(y, dtype=np.float64))))

    def selection_key(self, scores: dict[str, float], criterion: str = "accuracy") -> tuple[float, ...]:
        """The lower RMSE (``criterion="metric"``: the search's metric)."""
        return (self.fitness(scores),) if criterion == "metric" else (-scores["rmse"],)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "target_shape": list(self.target_shape), "mean": list(self.mean), "scale": list(self.scale),
                "metric": self.metric, "user_higher": self.user_higher}


Problem = Union[Classification, Regression]
KINDS = ("classification", "regression")


def problem_from_dict(d: dict) -> Problem:
    """The inverse of ``to_dict``; raises ValueError for anything else."""
    kind = d.get("kind")
    if kind == "classification":
        return Classification(int(d["num_classes"]), str(d["metric"]), bool(d["user_higher"]))
    if kind == "regression":
        return Regression(tuple(int(t) for t in d["target_shape"]), tuple(float(m) for m in d["mean"]), tuple(float(s) for s in d["scale"]),
                          str(d["metric"]), bool(d["user_higher"]))
    raise ValueError(f"unknown problem kind {kind!r} (known: {', '.join(KINDS)})")


def problem_for(kind: str, y_train: np.ndarray, num_classes: int = 0, metric: str = "auto") -> Problem:
    """The problem a dataset poses: ``kind`` and ``num_classes`` come from the data plan; ``metric`` is
    what the search optimises ("auto": accuracy, or RMSE for a regression)."""
    higher = bool(getattr(user_metric(metric), "higher_is_better", True)) if is_reference(metric) else True
    if kind == "classification":
        return Classification(num_classes, "accuracy" if metric == "auto" else metric, higher)
    if kind == "regression":
        return dataclasses.replace(Regression.from_targets(y_train, "rmse" if metric == "auto" else metric), user_higher=higher)
    raise ValueError(f"unknown problem kind {kind!r} (known: {', '.join(KINDS)})")

