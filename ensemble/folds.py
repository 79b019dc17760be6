"""Cross-validation: which fold each training row is in, and a network's k fold trainings made one.

With ``data.folds = k`` a network is trained k times, each time on the training rows outside one
fold and scored on the rows inside it. Its fitness is the mean of the folds' fitness, and its
predictions on the training split are *out of fold*: each row predicted by the model that did not
see it. Those predictions cover every training row, so the hall of fame and the ensemble choose on
all of them instead of on a small validation split (AutoGluon's k-fold bagging). The k models
stay together as one member of the ensemble, their predictions averaged (:func:`bagged`).

Every rank computes the same folds from the labels alone (:func:`assign_folds`: stratified by
class, shuffled by the split seed), so a fold task carries two numbers, and the master can put
the out-of-fold predictions back in row order. Numpy only.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .problem import Problem
from .results import Evaluation

FOLD_PREFIX = "fold"  # a folded member's weights: "fold<j>/<name>", one state dict per fold


def assign_folds(y: np.ndarray, folds: int, seed: int, stratified: bool) -> np.ndarray:
    """The fold (0..folds-1) of each row of ``y``: rows shuffled by ``seed``, then dealt out in turn, class
    by class when ``stratified`` (each fold holds each class's share, give or take a row)."""
    n = len(y)
    if folds < 2 or n < folds:
        raise ValueError(f"{folds} folds need at least {folds} training rows, and there are {n}")
    rng = np.random.default_rng([seed, folds])
    order = rng.permutation(n)
    if stratified:
        labels = np.asarray(y)[order]
        order = order[np.argsort(labels, kind="stable")]  # each class's rows together, shuffled within it
    fold = np.empty(n, dtype=np.int64)
    fold[order] = np.arange(n) % folds
    return fold


def bagged(preds: Sequence[np.ndarray]) -> np.ndarray:
    """The mean of a folded member's predictions, float32, added in fold order and divided once: the one
    arithmetic the master, ``evens predict`` and an exported member all use, so their answers agree to the bit."""
    out = np.array(preds[0], dtype=np.float32, copy=True)
    for p in preds[1:]:
        out += np.asarray(p, dtype=np.float32)
    out /= np.float32(len(preds))
    return out


def fold_weights(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The fold models' state dicts as one flat dict, ``fold<j>/<name>`` (how a folded member stores them)."""
    return {f"{FOLD_PREFIX}{j}/{name}": w for j, weights in enumerate(parts) for name, w in weights.items()}


def split_fold_weights(weights: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """The inverse of :func:`fold_weights`: one state dict per fold, in fold order; [weights] for a member
    of one model. ValueError for a mix, or folds missing."""
    folded = [name.startswith(FOLD_PREFIX) and "/" in name for name in weights]
    if not any(folded):
        return [weights]
    if not all(folded):
        raise ValueError("its weights mix fold models and a single model")
    parts: dict[int, dict[str, np.ndarray]] = {}
    for name, w in weights.items():
        head, _, rest = name.partition("/")
        if not head[len(FOLD_PREFIX):].isdigit():
            raise ValueError(f"weight {name!r} names no fold")
        parts.setdefault(int(head[len(FOLD_PREFIX):]), {})[rest] = w
    if sorted(parts) != list(range(len(parts))):
        raise ValueError(f"its fold models are {sorted(parts)}, not 0..{len(parts) - 1}")
    return [parts[j] for j in range(len(parts))]


def combine_folds(parts: Sequence[Evaluation], fold: np.ndarray, problem: Problem, train_y: np.ndarray,
                  test_y: np.ndarray, refit: Evaluation | None = None) -> Evaluation:
    """One network's evaluation from its k successful fold trainings (``parts[j]``: fold j's, with its payload:
    predictions on fold j's rows and on test, and weights), given each training row's ``fold``.

    Fitness is the mean of the folds' (and so is each ``val_`` metric); ``fold_std`` is the folds' spread
    (sample standard deviation); ``oof_`` metrics score the out-of-fold predictions over every training row,
    and ``test_`` ones the bagged test predictions (what the member predicts). The payload: the
    out-of-fold predictions as ``val_pred`` (row order), the bagged ``test_pred``, and the fold weights. With
    ``refit`` (the network trained once more on every training row: ``ensemble.refit``), the member is that one
    model: its test predictions and weights replace the bagged ones (the choice is still made out of fold)."""
    k = len(parts)
    fitness = [p.fitness for p in parts]
    metrics = {name: float(np.mean([p.metrics[name] for p in parts])) for name in parts[0].metrics}  # (test_: replaced below)
    metrics["fold_std"] = float(np.std(fitness, ddof=1)) if k > 1 else 0.0
    spent = list(parts) + ([refit] if refit is not None else [])
    ev = Evaluation(status="ok", fitness=float(np.mean(fitness)), metrics=metrics, seconds=sum(p.seconds for p in spent),
                    epochs_done=sum(p.epochs_done for p in spent), curve=mean_curve([p.curve for p in parts]))
    if all(p.has_payload for p in parts):
        oof = np.zeros((len(fold), parts[0].val_pred.shape[1]), dtype=np.float32)
        for j, p in enumerate(parts):
            oof[fold == j] = p.val_pred
        test = bagged([p.test_pred for p in parts]) if refit is None else refit.test_pred
        metrics.update({f"oof_{name}": v for name, v in problem.scores(oof, train_y).items()})
        metrics.update({f"test_{name}": v for name, v in problem.scores(test, test_y).items()})
        ev.val_pred, ev.test_pred = oof, test
        ev.weights = fold_weights([p.weights or {} for p in parts]) if refit is None else dict(refit.weights or {})
    return ev


def mean_curve(curves: Sequence[Sequence[float]]) -> list[float]:
    """The folds' validation curves averaged epoch by epoch, over the epochs every fold reached (what the
    early-stopping rule learns from); [] if any fold had none."""
    if not curves or not all(curves):
        return []
    length = min(len(c) for c in curves)
    return [math.fsum(c[e] for c in curves) / len(curves) for e in range(length)]
