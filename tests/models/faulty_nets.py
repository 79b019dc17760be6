"""A user's network that misbehaves on purpose while it trains, by its ``fault`` gene (tests/test_isolation.py):
kills its own process (SIGKILL, as the out-of-memory killer does), segfaults, calls ``os._exit(3)``,
sleeps inside ``forward`` far past any time limit, asks for 400 GB at once (``huge``; ``cuda_huge`` on
its GPU), or holds ever more memory (``grow``; ``grow_shared``: shared memory, as ``share_memory_()`` makes). In eval mode (evens' dry forward pass before the
search) it behaves."""
import ctypes
import math
import os
import signal
import time

import torch
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
            elif self.fault == "huge":  # asks for 400 GB at once
                torch.empty(100 * (1 << 30), dtype=torch.float32)
            elif self.fault == "cuda_huge":  # 400 GB on the GPU: more than any GPU has
                torch.empty(100 * (1 << 30), dtype=torch.float32, device=x.device)
            elif self.fault == "grow":  # holds ever more memory, 64 MB every 0.2 s (slow enough for the watchdog to see it first), up to 8 GB
                held = []
                for _ in range(128):
                    held.append(bytearray(64 << 20))
                    held[-1][:: 4096] = b"x" * len(held[-1][:: 4096])
                    time.sleep(0.2)
            elif self.fault == "grow_shared":  # the same in shared memory, which RssAnon and RLIMIT_DATA miss
                held = []
                for _ in range(128):
                    held.append(torch.ones(16 << 20, dtype=torch.float32).share_memory_())
                    time.sleep(0.2)
        return self.inner(x)


def build(genes: dict, sample_shape: tuple, outputs: int) -> nn.Module:
    return Faulty(nn.Sequential(nn.Flatten(), nn.Linear(math.prod(sample_shape), outputs)), genes["fault"])
