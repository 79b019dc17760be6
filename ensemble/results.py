"""What a worker reports for one network: plain numbers and numpy arrays, no torch."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Evaluation:
    """What a worker reports for one network."""

    status: str  # "ok", "diverged" or "error"
    val_accuracy: float
    val_loss: float
    test_accuracy: float
    seconds: float
    epochs_done: int
    val_probs: np.ndarray = field(repr=False)
    test_probs: np.ndarray = field(repr=False)
    message: str = ""
