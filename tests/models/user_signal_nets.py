"""Users' own networks for the tests: a residual 1-D CNN and a 3-D CNN whose genes evens searches (tests/test_user_models.py)."""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, channels: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel, padding=kernel // 2)
        self.norm = nn.BatchNorm1d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.norm(self.conv(x)))


def build(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    channels, kernel = genes["channels"], genes["kernel"]
    return nn.Sequential(nn.Conv1d(sample_shape[0], channels, 1), *[Block(channels, kernel) for _ in range(genes["blocks"])],
                         nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(channels, outputs))


def raises_for_wide(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    """Fails for one region of the space: 16 channels."""
    if genes["channels"] == 16:
        raise ValueError("16 channels are not supported")
    return build(genes, sample_shape, outputs)


def too_many_outputs(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    return build(genes, sample_shape, outputs + 2)


def volumes(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    """A small 3-D CNN for volumes (C, D, H, W)."""
    channels = genes["channels"]
    return nn.Sequential(nn.Conv3d(sample_shape[0], channels, 3, padding=1), nn.BatchNorm3d(channels), nn.ReLU(),
                         nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(channels, outputs))
