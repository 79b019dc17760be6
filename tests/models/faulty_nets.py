"""A user's network that misbehaves on purpose while it trains, by its ``fault`` gene (tests/test_isolation.py):
kills its own process (SIGKILL, as the out-of-memory killer does), segfaults, calls ``os._exit(3)``,
or sleeps inside ``forward`` far past any time limit. In eval mode (evens' dry forward pass before the
search) it behaves."""
import ctypes
import math
import os
import signal
import time

from torch import nn


class Faulty(nn.Module):
    def __init__(self, inner: nn.Module, fault: str):
        super().__init__()
        self.inner, self.fault = inner, fault

    def forward(self, x):
        if self.training:
            if self.fault == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.fault == "segfault":
                ctypes.string_at(0)
            elif self.fault == "exit":
                os._exit(3)
            elif self.fault == "sleep":
                time.sleep(3600)
        return self.inner(x)


def build(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    return Faulty(nn.Sequential(nn.Flatten(), nn.Linear(math.prod(sample_shape), outputs)), genes["fault"])
