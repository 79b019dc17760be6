"""Combine members' class probabilities into an ensemble prediction, with uncertainty.

All functions take numpy arrays: ``member_probs`` has shape (K, N, C) for K
members, N samples and C classes. The ensemble's prediction is the plain mean
of the members' probabilities; its uncertainty splits into an aleatoric part
(the members' own average entropy) and an epistemic part (their disagreement,
the mutual information between prediction and member).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPS = 1e-12


def accuracy(probs: np.ndarray, y: np.ndarray) -> float:
    """Fraction of samples whose most probable class is the label."""
    return float(np.mean(np.argmax(probs, axis=-1) == y))


def average_probabilities(member_probs: np.ndarray) -> np.ndarray:
    """The ensemble's class probabilities: the mean over members (axis 0)."""
    member_probs = np.asarray(member_probs, dtype=np.float64)
    if member_probs.ndim != 3 or member_probs.shape[0] == 0:
        raise ValueError(f"member_probs must have shape (K>0, N, C), got {member_probs.shape}")
    return member_probs.mean(axis=0)


def entropy(probs: np.ndarray) -> np.ndarray:
    """Shannon entropy in nats along the last axis."""
    return -np.sum(probs * np.log(np.clip(probs, EPS, 1.0)), axis=-1)


@dataclass(frozen=True)
class Uncertainty:
    """Per-sample uncertainty of an ensemble, in nats; ``total == aleatoric + epistemic``."""

    total: np.ndarray
    aleatoric: np.ndarray
    epistemic: np.ndarray

    def means(self) -> dict[str, float]:
        return {k: float(np.mean(getattr(self, k))) for k in ("total", "aleatoric", "epistemic")}


def uncertainty(member_probs: np.ndarray) -> Uncertainty:
    """Split the entropy of the mean prediction into the members' mean entropy and their disagreement."""
    member_probs = np.asarray(member_probs, dtype=np.float64)
    total = entropy(average_probabilities(member_probs))
    aleatoric = entropy(member_probs).mean(axis=0)
    return Uncertainty(total, aleatoric, np.maximum(total - aleatoric, 0.0))


def top_k(scores, k: int) -> list[int]:
    """Indices of the ``k`` highest scores, best first; ties keep the earlier index."""
    scores = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-scores, kind="stable")
    return [int(i) for i in order[: max(0, k)]]
