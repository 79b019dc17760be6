"""Successive halving's rungs: shares of a network's planned epochs (evolve.engine.promotion promotes between them)."""
from __future__ import annotations

import math


def rung_count(eta: int, min_budget: float) -> int:
    """The rungs, the whole training included: 1 + how many times ``eta`` fits between ``min_budget`` and 1."""
    if eta < 2 or not 0.0 < min_budget <= 1.0:
        raise ValueError(f"successive halving needs eta >= 2 and 0 < min_budget <= 1, got {eta} and {min_budget}")
    return 1 + int(math.floor(math.log(1.0 / min_budget, eta) + 1e-9))


def rung_epochs(epochs: int, eta: int, min_budget: float) -> list[int]:
    """The epochs a network planned for ``epochs`` has trained at each rung: at least 1, never fewer than at
    the rung below, the last the whole ``epochs``. Rung i is ``min_budget * eta**i`` of them, rounded."""
    rungs = rung_count(eta, min_budget)
    out: list[int] = []
    for i in range(rungs - 1):
        out.append(min(epochs, max(1, round(epochs * min_budget * eta**i), out[-1] if out else 1)))
    return out + [epochs]
