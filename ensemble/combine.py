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

The sums are exact. Floating-point addition is not associative, so a sum of
partial sums would change in its last bits with the number of ranks, and a
number that ``evens report`` printed could not be reproduced by ``evens predict``
on three ranks. Each member's weighted contribution is therefore split, exactly,
into two integers on fixed grids of 2**-20 and 2**-72 (:func:`to_fixed`); integer
sums are the same in any order, and the result is turned back into a float64 once,
at the end. Regression sums run in units of a power of two near the targets'
spread (:func:`sum_unit`), so that the scaling itself is exact: an ensemble of one
network predicts exactly what that network does.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .problem import Problem

EPS = 1e-12
Allreduce = Callable[[np.ndarray], np.ndarray]
UNCERTAINTY = {"classification": ("entropy", "aleatoric", "epistemic", "disagreement"), "regression": ("std",)}

_HI, _LO = 2.0**20, 2.0**72  # the two fixed-point grids
VALUE_LIMIT = 2.0**32  # |weighted contribution| below this: 1,024 members' high limbs stay inside int64
Z_LIMIT = 2.0**15  # regression: members' predictions within this many sum units of the training targets' mean


def sum_unit(problem: Problem) -> np.ndarray:
    """Regression: per output, the power of two nearest the training targets' standard deviation.

    Dividing by it is exact, and a sound network's predictions lie within a few units of the
    targets' mean, so their squared spread stays far inside the fixed-point range.
    """
    return np.exp2(np.round(np.log2(np.asarray(problem.scale, dtype=np.float64))))


def to_fixed(values: np.ndarray) -> np.ndarray:
    """``values`` (float64, |v| < VALUE_LIMIT) as exact int64 limbs (..., 2): v == hi / 2**20 + lo / 2**72,
    up to rounding below 2**-72. Sums of limbs are exact and independent of their order."""
    v = np.clip(np.asarray(values, dtype=np.float64), -VALUE_LIMIT, VALUE_LIMIT)
    hi = np.floor(v * _HI)  # v on the coarse grid: exact, a power-of-two scaling and a floor
    lo = np.rint((v - hi / _HI) * _LO)  # the rest (below 2**-20, so below 2**52 on the fine grid): exact
    return np.stack([hi, lo], axis=-1).astype(np.int64)


def from_fixed(limbs: np.ndarray) -> np.ndarray:
    return limbs[..., 0] / _HI + limbs[..., 1] / _LO


def normalized(probs: np.ndarray) -> np.ndarray:
    """Rows made to sum to 1 (in float64)."""
    return probs / np.maximum(np.sum(probs, axis=-1, keepdims=True), EPS)


def entropy(probs: np.ndarray) -> np.ndarray:
    """Shannon entropy in nats along the last axis, of ``probs`` renormalized to sum to 1.

    A network's float32 softmax sums to 1 only to ~1e-7, enough to put an entropy computed as is
    above log(classes); the rows are made distributions first (in float64), so it never does.
    """
    return _entropy_of_distributions(normalized(probs))


def _entropy_of_distributions(p: np.ndarray) -> np.ndarray:
    return -np.sum(p * np.log(np.clip(p, EPS, 1.0)), axis=-1)


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
    k, n = problem.outputs, n_samples
    preds = [np.asarray(p, dtype=np.float64).reshape(n, k) for p in member_preds]
    if problem.kind == "classification":
        # the weighted mean as the members give it (an ensemble of one is that network exactly), the
        # weighted mean of the members as distributions (rows renormalized: the uncertainties are
        # those of distributions, so total = aleatoric + epistemic holds), and their weighted entropy
        sums = np.zeros((n, 2 * k + 1, 2), dtype=np.int64)
        for p, w in zip(preds, weights):
            q = normalized(p)
            sums[:, :k] += to_fixed(w * p)
            sums[:, k:2 * k] += to_fixed(w * q)
            sums[:, 2 * k] += to_fixed(w * _entropy_of_distributions(q))
        sums = from_fixed(_summed(sums, allreduce))
        mean, as_distributions, aleatoric = sums[:, :k], sums[:, k:2 * k], sums[:, 2 * k]
        label = np.argmax(mean, axis=1)
        disagreeing = np.zeros((n, 2), dtype=np.int64)
        for p, w in zip(preds, weights):
            disagreeing += to_fixed(w * (np.argmax(p, axis=1) != label))
        total = entropy(as_distributions)
        return {
            "probabilities": mean,
            "label": label,
            "entropy": total,
            "aleatoric": aleatoric,
            "epistemic": np.maximum(total - aleatoric, 0.0),
            "disagreement": from_fixed(_summed(disagreeing, allreduce)),
        }
    unit = sum_unit(problem)
    z = [p / unit for p in preds]  # exact: a power of two
    mean = np.zeros((n, k, 2), dtype=np.int64)
    for zi, w in zip(z, weights):
        mean += to_fixed(w * zi)
    mean_z = from_fixed(_summed(mean, allreduce))
    spread = np.zeros((n, k, 2), dtype=np.int64)
    for zi, w in zip(z, weights):
        spread += to_fixed(w * (zi - mean_z) ** 2)
    std_z = np.sqrt(from_fixed(_summed(spread, allreduce)))
    shape = (n,) + problem.target_shape
    return {"mean": (mean_z * unit).reshape(shape), "std": (std_z * unit).reshape(shape)}


def ensemble_prediction(problem: Problem, combined: dict[str, np.ndarray]) -> np.ndarray:
    """The part of :func:`combine`'s answer that is scored: (N, outputs) probabilities or values."""
    if problem.kind == "classification":
        return combined["probabilities"]
    return combined["mean"].reshape(len(combined["mean"]), problem.outputs)


def mean_uncertainty(problem: Problem, combined: dict[str, np.ndarray]) -> dict[str, float]:
    """Each uncertainty array of :func:`combine`'s answer, averaged over samples (for reports)."""
    return {name: float(np.mean(combined[name])) for name in UNCERTAINTY[problem.kind]}
