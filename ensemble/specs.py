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
NORMS = ("none", "batch", "layer")
POOLINGS = ("max", "avg", "none")
DILATIONS = ("none", "growing")  # a CNN's conv dilation: 1 in every block, or 1, 2, 4, ... (a TCN's)
HEADS = ("flatten", "average")  # what the linear head reads: a few positions of each map (an RNN: its last step), or the mean
OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")
SCHEDULES = ("constant", "cosine", "one_cycle")
AUGMENTS = ("none", "shift")  # training-time augmentation of signals and images
# The sample layouts (shapes without the batch dimension) each family takes.
LAYOUTS = {"mlp": "any shape", "cnn": "(C, L) or (C, H, W)", "rnn": "(C, L): C features at each of L steps"}


@dataclass(frozen=True)
class NetworkSpec:
    """A network in a few numbers.

    * ``mlp``: ``depth`` hidden layers (linear, ``norm``, ``activation``, dropout);
    * ``cnn``: ``depth`` conv blocks (``kernel_size`` conv, dilated by 1 or, with ``dilation="growing"``,
      by 2**i in block i; ``norm``, ``activation``, ``pooling``, dropout), then a linear head that reads
      up to 4 positions per spatial dimension of each map (``head="flatten"``) or each map's mean
      (``head="average"``, global average pooling);
    * ``downsample`` (a ``cnn``'s): the input averaged over blocks of ``downsample`` positions along each spatial
      dimension (a partial block at the end averaged over what it holds) before the first convolution, so
      that a large image or a long signal is convolved at a lower resolution; 1 keeps it as it is;
    * with ``standardize``, any family first standardises each input feature by the training split's
      mean and standard deviation, kept in the network (its first layer's buffers) so that whatever
      applies the network applies them too;
    * ``rnn``: a ``cell`` ("gru" or "lstm") recurrent network of ``depth`` layers, ``bidirectional``
      or not, read at its last step (``head="flatten"``) or as the mean of its last layer's outputs over
      every step (``head="average"``: a pattern anywhere in a long sequence reaches the head in one step,
      not through every state after it); ``activation``, ``norm`` and ``residual`` play no part.

    Layer ``i`` has ``widths[i]`` units or channels; ``widths`` may be left empty for ``width`` in
    every layer (an ``rnn`` always has one width). ``residual`` adds each block's input to its
    output (through a linear or 1x1 projection where the widths differ). ``norm`` is ``"none"``,
    ``"batch"`` or ``"layer"``; left as None it is each family's classic choice (batch norm in a
    CNN, none in an MLP).
    """

    family: str
    depth: int
    width: int
    activation: str = "relu"
    dropout: float = 0.0
    cell: str = "gru"
    bidirectional: bool = False
    widths: tuple = ()
    kernel_size: int = 3
    pooling: str = "max"
    norm: str | None = None
    residual: bool = False
    dilation: str = "none"
    head: str = "flatten"
    standardize: bool = False
    downsample: int = 1

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown network family {self.family!r} (known: {', '.join(FAMILIES)})")
        if self.norm is None:
            object.__setattr__(self, "norm", "batch" if self.family == "cnn" else "none")
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        for name, value, known in (("activation", self.activation, ACTIVATION_NAMES), ("recurrent cell", self.cell, CELLS),
                                   ("norm", self.norm, NORMS), ("pooling", self.pooling, POOLINGS),
                                   ("dilation", self.dilation, DILATIONS), ("head", self.head, HEADS)):
            if value not in known:
                raise ValueError(f"unknown {name} {value!r} (known: {', '.join(known)})")
        if self.depth < 1 or self.width < 1 or not 0.0 <= self.dropout < 1.0 or self.kernel_size < 1 \
                or self.downsample < 1:
            raise ValueError(f"invalid network size: depth={self.depth} width={self.width} dropout={self.dropout} kernel={self.kernel_size} "
                             f"downsample={self.downsample}")
        if self.widths and (len(self.widths) != self.depth or min(self.widths) < 1):
            raise ValueError(f"widths {self.widths} must give {self.depth} positive widths, one per layer")

    @property
    def layer_widths(self) -> tuple[int, ...]:
        """The width of each of the ``depth`` layers."""
        return self.widths or (self.width,) * self.depth

    def canonical(self) -> NetworkSpec:
        """The same network with the settings its family ignores at their defaults.

        Two specs with the same canonical form build the same network, so the search can tell
        when a "new" genome would only train an old network again.
        """
        widths = self.layer_widths
        uniform = self.family == "rnn" or len(set(widths)) == 1
        spec = replace(self, width=widths[0], widths=() if uniform else widths)
        if self.family != "cnn":
            spec = replace(spec, kernel_size=3, pooling="max", dilation="none", downsample=1, head=self.head if self.family == "rnn" else "flatten")
        if self.family == "rnn":
            return replace(spec, activation="relu", norm="none", residual=False)
        return replace(spec, cell="gru", bidirectional=False)


@dataclass(frozen=True)
class TrainSpec:
    """How to train: optimizer settings, batch size, number of epochs, and the learning-rate schedule.

    ``schedule``: ``"constant"``, ``"cosine"`` (annealed to zero by the last step) or ``"one_cycle"``
    (up from a 25th of the rate, then annealed to almost zero). ``warmup``: the fraction of the
    training's steps over which the rate first rises linearly (for ``one_cycle``, its rising phase;
    0.3 if left at 0). ``label_smoothing``: the weight moved from the true class to a uniform target in
    a classifier's cross-entropy (a regression ignores it). ``augment``: ``"shift"`` moves each
    training sample of a signal or an image by a random offset of up to an eighth of each spatial
    size (zeros filling in), a fresh one every batch; ``"none"`` trains on the samples as they are.
    """

    learning_rate: float
    batch_size: int
    epochs: int
    optimizer: str = "adam"
    weight_decay: float = 0.0
    schedule: str = "constant"
    warmup: float = 0.0
    label_smoothing: float = 0.0
    augment: str = "none"

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r} (known: {', '.join(OPTIMIZERS)})")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r} (known: {', '.join(SCHEDULES)})")
        if self.augment not in AUGMENTS:
            raise ValueError(f"unknown augmentation {self.augment!r} (known: {', '.join(AUGMENTS)})")
        if not (self.learning_rate > 0 and self.batch_size >= 1 and self.epochs >= 1 and self.weight_decay >= 0
                and 0.0 <= self.warmup < 1.0 and 0.0 <= self.label_smoothing < 1.0):
            raise ValueError(f"invalid training settings: {self}")


BUILDER = "builder"  # the settings key that names a user's network builder (ensemble.builders), "module:function"
GENES = "genes"  # ... and the one that holds that network's genes


def is_user_network(network: dict) -> bool:
    """Do these network settings name a user's builder (rather than a built-in family's spec)?"""
    return BUILDER in network


def network_spec(network: dict) -> NetworkSpec | dict:
    """What training takes: a built-in family's :class:`NetworkSpec`, or a user network's settings as they are."""
    return dict(network) if is_user_network(network) else NetworkSpec(**network)


def families_for(sample_shape: tuple[int, ...]) -> tuple[str, ...]:
    """The families that apply to samples of this shape (see :data:`LAYOUTS`)."""
    if len(sample_shape) == 2:
        return ("mlp", "cnn", "rnn")
    if len(sample_shape) == 3:
        return ("mlp", "cnn")
    return ("mlp",)
