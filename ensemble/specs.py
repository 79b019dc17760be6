"""Plain descriptions of a network and of its training: no torch in here.

The search (``evolve/``) builds these from genomes and sends them to workers as
plain dicts; only a worker turns them into torch modules and optimizers
(``models``, ``train``). Keeping them torch-free lets the search be imported,
tested and simulated without PyTorch.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

ACTIVATION_NAMES = ("relu", "gelu", "silu", "tanh", "elu", "leaky_relu")
FAMILIES = ("mlp", "cnn", "rnn")
CELLS = ("gru", "lstm")
OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")
# The sample layouts (shapes without the batch dimension) each family takes.
LAYOUTS = {"mlp": "any shape", "cnn": "(C, L) or (C, H, W)", "rnn": "(C, L): C features at each of L steps"}


@dataclass(frozen=True)
class NetworkSpec:
    """A network in a few numbers.

    * ``mlp``: ``depth`` hidden layers of ``width`` units, each followed by ``activation``;
    * ``cnn``: ``depth`` conv blocks of ``width`` channels (conv, batch norm, ``activation``, pooling);
    * ``rnn``: a ``cell`` ("gru" or "lstm") recurrent network of ``depth`` layers of ``width`` hidden
      units, ``bidirectional`` or not, read at its last step (``activation`` plays no part).

    ``dropout`` follows every hidden layer. ``cell`` and ``bidirectional`` only matter for ``rnn``.
    """

    family: str
    depth: int
    width: int
    activation: str = "relu"
    dropout: float = 0.0
    cell: str = "gru"
    bidirectional: bool = False

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown network family {self.family!r} (known: {', '.join(FAMILIES)})")
        if self.activation not in ACTIVATION_NAMES:
            raise ValueError(f"unknown activation {self.activation!r} (known: {', '.join(ACTIVATION_NAMES)})")
        if self.cell not in CELLS:
            raise ValueError(f"unknown recurrent cell {self.cell!r} (known: {', '.join(CELLS)})")
        if self.depth < 1 or self.width < 1 or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"invalid network size: depth={self.depth} width={self.width} dropout={self.dropout}")

    def canonical(self) -> NetworkSpec:
        """The same network with the settings its family ignores at their defaults.

        Two specs with the same canonical form build the same network, so the search can tell
        when a "new" genome would only train an old network again.
        """
        if self.family == "rnn":
            return replace(self, activation="relu")
        return replace(self, cell="gru", bidirectional=False)


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
    """The families that apply to samples of this shape (see :data:`LAYOUTS`)."""
    if len(sample_shape) == 2:
        return ("mlp", "cnn", "rnn")
    if len(sample_shape) == 3:
        return ("mlp", "cnn")
    return ("mlp",)
