"""The median stopping rule, kept on the master at O(log n) per epoch reported.

A training whose validation fitness after epoch e is below the median of the
networks that reached epoch e before it is unlikely to end among the best, so it
stops there (after a warm-up; Golovin et al., "Google Vizier", KDD 2017). The
master keeps one running median per epoch (two heaps: O(log n) per value, O(1)
to read) and sends each task the medians for its epochs; the worker applies the
rule itself, so no training ever waits on a message. Results bring their curves
(the fitness after each epoch) back in their header.

Only finite values count: a diverged network's NaN never moves a median.
"""
from __future__ import annotations

import heapq
import math

from .records import Record

MIN_PEERS = 5  # an epoch's median is a bar only once this many networks have reached it


class RunningMedian:
    """The median of the values added so far: a max-heap of the lower half, a min-heap of the upper."""

    def __init__(self) -> None:
        self._low: list[float] = []  # negated
        self._high: list[float] = []

    def __len__(self) -> int:
        return len(self._low) + len(self._high)

    def add(self, value: float) -> None:
        if self._low and value > -self._low[0]:
            heapq.heappush(self._high, value)
        else:
            heapq.heappush(self._low, -value)
        if len(self._low) > len(self._high) + 1:
            heapq.heappush(self._high, -heapq.heappop(self._low))
        elif len(self._high) > len(self._low):
            heapq.heappush(self._low, -heapq.heappop(self._high))

    def median(self) -> float:
        if not self:
            return math.nan
        if len(self._low) > len(self._high):
            return -self._low[0]
        return (-self._low[0] + self._high[0]) / 2


class MedianRule:
    """Per-epoch running medians of the validation fitness of every network that reported its curve."""

    def __init__(self, records: list[Record] = (), min_peers: int = MIN_PEERS):
        self.min_peers = min_peers
        self._by_epoch: list[RunningMedian] = []
        for record in records:
            self.tell(record)

    def tell(self, record: Record) -> None:
        for epoch, fitness in enumerate(record.curve):
            if not math.isfinite(fitness):
                continue
            while len(self._by_epoch) <= epoch:
                self._by_epoch.append(RunningMedian())
            self._by_epoch[epoch].add(fitness)

    def bars(self, epochs: int) -> tuple[float, ...]:
        """The bar after each of ``epochs`` epochs: the median there, or NaN while too few networks reached it."""
        bars = []
        for epoch in range(epochs):
            medians = self._by_epoch[epoch] if epoch < len(self._by_epoch) else None
            bars.append(medians.median() if medians is not None and len(medians) >= self.min_peers else math.nan)
        return tuple(bars)


def epochs_saved(records: list[Record], planned: dict[int, int]) -> int:
    """Epochs that early stopping spared: planned minus trained, over the stopped networks."""
    return sum(planned[r.id] - r.epochs_done for r in records if r.status == "stopped")
