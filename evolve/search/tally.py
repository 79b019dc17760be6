"""The history's running account: what a summary of a run says about all its evaluations, kept record by record.

``evens report`` and the end of ``evens run`` summarize a run from it, and the master keeps one as it records,
writing it into every checkpoint (plain JSON), so that ``evens status`` reads the state file alone at any size of
history (issue 34). Its size does not grow with the history: counts, the best record, and the networks recorded
in each of the last :data:`RECENT_SECONDS` seconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .records import Record, best_first

RECENT_SECONDS = 600  # how far back the account of recent results reaches (evens status's rate)


@dataclass
class Tally:
    """The account of the records told so far (``tell``), each once, in the order they were recorded."""

    rungs: int = 0  # successive halving's rungs (0: none)
    networks: int = 0  # first stages: every record, without successive halving
    records: int = 0
    statuses: dict = field(default_factory=dict)
    epochs_trained: int = 0
    stopped: int = 0
    epochs_saved: int = 0  # by the median rule: planned minus trained, over the stopped networks
    best: Record | None = None  # the best successful record (records.best_first)
    at_rung: list = field(default_factory=list)  # successive halving: [stages, promoted] at each rung
    carried_on: int = 0  # promotions that carried on from a saved training
    trained_again: int = 0  # ... and those that trained from the start again
    recent: dict = field(default_factory=dict)  # whole second of finishing -> networks recorded in it (the last RECENT_SECONDS)

    def __post_init__(self) -> None:
        if self.rungs and not self.at_rung:
            self.at_rung = [[0, 0] for _ in range(self.rungs)]

    def tell(self, r: Record, planned_epochs: int | None = None) -> None:
        """One record; ``planned_epochs`` (the epochs its network planned, over all its folds) when it was stopped."""
        self.records += 1
        self.statuses[r.status] = self.statuses.get(r.status, 0) + 1
        self.epochs_trained += r.epochs_done
        if r.network < 0:
            self.networks += 1
            second = int(math.floor(r.finished))
            self.recent[second] = self.recent.get(second, 0) + 1
            if len(self.recent) > 2 * RECENT_SECONDS:
                newest = max(self.recent)
                self.recent = {s: n for s, n in self.recent.items() if s > newest - RECENT_SECONDS - 1}
        if r.status == "stopped":
            self.stopped += 1
            if planned_epochs is not None:
                self.epochs_saved += planned_epochs - r.epochs_done
        if r.status == "ok" and (self.best is None or best_first(r) < best_first(self.best)):
            self.best = r
        if self.rungs:
            self.at_rung[min(r.rung, self.rungs - 1)][0] += 1
            if r.network >= 0:
                self.at_rung[r.rung - 1][1] += 1
                self.carried_on += r.metrics.get("carried_on_from", 0.0) > 0
                self.trained_again += r.metrics.get("carried_on_from", 1.0) == 0

    @classmethod
    def of(cls, records, space, rungs: int = 0, folds: int = 1) -> Tally:
        """The account of ``records`` (a history read back), as the master keeps it while it records."""
        tally = cls(rungs)
        for r in records:
            tally.tell(r, planned_epochs(space, r, folds))
        return tally

    def recent_networks(self, since: float, until: float) -> int:
        """Networks recorded in ``(since, until]``, to the second (at most RECENT_SECONDS back)."""
        return sum(n for s, n in self.recent.items() if since < s + 1 and s <= until)

    def to_state(self) -> dict:
        """Plain JSON, but for the best record (stored by the checkpoint beside it)."""
        return {"rungs": self.rungs, "networks": self.networks, "records": self.records, "statuses": self.statuses,
                "epochs_trained": self.epochs_trained, "stopped": self.stopped, "epochs_saved": self.epochs_saved,
                "at_rung": self.at_rung, "carried_on": self.carried_on, "trained_again": self.trained_again,
                "recent": [[s, n] for s, n in sorted(self.recent.items())]}

    @classmethod
    def from_state(cls, state: dict, best: Record | None) -> Tally:
        fields = {k: v for k, v in state.items() if k != "recent"}
        return cls(**fields, best=best, recent={int(s): int(n) for s, n in state.get("recent", [])})


def planned_epochs(space, r: Record, folds: int = 1) -> int | None:
    """The epochs a stopped record's network planned, over all its folds (None for a record that was not stopped)."""
    return space.candidate(r.genome)[1].epochs * max(folds, 1) if r.status == "stopped" else None
