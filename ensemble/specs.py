"""Plain descriptions of a network and of its training: no torch in here.

The search (``evolve/``) builds these from genomes and sends them to workers as
plain dicts; only a worker turns them into torch modules and optimizers
(``models``, ``train``). Keeping them torch-free lets the search be imported,
tested and simulated without PyTorch.
"""
from __future__ import annotations

from dataclasses import dataclass

ACTIVATION_NAMES = ("relu", "gelu", "silu", "tanh", "elu", "leaky_relu")
FAMILIES = ("mlp", "cnn")
OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")


@dataclass(frozen=True)
class NetworkSpec:
    """``family`` is "mlp" or "cnn"; ``depth`` hidden layers or conv blocks of ``width`` units/channels."""

    family: str
    depth: int
    width: int
    activation: str = "relu"
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown network family {self.family!r} (known: {', '.join(FAMILIES)})")
        if self.activation not in ACTIVATION_NAMES:
            raise ValueError(f"unknown activation {self.activation!r} (known: {', '.join(ACTIVATION_NAMES)})")
        if self.depth < 1 or self.width < 1 or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"invalid network size: depth={self.depth} width={self.width} dropout={self.dropout}")


@dataclass(frozen=True)
class TrainSpec:
    """How to train: optimizer settings, batch size and number of epochs."""

    learning_rate: float
    batch_size: int
    epochs: int
    optimizer: str = "adam"
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r} (known: {', '.join(OPTIMIZERS)})")
        if not (self.learning_rate > 0 and self.batch_size >= 1 and self.epochs >= 1 and self.weight_decay >= 0):
            raise ValueError(f"invalid training settings: {self}")


def families_for(sample_shape: tuple[int, ...]) -> tuple[str, ...]:
    """The families that apply to samples of this shape: a CNN needs (C, L) or (C, H, W)."""
    return FAMILIES if len(sample_shape) in (2, 3) else ("mlp",)
