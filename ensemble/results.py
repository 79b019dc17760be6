"""How a training ended: the fields every evaluation has, declared once, and what a worker reports.

:class:`Outcome` declares the small part of a result (status, fitness, metrics, times, the
validation curve). The search's record of an evaluation (``evolve.search.records.Record``) extends
it with who was evaluated and when, and everything that stores or sends results derives its layout
from these declarations: each field carries a :data:`KINDS` tag (through :func:`column`) that tells
the run file, the wire header and the CSV how to hold it. Adding a field here adds it everywhere.

:class:`Evaluation` is what a worker reports for one network: an outcome, and, only for a network
that may enter the hall of fame, its payload (predictions on the validation and test splits and its
trained weights), so an ordinary result costs a few hundred bytes however large the network.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

# What a field holds, for the code that stores and sends it:
#   integer, real: one number (int64, float64); label: a short string of few distinct values
#   (a status); text: any string (a message); reals: a list of floats of any length (a curve);
#   vector: a list of floats whose length is fixed per run (a genome); pair: two ints (parents);
#   named: a dict of floats whose names vary between rows (metrics).
KINDS = ("integer", "real", "label", "text", "reals", "vector", "pair", "named")


def column(kind: str, **options) -> dataclasses.Field:
    """A dataclass field of the given kind (see :data:`KINDS`); ``options`` go to :func:`dataclasses.field`."""
    if kind not in KINDS:
        raise ValueError(f"unknown field kind {kind!r}")
    return field(metadata={"kind": kind}, **options)


def kinds(cls) -> dict[str, str]:
    """Each field of a dataclass declared with :func:`column`, and its kind, in declaration order."""
    return {f.name: f.metadata["kind"] for f in dataclasses.fields(cls)}


@dataclass(slots=True, kw_only=True)
class Outcome:
    """How one training ended."""

    status: str = column("label")  # "ok", "diverged", "error", "stopped" (early), "timeout"; the search adds "crashed"
    fitness: float = column("real")  # higher is better: validation accuracy, or -RMSE; -inf unless ok (stopped: its last)
    metrics: dict[str, float] = column("named", default_factory=dict)  # "val_accuracy", "test_loss", "params", ...
    seconds: float = column("real", default=0.0)  # training time on the worker
    epochs_done: int = column("integer", default=0)
    message: str = column("text", default="")  # why it failed, in one line
    curve: list[float] = column("reals", default_factory=list)  # validation fitness after each epoch, when watched

    @property
    def loss(self) -> float:
        """The tie-break between equal fitness: the validation log-loss (out of fold with data.folds); inf where
        there is none (a regression, a failed training). See ensemble.hall_of_fame.standing."""
        return self.metrics.get("val_loss", math.inf)

    def outcome(self) -> dict:
        """The :class:`Outcome` fields as keyword arguments (what a record of this result takes)."""
        return {name: getattr(self, name) for name in OUTCOME_FIELDS}


OUTCOME_FIELDS = tuple(kinds(Outcome))


@dataclass(slots=True, kw_only=True)
class Evaluation(Outcome):
    """What a worker reports for one network: its outcome and, when asked for, its payload."""

    val_pred: np.ndarray | None = field(default=None, repr=False)  # (N_val, outputs) float32
    test_pred: np.ndarray | None = field(default=None, repr=False)  # (N_test, outputs) float32
    weights: dict[str, np.ndarray] | None = field(default=None, repr=False)  # the trained state dict
    paused: dict[str, np.ndarray] | None = field(default=None, repr=False)  # a training paused at a rung: its state (ensemble.paused)

    @property
    def has_payload(self) -> bool:
        return self.val_pred is not None

    def drop_payload(self) -> Evaluation:
        """Forget the predictions and weights (the master did not want them); returns self."""
        self.val_pred = self.test_pred = self.weights = None
        return self

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


def failed_evaluation(message: str, status: str = "error", seconds: float = 0.0, epochs_done: int = 0) -> Evaluation:
    """The report of a network that did not finish: no metrics, no payload, the worst fitness."""
    return Evaluation(status=status, fitness=-math.inf, seconds=seconds, epochs_done=epochs_done, message=message)
