"""Data-aware default search spaces: a preset chosen from the data's shape, problem and size.

A config without a ``[space]`` table (or with ``space.preset = "auto"``) searches the preset that
fits its data: ``tabular`` for samples of shape (F,), ``signal`` for (C, L), ``image`` for
(C, H, W). A named preset can be asked for directly, and the genes a ``[space]`` table declares
beside ``preset`` replace the preset's. A ``[space]`` table without ``preset`` is the classic space
(:data:`~evolve.search.space.DEFAULT_SPACE` under the table's genes), as before presets existed.

Each preset is a ``[space]`` table (the short forms of :mod:`evolve.search.space_config`) made from
the data's facts: widths and epochs scale with the training split's size, so small data gets small,
fast networks; and the cost of a training per row is bounded (:func:`bounded`), so that large samples
(images of hundreds of pixels a side, long signals) are convolved at a lower resolution and by
narrower networks. Why each range: docs/search-space.md, "Presets".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from evolve.errors import ConfigError

PRESETS = ("tabular", "signal", "image")
ASKS = ("auto", "classic", *PRESETS)  # what space.preset may say


@dataclass(frozen=True)
class DataFacts:
    """What a preset is chosen and scaled by."""

    sample_shape: tuple[int, ...]
    problem: str  # "classification" or "regression"
    n_train: int  # training rows (all nodes' together)
    folds: int = 0  # data.folds: each training fits on all but one fold of them

    @property
    def fit_rows(self) -> int:
        """The rows one training fits on."""
        return self.n_train * (self.folds - 1) // self.folds if self.folds > 1 else self.n_train


def choose(facts: DataFacts) -> tuple[str, str]:
    """The preset for ``facts`` and why, in a few words; ConfigError for a shape no preset fits."""
    shape, dims = tuple(facts.sample_shape), len(facts.sample_shape)
    if dims == 1:
        return "tabular", f"samples of shape {shape}: a table of {shape[0]} features"
    if dims == 2:
        return "signal", f"samples of shape {shape}: {shape[0]} channel(s) of {shape[1]} steps"
    if dims == 3:
        return "image", f"samples of shape {shape}: {shape[0]} channel(s) of {shape[1]}x{shape[2]} pixels"
    raise ConfigError(f"no preset fits samples of shape {shape}; declare a [space] table for them "
                      "(docs/search-space.md), or bring your own network")


def table(name: str, facts: DataFacts) -> dict:
    """The ``[space]`` table of preset ``name`` for ``facts``."""
    if name not in PRESETS:
        raise ConfigError(f"space.preset must be one of {', '.join(ASKS)}, got {name!r}")
    fits = {"tabular": 1, "signal": 2, "image": 3}[name]
    if len(facts.sample_shape) != fits:
        raise ConfigError(f"space.preset {name!r} is for samples of {fits} dimension(s); the data's are {tuple(facts.sample_shape)}")
    return bounded(by_rows(name, facts), facts)


def by_rows(name: str, facts: DataFacts) -> dict:
    """Preset ``name``'s table scaled to the rows alone, before :func:`bounded`."""
    return {"tabular": _tabular, "signal": _signal, "image": _image}[name](facts) | training(facts)


def _widths(facts: DataFacts, top: int) -> list[int]:
    """Widths up to ``top``, one step narrower for small data (under 5,000 training rows)."""
    widths = [16, 32, 64, 128, 256]
    top = top if facts.n_train >= 5000 else top // 2
    return [w for w in widths if w <= top][-4:]


STEPS = (1_000, 3_000)  # optimiser steps a training takes on small data (scripts/bench/study_steps.py; docs/search-space.md)
STEPS_FULL_UNDER, STEPS_NONE_FROM = 200, 1_000  # fit rows: the step budget holds in full under the first, fades out by the second


def _epochs(facts: DataFacts) -> dict:
    """Epochs enough for :data:`STEPS` optimiser steps at the middle batch size on small data (hundreds of epochs
    on 40 rows: a network needs thousands of steps to converge, not the few dozen that tens of epochs of a few
    batches give), fading out between :data:`STEPS_FULL_UNDER` and :data:`STEPS_NONE_FROM` rows per training
    into tens of epochs, fewer as an epoch grows (about the same number of optimiser steps)."""
    n = facts.n_train
    low, high = (20, 60) if n <= 2_000 else (10, 40) if n <= 20_000 else (5, 20) if n <= 200_000 else (2, 10)
    rows = max(facts.fit_rows, 1)
    share = min(1.0, max(0.0, math.log(STEPS_NONE_FROM / rows) / math.log(STEPS_NONE_FROM / STEPS_FULL_UNDER)))
    if share > 0:
        per_epoch = math.ceil(rows / batch_sizes(facts)[1])
        low, high = max(low, math.ceil(share * STEPS[0] / per_epoch)), max(high, math.ceil(share * STEPS[1] / per_epoch))
    return {"low": low, "high": high}


def batch_sizes(facts: DataFacts) -> list[int]:
    """Batches that fit the rows a training fits on: about a tenth of them in the middle (the published
    small-series recipes' min(n / 10, 16), Wang et al. 2017), a power of two from 4 to 64, with half and
    twice it beside; 64 to 512 past 20,000 rows. (A batch of 128 on 31 rows is one optimiser step an epoch.)"""
    rows = facts.fit_rows
    if rows > 20_000:
        return [64, 128, 256, 512]
    middle = int(min(64, max(4, 2 ** round(math.log2(max(rows, 1) / 10)))))
    return [max(2, middle // 2), middle, 2 * middle]


def training(facts: DataFacts) -> dict:
    """The training genes every preset has, scaled to the data: a user's model builder gets them too, unless its
    ``[space]`` declares them."""
    batches = batch_sizes(facts)
    return {
        "optimizer": ["adam", "adamw"],
        "learning_rate": {"low": 3e-4, "high": 1e-2, "log": True},
        "weight_decay": {"low": 1e-5, "high": 1e-2, "log": True},
        "schedule": ["constant", "cosine", "one_cycle"],
        "warmup": {"low": 0.0, "high": 0.2},
        "label_smoothing": {"low": 0.0, "high": 0.2},  # (fixed at 0 for a regression: SearchSpace.for_data)
        "batch_size": batches,
        "epochs": _epochs(facts),
    }


def _tabular(facts: DataFacts) -> dict:
    """MLPs with normalisation, dropout and residual blocks."""
    return {
        "family": "mlp",
        "depth": {"low": 1, "high": 4},
        "width": _widths(facts, 256),
        "activation": ["relu", "gelu", "silu"],
        "dropout": {"low": 0.0, "high": 0.4},
        "norm": ["none", "batch", "layer"],
        "residual": [False, True],
        "standardize": True,  # each feature by the training split's mean and deviation, kept in the network
    }


RNN_MAX_STEPS = 64  # the signal preset searches GRU/LSTM networks beside CNNs on series of at most this many steps


def _signal(facts: DataFacts) -> dict:
    """Residual 1-D CNNs with growing dilation and a global-average head (TCN-like); GRU/LSTM beside them on short
    series. On longer ones a recurrent network's step costs several CNN steps (one recurrence per time step) and it
    did not win: on bench_quality's signal set (128 steps) a CNN was the best network in 12 of 12 searches, and on
    GunPoint (150 steps) an LSTM took half a search's time at chance accuracy (docs/search-space.md)."""
    return {
        "family": ["cnn", "rnn"] if facts.sample_shape[-1] <= RNN_MAX_STEPS else "cnn",
        "depth": {"low": 2, "high": 5},
        "width": _widths(facts, 128),
        "activation": ["relu", "gelu", "silu"],
        "dropout": {"low": 0.0, "high": 0.3},
        "kernel_size": {"low": 3, "high": 9},
        "pooling": ["none", "max"],
        "dilation": ["none", "growing"],
        "head": "average",
        "norm": "batch",
        "residual": [False, True],
        "augment": ["none", "shift"],
        "cell": ["gru", "lstm"],
        "bidirectional": [False, True],
    }


def _image(facts: DataFacts) -> dict:
    """ResNet-like 2-D CNNs: residual blocks, batch norm, a choice of downsampling, a global-average head."""
    return {
        "family": "cnn",
        "depth": {"low": 2, "high": 5},
        "width": _widths(facts, 256),
        "activation": ["relu", "gelu", "silu"],
        "dropout": {"low": 0.0, "high": 0.3},
        "kernel_size": [3, 5],
        "pooling": ["max", "avg"],
        "dilation": "none",
        "head": "average",
        "norm": "batch",
        "residual": [False, True],
        "augment": ["none", "shift"],
    }


# Why these two: docs/search-space.md, "Presets" (a training row's cost).
ROW_MACS = 32e9  # the most multiply-adds a training row may cost over a training: the largest network's forward pass x its most epochs
MIN_SIDE = 32  # downsampling stops before a spatial size falls under this many positions (32x32 pixels: CIFAR's images)


def bounded(table: dict, facts: DataFacts) -> dict:
    """``table`` with the cost of a training per row (:func:`row_macs`) within :data:`ROW_MACS`: first a signal's or an
    image's input downsampled by 2, 4, 8, ... (while that lowers the cost and every spatial size keeps :data:`MIN_SIDE`
    positions), then the widest widths dropped (down to the narrowest). A training costs its rows times that, so that a
    network's cost grows with the rows and the folds, not with a sample's pixels or steps. Within the bound, ``table``
    is returned as it is."""
    shape, spatial = facts.sample_shape, facts.sample_shape[1:]
    while (cost := row_macs(table, shape)) > ROW_MACS and spatial and min(spatial) // (2 * table.get("downsample", 1)) >= MIN_SIDE:
        smaller = table | {"downsample": 2 * table.get("downsample", 1)}
        if row_macs(smaller, shape) >= cost:  # a recurrent network's cost: downsampling is for the CNNs
            break
        table = smaller
    while row_macs(table, shape) > ROW_MACS and len(table["width"]) > 1:
        table = table | {"width": table["width"][:-1]}
    return table


def row_macs(table: dict, sample_shape: tuple[int, ...]) -> float:
    """The multiply-adds a training of the table's largest network spends on each training row: its forward pass
    (:func:`sample_macs`) times the table's most epochs (the backward pass costs about twice the forward)."""
    def options(gene, default) -> list:  # a range by its high end
        value = table.get(gene, default)
        return [value["high"]] if isinstance(value, dict) else value if isinstance(value, list) else [value]

    largest = {"depth": max(options("depth", 1)), "width": max(options("width", 1)), "kernel_size": max(options("kernel_size", 3)),
               "pooling": "none" if "none" in options("pooling", "max") else "max", "downsample": table.get("downsample", 1),
               "cell": "lstm" if "lstm" in options("cell", "gru") else "gru", "bidirectional": True in options("bidirectional", False)}
    return max(sample_macs({**largest, "family": f}, sample_shape) for f in options("family", "mlp")) * max(options("epochs", 1))


def sample_macs(network: dict, sample_shape: tuple[int, ...]) -> float:
    """Multiply-adds of a built-in network's forward pass over one sample (its genes: ``family``, ``depth``, ``width``,
    and as they apply ``kernel_size``, ``pooling``, ``downsample``, ``cell``, ``bidirectional``): its linear,
    convolutional and recurrent layers, not the norms, activations, shortcuts or head (a few per cent more)."""
    channels, *spatial = sample_shape
    depth, width = network["depth"], network["width"]
    if network["family"] == "mlp":
        return math.prod(sample_shape) * width + (depth - 1) * width * width
    if network["family"] == "rnn":  # per step and direction: gates x (inputs + width) x width, in every layer
        gates, directions = (4 if network["cell"] == "lstm" else 3), (2 if network["bidirectional"] else 1)
        inputs = channels + (depth - 1) * width * directions
        return spatial[0] * directions * gates * width * (inputs + depth * width)
    positions = [-(-s // network["downsample"]) for s in spatial]
    total = 0.0
    for _ in range(depth):
        total += math.prod(positions) * channels * width * network["kernel_size"] ** len(positions)
        if network["pooling"] != "none" and min(positions) >= 2:  # halved after each block (ensemble.models._cnn)
            positions = [p // 2 for p in positions]
        channels = width
    return total
