"""Networks built from a small, explicit description.

A :class:`NetworkSpec` names a family and its size; :func:`build_network` turns
it into a ``torch.nn.Module`` for a given sample shape. ``mlp`` works on any
shape (it flattens); ``cnn`` convolves over the spatial dimensions that a sample
has: 1-D for (C, L), 2-D for (C, H, W); ``rnn`` reads a (C, L) sample as L steps
of C features.
"""
from __future__ import annotations

import torch
from torch import nn

from .specs import ACTIVATION_NAMES, FAMILIES, LAYOUTS, NetworkSpec, families_for

ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
}
assert tuple(ACTIVATIONS) == ACTIVATION_NAMES
__all__ = ["ACTIVATIONS", "FAMILIES", "NetworkSpec", "Recurrent", "Standardize", "build_network", "families_for"]
MAX_POOLED_SIDE = 4  # the CNN head sees at most 4 positions per spatial dimension


class Residual(nn.Module):
    """``block(x) + shortcut(x)``: the shortcut is the identity, or a projection where the widths differ."""

    def __init__(self, block: nn.Module, shortcut: nn.Module):
        super().__init__()
        self.block, self.shortcut = block, shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x) + self.shortcut(x)


def _norm(kind: str, width: int, dims: int) -> list[nn.Module]:
    """The normalisation layer ``kind`` names for ``width`` features (dims 0: a vector; 1, 2: a signal, an image)."""
    if kind == "batch":
        return [(nn.BatchNorm1d, nn.BatchNorm1d, nn.BatchNorm2d)[dims](width)]
    if kind == "layer":  # over all of a sample's features; GroupNorm(1, C) is layer norm for feature maps
        return [nn.LayerNorm(width) if dims == 0 else nn.GroupNorm(1, width)]
    return []


def _mlp(spec: NetworkSpec, sample_shape: tuple[int, ...], outputs: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    features = int(torch.tensor(sample_shape).prod())
    for width in spec.layer_widths:
        block = [nn.Linear(features, width), *_norm(spec.norm, width, 0), ACTIVATIONS[spec.activation]()]
        if spec.residual:
            shortcut = nn.Identity() if features == width else nn.Linear(features, width, bias=False)
            block = [Residual(nn.Sequential(*block), shortcut)]
        layers += block
        if spec.dropout > 0:
            layers.append(nn.Dropout(spec.dropout))
        features = width
    layers.append(nn.Linear(features, outputs))
    return nn.Sequential(*layers)


class Standardize(nn.Module):
    """``(x - mean) / std`` per input feature; the statistics are buffers (saved with the weights), set
    from the training split by :meth:`fit` before training."""

    def __init__(self, sample_shape: tuple[int, ...]):
        super().__init__()
        self.register_buffer("mean", torch.zeros(sample_shape))
        self.register_buffer("std", torch.ones(sample_shape))

    @torch.no_grad()
    def fit(self, x: torch.Tensor) -> None:
        """Set the statistics from training samples ``x`` (N, *sample shape); a constant feature keeps a std of 1."""
        x = x.float()
        self.mean.copy_(x.mean(dim=0))
        std = x.std(dim=0, unbiased=False)
        self.std.copy_(torch.where(std > 0, std, torch.ones_like(std)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class ChannelsLast(nn.Module):
    """Puts a (B, C, H, W) batch in channels-last memory order (same values, NHWC strides).

    With the conv weights in the same order, oneDNN (CPU) and cuDNN (GPU) run 2-D convolutions,
    batch norm and pooling without reordering, which trains faster (scripts/bench/bench_train.py).
    It is part of the network, so training, the predictions stored with a member and
    ``evens predict`` all run exactly the same computation.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last)


def _cnn(spec: NetworkSpec, sample_shape: tuple[int, ...], outputs: int) -> nn.Module:
    channels, *spatial = sample_shape
    dims = len(spatial)
    conv, adaptive = {1: (nn.Conv1d, nn.AdaptiveAvgPool1d), 2: (nn.Conv2d, nn.AdaptiveAvgPool2d)}[dims]
    pool = {"max": {1: nn.MaxPool1d, 2: nn.MaxPool2d}, "avg": {1: nn.AvgPool1d, 2: nn.AvgPool2d}}.get(spec.pooling, {}).get(dims)
    k = spec.kernel_size
    layers: list[nn.Module] = [ChannelsLast()] if dims == 2 else []
    if spec.downsample > 1:  # averaged over blocks of downsample positions (a partial last block: over what it holds)
        layers.append({1: nn.AvgPool1d, 2: nn.AvgPool2d}[dims](spec.downsample, ceil_mode=True))
        spatial = [-(-s // spec.downsample) for s in spatial]
    for i, width in enumerate(spec.layer_widths):
        dilation = 2 ** i if spec.dilation == "growing" else 1
        block = [*_same_size_conv(conv, dims, channels, width, k, dilation), *_norm(spec.norm, width, dims), ACTIVATIONS[spec.activation]()]
        if spec.residual:
            shortcut = nn.Identity() if channels == width else conv(channels, width, 1, bias=False)
            block = [Residual(nn.Sequential(*block), shortcut)]
        layers += block
        if pool is not None and min(spatial) >= 2:  # halve while there is something to halve
            layers.append(pool(2))
            spatial = [s // 2 for s in spatial]
        if spec.dropout > 0:
            layers.append(nn.Dropout(spec.dropout))
        channels = width
    pooled = [1 if spec.head == "average" else min(s, MAX_POOLED_SIDE) for s in spatial]
    layers += [adaptive(tuple(pooled) if dims > 1 else pooled[0]), nn.Flatten()]
    layers.append(nn.Linear(channels * int(torch.tensor(pooled).prod()), outputs))
    model = nn.Sequential(*layers)
    return model.to(memory_format=torch.channels_last) if dims == 2 else model


def _same_size_conv(conv, dims: int, channels: int, width: int, k: int, dilation: int) -> list[nn.Module]:
    """A convolution that keeps the map's size: its span, ``dilation * (k - 1)``, padded half before and half
    after; evenly by the conv itself (the classic 3x3 network's exact layers), else by an explicit zero-pad."""
    span = dilation * (k - 1)
    if span % 2 == 0:
        return [conv(channels, width, k, padding=span // 2, dilation=dilation)]
    before, after = span // 2, span - span // 2
    pad = nn.ConstantPad1d((before, after), 0.0) if dims == 1 else nn.ZeroPad2d((before, after, before, after))
    return [pad, conv(channels, width, k, dilation=dilation)]


class Recurrent(nn.Module):
    """A GRU or LSTM over the L steps of a (C, L) sample; the head reads the last step's state (of the
    last layer; both directions' final states when bidirectional), or with ``head="average"`` the last
    layer's outputs averaged over the steps."""

    def __init__(self, spec: NetworkSpec, channels: int, outputs: int):
        super().__init__()
        cell = nn.GRU if spec.cell == "gru" else nn.LSTM
        self.rnn = cell(
            channels, spec.width, num_layers=spec.depth, batch_first=True, bidirectional=spec.bidirectional,
            dropout=spec.dropout if spec.depth > 1 else 0.0,
        )
        self.directions = 2 if spec.bidirectional else 1
        self.average = spec.head == "average"
        self.dropout = nn.Dropout(spec.dropout)
        self.head = nn.Linear(spec.width * self.directions, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs, state = self.rnn(x.transpose(1, 2))  # (B, C, L) -> (B, L, C)
        if self.average:
            return self.head(self.dropout(outputs.mean(dim=1)))  # (B, L, width x directions) -> (B, width x directions)
        hidden = state[0] if isinstance(state, tuple) else state  # an LSTM also returns its cell state
        last = torch.cat(list(hidden[-self.directions :]), dim=1)  # the last layer, every direction
        return self.head(self.dropout(last))


def _rnn(spec: NetworkSpec, sample_shape: tuple[int, ...], outputs: int) -> nn.Module:
    return Recurrent(spec, sample_shape[0], outputs)


_BUILDERS = {"mlp": _mlp, "cnn": _cnn, "rnn": _rnn}


def build_network(spec: NetworkSpec, sample_shape: tuple[int, ...], outputs: int) -> nn.Module:
    """A fresh, randomly initialised network for samples of ``sample_shape`` (no batch dimension).

    >>> net = build_network(NetworkSpec("cnn", depth=2, width=16), (1, 8, 8), 10)
    >>> net(torch.zeros(5, 1, 8, 8)).shape
    torch.Size([5, 10])
    """
    sample_shape = tuple(int(s) for s in sample_shape)
    if spec.family not in families_for(sample_shape):
        raise ValueError(f"family {spec.family!r} does not apply to samples of shape {sample_shape}; it takes {LAYOUTS[spec.family]}")
    net = _BUILDERS[spec.family](spec, sample_shape, outputs)
    return nn.Sequential(Standardize(sample_shape), net) if spec.standardize else net
