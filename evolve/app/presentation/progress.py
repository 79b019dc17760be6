"""Live progress on the master: a tqdm bar on a terminal, one compact status line every N seconds otherwise.

Both show the evaluations done of the budget, the best validation metric, the validation metric of
the ensemble chosen from the hall of fame as it is at that line (the quantity the final summary
gives), the workers, the evaluations per minute of this session and the time left at that rate.
Batch output (a file, Slurm's log) gets plain lines without carriage returns::

    evens: status 37/40 (92 %) | best val accuracy 0.9944 | ensemble 0.9972 | 3 workers | 14.2/min | ETA 13s

With ``--verbose`` every evaluation is also logged (DEBUG) as it arrives.
"""
from __future__ import annotations

import logging
import math
import sys
import time
from typing import Callable

from tqdm import tqdm

from ensemble.hall_of_fame import HallOfFame
from ensemble.select import Selection
from evolve.app.infra.log import LOG
from evolve.app.presentation.report_text import (
    score_text,  # one precision with the summary and `evens report` ("-" before the first ensemble)
)
from evolve.engine.state import SearchState
from evolve.search.records import Record


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


# The bar chooses the ensemble again at most this often (and at the last evaluation): choosing scores the
# validation split (picks x candidates) times, up to seconds for a large split, and the bar moves at every result.
BAR_ENSEMBLE_SECONDS = 5.0


class Progress:
    """Call with each finished record; ``close()`` at the end.

    ``choose`` picks the run's ensemble from a hall of fame (the checkpoints' :class:`SelectionCache`,
    shared so that a hall is chosen from once); without it the line shows ``state.selection``, which
    is only as recent as the last checkpoint.
    """

    def __init__(self, total: int, done: int, metric: str = "accuracy", quiet: bool = False, every: float = 60.0,
                 workers: int = 0, stream=sys.stderr, clock=time.monotonic, higher_is_better: bool | None = None,
                 choose: Callable[[HallOfFame], Selection | None] | None = None, rows: str = "val"):
        self.metric = metric  # the name of the search's metric: fitness is it, or minus it where lower is better
        self.rows = rows  # what the rows networks are scored on are called: "val", or "oof" (out of fold)
        self.higher = metric in ("accuracy", "balanced_accuracy", "macro_f1", "r2") if higher_is_better is None else higher_is_better
        self.quiet = quiet
        self.stream = stream
        self.total = total
        self.every = every
        self.workers = workers
        self.clock = clock
        self.choose = choose
        self._ensemble, self._chosen_at = math.nan, -math.inf
        self._start = clock()
        self._done_before = done
        self._networks = done  # networks recorded (their first stages: a promotion's stage is not one)
        self._count = 0
        self._last = self._start
        self._bar = None
        self._verbose = LOG.isEnabledFor(logging.DEBUG)
        if not quiet and stream.isatty():
            self._bar = tqdm(total=total, initial=done, desc="evaluations", unit="net", file=stream, dynamic_ncols=True)

    def _shown(self, fitness: float) -> float:
        return fitness if self.higher else -fitness

    def facts(self, state: SearchState, fresh: bool = True) -> dict:
        """What the bar and the status line show; ``fresh=False`` keeps the ensemble figure last chosen."""
        hall = state.hall_of_fame
        best = self._shown(hall.members[0].fitness) if len(hall) else math.nan
        if fresh:
            sel = self.choose(hall) if self.choose is not None else state.selection
            self._ensemble = sel.curve_val[sel.picks - 1] if sel is not None and sel.picks else math.nan
            self._chosen_at = self.clock()
        ensemble = self._ensemble
        elapsed = self.clock() - self._start
        per_minute = self._count / elapsed * 60 if elapsed > 0 else 0.0
        left = max(0, self.total - self._networks)
        eta = left / per_minute * 60 if per_minute > 0 else (0.0 if not left else math.inf)
        return {"done": self._networks, "best": best, "ensemble": ensemble, "per_minute": per_minute, "eta": eta}

    def line(self, f: dict) -> str:
        name = self.metric
        parts = [f"status {f['done']}/{self.total} ({100 * f['done'] / max(1, self.total):.0f} %)",
                 f"best {self.rows} {name} {score_text(f['best'], name)}", f"ensemble {score_text(f['ensemble'], name)}"]
        if self.workers:
            parts.append(f"{self.workers} workers")
        parts += [f"{f['per_minute']:.1f}/min", f"ETA {_duration(f['eta'])}"]
        return " | ".join(parts)

    def __call__(self, record: Record, state: SearchState) -> None:
        if record.network >= 0:  # a promoted network's next stage: not a network more
            return
        self._count += 1
        self._networks += 1
        if self._verbose:  # (the message is built only when it is shown: this runs for every result)
            LOG.debug(f"#{record.id} {record.status} fitness {record.fitness:.4g} on rank {record.worker} in {record.seconds:.1f} s"
                      + (f" ({record.message})" if record.message else ""))
        if self.quiet:
            return
        now = self.clock()
        if self._bar is not None:
            f = self.facts(state, fresh=now - self._chosen_at >= BAR_ENSEMBLE_SECONDS or self._networks >= self.total)
            self._bar.update(1)
            self._bar.set_postfix({"best": score_text(f["best"], self.metric), "ens": score_text(f["ensemble"], self.metric),
                                   "per_min": f"{f['per_minute']:.1f}",
                                   "workers": self.workers}, refresh=False)
        elif now - self._last >= self.every or self._networks >= self.total:
            self._last = now
            print(f"evens: {self.line(self.facts(state))}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
