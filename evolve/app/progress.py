"""Progress on the master: a tqdm bar on a terminal, a sparse log line otherwise."""
from __future__ import annotations

import sys
import time

from tqdm import tqdm

from ..master import Record, SearchState


class Progress:
    """Call with each finished record; ``close()`` at the end."""

    def __init__(self, total: int, done: int, quiet: bool = False, log_every: float = 10.0, stream=sys.stderr):
        self.quiet = quiet
        self.stream = stream
        self.total = total
        self.log_every = log_every
        self._last = 0.0
        self._bar = None
        if not quiet and stream.isatty():
            self._bar = tqdm(total=total, initial=done, desc="evaluations", unit="net", file=stream, dynamic_ncols=True)

    def __call__(self, record: Record, state: SearchState) -> None:
        best = state.members[0].val_accuracy if state.members else float("nan")
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(best_val=f"{best:.4f}", refresh=False)
        elif not self.quiet and (time.monotonic() - self._last >= self.log_every or len(state.records) == self.total):
            self._last = time.monotonic()
            print(f"evens: {len(state.records)}/{self.total} evaluations, best val accuracy {best:.4f}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
