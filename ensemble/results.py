"""What a worker reports for one network: plain numbers and numpy arrays, no torch.

Every evaluation has a small header (status, fitness, metrics, times). Only a
network that may enter the hall of fame also carries its payload: predictions on
the validation and test splits and its trained weights. Everything else leaves
them ``None``, so an ordinary result costs a few hundred bytes however large the
network or the data.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

@dataclass
class Evaluation:
    """What a worker reports for one network."""

    status: str  # "ok", "diverged", "error", "stopped" (early, by the median rule) or "timeout"
    fitness: float  # higher is better: validation accuracy, or -RMSE; the last one when stopped; else -inf unless ok
    metrics: dict[str, float]  # "val_accuracy", "test_loss", "val_rmse", ...: empty unless ok (val only when stopped)
    seconds: float
    epochs_done: int
    message: str = ""
    curve: list[float] = field(default_factory=list)  # validation fitness after each epoch, when it was watched
    val_pred: np.ndarray | None = field(default=None, repr=False)  # (N_val, outputs) float32
    test_pred: np.ndarray | None = field(default=None, repr=False)  # (N_test, outputs) float32
    weights: dict[str, np.ndarray] | None = field(default=None, repr=False)  # the trained state dict

    @property
    def has_payload(self) -> bool:
        return self.val_pred is not None

    def drop_payload(self) -> Evaluation:
        """Forget the predictions and weights (the master did not want them); returns self."""
        self.val_pred = self.test_pred = self.weights = None
        return self

    def header(self) -> dict:
        """The small part, as plain Python values."""
        return {
            "status": self.status,
            "fitness": float(self.fitness),
            "metrics": {k: float(v) for k, v in self.metrics.items()},
            "seconds": float(self.seconds),
            "epochs_done": int(self.epochs_done),
            "message": self.message,
            "curve": [float(f) for f in self.curve],
        }

    def payload(self) -> dict[str, np.ndarray]:
        """Predictions and weights as one flat dict of named arrays (weights under ``w/``)."""
        if not self.has_payload:
            return {}
        arrays = {"val_pred": self.val_pred, "test_pred": self.test_pred}
        arrays.update({f"w/{name}": w for name, w in (self.weights or {}).items()})
        return arrays

    def take_payload(self, payload: dict[str, np.ndarray]) -> Evaluation:
        """Set the predictions and weights from what :meth:`payload` gave (its inverse); returns self."""
        self.val_pred, self.test_pred = payload["val_pred"], payload["test_pred"]
        self.weights = {name[2:]: w for name, w in payload.items() if name.startswith("w/")}
        return self

    @classmethod
    def from_parts(cls, header: dict, payload: dict[str, np.ndarray] | None = None) -> Evaluation:
        """The inverse of :meth:`header` and :meth:`payload`."""
        ev = cls(**header)
        return ev.take_payload(payload) if payload else ev


def failed_evaluation(message: str, status: str = "error", seconds: float = 0.0, epochs_done: int = 0) -> Evaluation:
    """The record of a network that did not finish: no metrics, no payload, the worst fitness."""
    return Evaluation(status, -math.inf, {}, seconds, epochs_done, message)
