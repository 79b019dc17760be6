"""What is being learned, and how a prediction is scored: classification or regression.

A problem owns what differs between the two: the size of the network's output,
the metrics, and the fitness the search maximises. Predictions are numpy arrays
of shape (N, outputs): class probabilities for classification, values in the
targets' own units for regression. Everything here is numpy (no torch), so the
search, the ensemble selection and the reports share one scoring code path with
the workers.

* :class:`Classification`: integer labels 0..C-1; metrics ``accuracy`` (an exact
  fraction in double precision) and ``loss`` (mean negative log-likelihood);
  fitness is accuracy.
* :class:`Regression`: float targets of shape (N,) or (N, T); networks learn the
  targets standardised with the training split's mean and scale, and predict in
  the original units; metrics ``rmse`` and ``r2`` (uniform average over outputs,
  as scikit-learn's ``r2_score``); fitness is ``-rmse``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Union

import numpy as np

LOG_FLOOR = 1e-12


@dataclass(frozen=True)
class Classification:
    num_classes: int

    kind: ClassVar[str] = "classification"
    metric: ClassVar[str] = "accuracy"  # the headline metric; higher is better
    metric_names: ClassVar[tuple[str, ...]] = ("accuracy", "loss")

    @property
    def outputs(self) -> int:
        return self.num_classes

    @property
    def target_shape(self) -> tuple[int, ...]:
        return ()

    def scores(self, pred: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """``accuracy`` and ``loss`` of class probabilities ``pred`` (N, C) against labels ``y`` (N,)."""
        pred, y = np.asarray(pred), np.asarray(y)
        correct = int(np.count_nonzero(np.argmax(pred, axis=-1) == y))
        picked = np.take_along_axis(pred, y[:, None].astype(np.int64), axis=-1)[:, 0].astype(np.float64)
        return {"accuracy": correct / y.shape[0], "loss": float(-np.mean(np.log(np.clip(picked, LOG_FLOOR, 1.0))))}

    def fitness(self, scores: dict[str, float]) -> float:
        return scores["accuracy"]

    def selection_key(self, scores: dict[str, float], criterion: str = "accuracy") -> tuple[float, ...]:
        """What ensemble selection maximises: accuracy, ties broken by the lower log-loss; or with
        ``criterion="loss"`` the lower log-loss (a proper scoring rule, which does not saturate on a
        small validation split), ties broken by accuracy."""
        if criterion == "loss":
            return (-scores["loss"], scores["accuracy"])
        return (scores["accuracy"], -scores["loss"])

    def better(self, a: float, b: float) -> bool:
        """Is headline metric value ``a`` better than ``b``?"""
        return a > b

    def to_dict(self) -> dict:
        return {"kind": self.kind, "num_classes": self.num_classes}


@dataclass(frozen=True)
class Regression:
    target_shape: tuple[int, ...]  # () for y of shape (N,), (T,) for (N, T)
    mean: tuple[float, ...]  # per output, of the training targets
    scale: tuple[float, ...]  # per output: the training targets' standard deviation (1 where it is 0)

    kind: ClassVar[str] = "regression"
    metric: ClassVar[str] = "rmse"  # lower is better
    metric_names: ClassVar[tuple[str, ...]] = ("rmse", "r2")

    def __post_init__(self) -> None:
        if not (len(self.mean) == len(self.scale) == self.outputs):
            raise ValueError(f"regression with {self.outputs} outputs needs as many means and scales")
        if not all(math.isfinite(m) for m in self.mean) or not all(math.isfinite(s) and s > 0 for s in self.scale):
            raise ValueError("regression mean and scale must be finite, and the scale positive")

    @classmethod
    def from_targets(cls, y_train: np.ndarray) -> Regression:
        """Standardisation fitted on the training targets (float64, so every rank computes the same)."""
        y = np.asarray(y_train, dtype=np.float64)
        flat = y.reshape(y.shape[0], -1)
        scale = flat.std(axis=0)
        scale[~(scale > 0)] = 1.0
        return cls(tuple(int(s) for s in y.shape[1:]), tuple(float(m) for m in flat.mean(axis=0)), tuple(float(s) for s in scale))

    @property
    def outputs(self) -> int:
        return int(np.prod(self.target_shape, dtype=np.int64)) if self.target_shape else 1

    def scores(self, pred: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """``rmse`` over all outputs and ``r2`` averaged over outputs, in the targets' units."""
        pred = np.asarray(pred, dtype=np.float64).reshape(-1, self.outputs)
        y = np.asarray(y, dtype=np.float64).reshape(-1, self.outputs)
        sse = np.sum((pred - y) ** 2, axis=0)
        sst = np.sum((y - y.mean(axis=0)) ** 2, axis=0)
        # A constant target: r2 is 1 for a perfect fit and 0 otherwise (scikit-learn's force_finite).
        r2 = np.where(sst > 0, 1.0 - sse / np.where(sst > 0, sst, 1.0), np.where(sse == 0, 1.0, 0.0))
        return {"rmse": float(np.sqrt(sse.sum() / y.size)), "r2": float(r2.mean())}

    def fitness(self, scores: dict[str, float]) -> float:
        return -scores["rmse"]

    def selection_key(self, scores: dict[str, float], criterion: str = "accuracy") -> tuple[float, ...]:
        """The lower RMSE (a regression has one criterion)."""
        return (-scores["rmse"],)

    def better(self, a: float, b: float) -> bool:
        return a < b

    def to_dict(self) -> dict:
        return {"kind": self.kind, "target_shape": list(self.target_shape), "mean": list(self.mean), "scale": list(self.scale)}


Problem = Union[Classification, Regression]
KINDS = ("classification", "regression")


def problem_from_dict(d: dict) -> Problem:
    """The inverse of ``to_dict``; raises ValueError for anything else."""
    kind = d.get("kind")
    if kind == "classification":
        return Classification(int(d["num_classes"]))
    if kind == "regression":
        return Regression(tuple(int(t) for t in d["target_shape"]), tuple(float(m) for m in d["mean"]), tuple(float(s) for s in d["scale"]))
    raise ValueError(f"unknown problem kind {kind!r} (known: {', '.join(KINDS)})")


def problem_for(kind: str, y_train: np.ndarray, num_classes: int = 0) -> Problem:
    """The problem a dataset poses: ``kind`` and ``num_classes`` come from the data plan."""
    if kind == "classification":
        return Classification(num_classes)
    if kind == "regression":
        return Regression.from_targets(y_train)
    raise ValueError(f"unknown problem kind {kind!r} (known: {', '.join(KINDS)})")

