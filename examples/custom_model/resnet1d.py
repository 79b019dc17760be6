"""A user's own network for evens: a residual 1-D CNN for signals of shape (channels, length).

evens calls ``build(genes, sample_shape, outputs)`` with the genes that signals.toml declares
(``channels``, ``blocks``, ``kernel``, ``dilated``, ``dropout``) and trains what it returns; see
docs/custom-models.md.
"""
import torch
from torch import nn


class ResidualBlock(nn.Module):
    """conv -> batch norm -> GELU -> conv -> batch norm, added to its input, then GELU."""

    def __init__(self, channels: int, kernel: int, dilation: int, dropout: float):
        super().__init__()
        pad = dilation * (kernel - 1) // 2
        self.body = nn.Sequential(
            nn.Conv1d(channels, channels, kernel, padding=pad, dilation=dilation), nn.BatchNorm1d(channels), nn.GELU(),
            nn.Dropout(dropout),
            nn.Conv1d(channels, channels, kernel, padding=pad, dilation=dilation), nn.BatchNorm1d(channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return nn.functional.gelu(x + y[..., : x.shape[-1]])


def build(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    channels, kernel = genes["channels"], genes["kernel"]
    blocks = [ResidualBlock(channels, kernel, 2**i if genes["dilated"] else 1, genes["dropout"]) for i in range(genes["blocks"])]
    return nn.Sequential(
        nn.Conv1d(sample_shape[0], channels, 1),  # the stem: the input's channels to the blocks' width
        *blocks,
        nn.AdaptiveAvgPool1d(1),  # global average pooling: where a motif is does not matter
        nn.Flatten(),
        nn.Linear(channels, outputs),
    )
