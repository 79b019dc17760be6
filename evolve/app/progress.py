"""Progress on the master: a tqdm bar on a terminal, a sparse log line otherwise."""
from __future__ import annotations

import sys
import time

from tqdm import tqdm

from ..master import SearchState
from ..records import Record


class Progress:
    """Call with each finished record; ``close()`` at the end."""

    def __init__(self, total: int, done: int, metric: str = "accuracy", quiet: bool = False, log_every: float = 10.0, stream=sys.stderr):
        self.metric = metric  # fitness is accuracy, or -RMSE
        self.quiet = quiet
        self.stream = stream
        self.total = total
        self.log_every = log_every
        self._last = 0.0
        self._bar = None
        if not quiet and stream.isatty():
            self._bar = tqdm(total=total, initial=done, desc="evaluations", unit="net", file=stream, dynamic_ncols=True)

    def __call__(self, record: Record, state: SearchState) -> None:
        hall = state.hall_of_fame
        best = float("nan") if not len(hall) else hall.members[0].fitness * (1 if self.metric == "accuracy" else -1)
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix({f"best_val_{self.metric}": f"{best:.4g}"}, refresh=False)
        elif not self.quiet and (time.monotonic() - self._last >= self.log_every or len(state.records) == self.total):
            self._last = time.monotonic()
            print(f"evens: {len(state.records)}/{self.total} evaluations, best val {self.metric} {best:.4g}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
