"""The live status: plain lines every N seconds in batch output, with rate and ETA."""
import io
import logging
import math

from test_checkpoint_report import finished_run

from evolve.app.infra.log import LOG, setup_logging
from evolve.app.presentation.progress import Progress


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_batch_output_gets_a_status_line_every_n_seconds_and_at_the_end():
    state, _ = finished_run(budget=12)
    records, state.records = state.records, []
    out, clock = io.StringIO(), Clock()
    progress = Progress(12, 0, "accuracy", every=30, workers=3, stream=out, clock=clock)
    for record in records:
        clock.now += 10  # one evaluation every 10 s: 6 per minute
        state.records.append(record)
        progress(record, state)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 4  # at 30, 60, 90 s, and the last evaluation (120 s)
    assert lines[0].startswith("evens: status 3/12 (25 %) | best val accuracy ") and "| 3 workers | 6.0/min | ETA 1m30s" in lines[0]
    assert lines[-1].startswith("evens: status 12/12 (100 %)") and lines[-1].endswith("ETA 0s")
    ensemble = state.selection.curve_val[state.selection.picks - 1]
    assert f"ensemble {ensemble:.4f}" in lines[-1]  # four decimals, as the summary prints it


def test_quiet_prints_nothing_and_verbose_logs_every_evaluation():
    state, _ = finished_run(budget=4)
    out = io.StringIO()
    setup_logging(True, 0, verbose=True, stream=out)
    try:
        progress = Progress(4, 0, "accuracy", quiet=True, stream=io.StringIO())
        for r in state.records:
            progress(r, state)
        assert [line.split(" fitness")[0] for line in out.getvalue().splitlines()] == [f"evens: #{r.id} {r.status}" for r in state.records]
    finally:
        setup_logging(True, 0)
    assert LOG.level == logging.INFO
    setup_logging(False, 3)  # a worker: warnings and errors only
    assert LOG.level == logging.WARNING
    setup_logging(True, 0)


def test_an_unchosen_ensemble_shows_a_dash_not_nan():
    state, _ = finished_run(budget=4)
    state.selection = None
    out = io.StringIO()
    progress = Progress(4, 3, "accuracy", every=0, stream=out)
    progress(state.records[-1], state)
    assert "ensemble - |" in out.getvalue() and "nan" not in out.getvalue() and not math.isnan(progress.facts(state)["best"])
