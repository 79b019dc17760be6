"""Combine members' predictions into the ensemble's, with per-sample uncertainty.

The ensemble's prediction is the weighted mean of its members' predictions
(weights sum to 1). Its uncertainty, per sample:

* classification: the entropy of the mean prediction (``entropy``, in nats) splits
  into the members' mean entropy (``aleatoric``: noise every member sees) and the
  rest (``epistemic``: the mutual information between prediction and member, their
  disagreement); ``disagreement`` is the weight of the members whose own top class
  differs from the ensemble's;
* regression: the weighted standard deviation of the members' predictions (``std``)
  around the ensemble's ``mean``.

:func:`combine` takes only *some* members when the ensemble is spread over MPI
ranks: ``allreduce`` then sums partial results across ranks (any function from an
array to the element-wise sum of that array over ranks). Each quantity is a sum
over members, so one call per batch on every rank gives every rank the whole
ensemble's answer, and with ``allreduce=None`` the same code serves one process.
Accumulation is in double precision, member by member, in the order given.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .problem import Problem

EPS = 1e-12
Allreduce = Callable[[np.ndarray], np.ndarray]
UNCERTAINTY = {"classification": ("entropy", "aleatoric", "epistemic", "disagreement"), "regression": ("std",)}


def entropy(probs: np.ndarray) -> np.ndarray:
    """Shannon entropy in nats along the last axis."""
    return -np.sum(probs * np.log(np.clip(probs, EPS, 1.0)), axis=-1)


def _summed(partial: np.ndarray, allreduce: Allreduce | None) -> np.ndarray:
    return partial if allreduce is None else allreduce(partial)


def combine(
    problem: Problem,
    member_preds: Sequence[np.ndarray],
    weights: Sequence[float],
    n_samples: int,
    allreduce: Allreduce | None = None,
) -> dict[str, np.ndarray]:
    """The ensemble's prediction and uncertainty for ``n_samples`` samples.

    ``member_preds[i]`` is member i's prediction, (n_samples, outputs): probabilities or values.
    Returns numpy arrays named as in the prediction file: ``probabilities``, ``label``, ``entropy``,
    ``aleatoric``, ``epistemic``, ``disagreement`` (classification) or ``mean``, ``std`` (regression,
    shaped (N,) + the targets' shape).
    """
    if len(member_preds) != len(weights):
        raise ValueError(f"{len(member_preds)} member predictions but {len(weights)} weights")
    k = problem.outputs
    preds = [np.asarray(p, dtype=np.float64).reshape(n_samples, k) for p in member_preds]
    if problem.kind == "classification":
        sums = np.zeros((n_samples, k + 1))  # the weighted mean, and the weighted members' entropy
        for p, w in zip(preds, weights):
            sums[:, :k] += w * p
            sums[:, k] += w * entropy(p)
        sums = _summed(sums, allreduce)
        mean, aleatoric = sums[:, :k], sums[:, k]
        label = np.argmax(mean, axis=1)
        disagreeing = np.zeros(n_samples)
        for p, w in zip(preds, weights):
            disagreeing += w * (np.argmax(p, axis=1) != label)
        total = entropy(mean)
        return {
            "probabilities": mean,
            "label": label,
            "entropy": total,
            "aleatoric": aleatoric,
            "epistemic": np.maximum(total - aleatoric, 0.0),
            "disagreement": _summed(disagreeing, allreduce),
        }
    mean = np.zeros((n_samples, k))
    for p, w in zip(preds, weights):
        mean += w * p
    mean = _summed(mean, allreduce)
    spread = np.zeros((n_samples, k))
    for p, w in zip(preds, weights):
        spread += w * (p - mean) ** 2
    shape = (n_samples,) + problem.target_shape
    return {"mean": mean.reshape(shape), "std": np.sqrt(_summed(spread, allreduce)).reshape(shape)}


def ensemble_prediction(problem: Problem, combined: dict[str, np.ndarray]) -> np.ndarray:
    """The part of :func:`combine`'s answer that is scored: (N, outputs) probabilities or values."""
    if problem.kind == "classification":
        return combined["probabilities"]
    return combined["mean"].reshape(len(combined["mean"]), problem.outputs)


def mean_uncertainty(problem: Problem, combined: dict[str, np.ndarray]) -> dict[str, float]:
    """Each uncertainty array of :func:`combine`'s answer, averaged over samples (for reports)."""
    return {name: float(np.mean(combined[name])) for name in UNCERTAINTY[problem.kind]}
