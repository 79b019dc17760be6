"""The hall of fame: the best trained networks so far, kept whole, from which the ensemble is chosen.

A :class:`Member` is everything needed to use a network again without training
it: its spec, its trained weights (a state dict as numpy arrays) and its
predictions on the validation and test splits (for choosing and scoring the
ensemble). The :class:`HallOfFame` keeps the best ``capacity`` of them, best
first: higher fitness, then the earlier id.

Its :meth:`~HallOfFame.entry_bar` is what makes it cheap at scale: the master
sends it with every task, and a worker whose network does not :func:`clear` it
sends back only a small header, never the predictions and weights. Once the
hall is full the bar can only rise, so a result held back this way could never
have entered later either. The bar is the worst member's (fitness, id), so that
ties, common with accuracy on a few hundred samples, are settled exactly as the
hall settles them (the earlier id wins) and cost nothing on the wire.

Numpy only: the master keeps it without importing torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np


@dataclass
class Member:
    """A candidate for the ensemble: one trained network, with its predictions."""

    id: int
    fitness: float  # higher is better (validation accuracy, or -RMSE)
    network: dict  # NetworkSpec fields
    training: dict  # TrainSpec fields
    val_pred: np.ndarray = field(repr=False)  # (N_val, outputs) float32
    test_pred: np.ndarray = field(repr=False)  # (N_test, outputs) float32
    # The trained state dict as numpy arrays; None when read from a file without them (see
    # ensemble.store.read_ensemble), which then cannot be written back.
    weights: dict[str, np.ndarray] | None = field(repr=False, default_factory=dict)
    loss: float = math.inf  # the tie-break: validation log-loss (out of fold with data.folds); inf where there is none (regression)


def standing(fitness: float, loss: float, ident: int) -> tuple[float, float, int]:
    """The sort key that puts the best first everywhere (hall of fame, report, selection): higher fitness,
    then lower loss (NaN or missing counts as infinite), then the earlier id."""
    return (-fitness, math.inf if loss != loss else loss, ident)


def _rank(member: Member) -> tuple[float, float, int]:
    return standing(member.fitness, member.loss, member.id)


OPEN = (-math.inf, math.inf, -1)  # the entry bar of a hall with room: any finite fitness clears it


def clears(fitness: float, loss: float, ident: int, bar: tuple[float, float, int]) -> bool:
    """Would evaluation ``ident`` with ``fitness`` and validation ``loss`` enter a hall whose entry bar is ``bar``?"""
    return math.isfinite(fitness) and standing(fitness, loss, ident) < standing(*bar)


class HallOfFame:
    """The best ``capacity`` members so far, best first; it never shrinks.

    >>> hof = HallOfFame(2)
    >>> hof.entry_bar()
    (-inf, -1)
    """

    def __init__(self, capacity: int, members: Iterable[Member] = ()):
        if capacity < 1:
            raise ValueError(f"a hall of fame needs room for at least one member, got {capacity}")
        self.members: list[Member] = sorted(members, key=_rank)
        self.capacity = max(capacity, len(self.members))  # members already kept are never dropped

    def __len__(self) -> int:
        return len(self.members)

    def __iter__(self) -> Iterator[Member]:
        return iter(self.members)

    @property
    def ids(self) -> list[int]:
        return [m.id for m in self.members]

    def by_id(self, ident: int) -> Member:
        for m in self.members:
            if m.id == ident:
                return m
        raise KeyError(ident)

    def grow(self, capacity: int) -> None:
        """Make room for ``capacity`` members (a resume may ask for more candidates; never fewer)."""
        self.capacity = max(self.capacity, capacity)

    def entry_bar(self) -> tuple[float, float, int]:
        """(fitness, loss, id) of the member a newcomer must beat: :data:`OPEN` while there is room."""
        if len(self.members) < self.capacity:
            return OPEN
        worst = self.members[-1]
        return (worst.fitness, worst.loss, worst.id)

    def qualifies(self, fitness: float, ident: int, loss: float = math.inf) -> bool:
        return clears(fitness, loss, ident, self.entry_bar())

    def offer(self, member: Member) -> bool:
        """Insert ``member`` if it ranks among the best ``capacity``; returns whether it entered."""
        if not self.qualifies(member.fitness, member.id, member.loss):
            return False
        if any(m.id == member.id for m in self.members):
            raise ValueError(f"member {member.id} is already in the hall of fame")
        self.members.append(member)
        self.members.sort(key=_rank)
        del self.members[self.capacity :]
        return True
