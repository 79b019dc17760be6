"""The live status line's ensemble figure (issue 25, defect 3): the summary's quantity, as of the line.

A regression search (RMSE, lower is better) with one checkpoint early on, as a long run between its
checkpoints: the line must show the ensemble chosen from the hall of fame as it is, not the last
checkpoint's, and its last line the figure the summary then gives.
"""
import io
import math

import numpy as np
from fakes import search_config

from ensemble.hall_of_fame import clears
from ensemble.problem import Regression
from ensemble.results import Evaluation
from evolve.app.presentation.progress import Progress
from evolve.app.presentation.report import summarize
from evolve.app.presentation.report_text import score_text
from evolve.app.run.reselect import SelectionCache, select_for_run
from evolve.config.schema import config_from_dict
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.runfile.checkpoint import RunInfo
from evolve.search.space import GENE_NAMES
from evolve.transport.protocol import InProcessTransport

VAL_Y, TEST_Y = np.linspace(20.0, 80.0, 12), np.linspace(25.0, 75.0, 8)
PROBLEM = Regression((), (50.0,), (18.0,))


def predicting(task):
    """A regression network whose error grows as its learning rate leaves 3e-3 (each its own noise)."""
    rng = np.random.default_rng(task.id)
    spread = 2.0 + 20.0 * abs(math.log10(task.training["learning_rate"]) + 2.5)
    val, test = (y + rng.normal(scale=spread, size=y.shape) for y in (VAL_Y, TEST_Y))
    metrics = {f"{split}_{k}": v for split, pred, y in (("val", val, VAL_Y), ("test", test, TEST_Y))
               for k, v in PROBLEM.scores(pred, y).items()}
    ev = Evaluation(status="ok", fitness=-metrics["val_rmse"], metrics=metrics, seconds=1.0, epochs_done=task.training["epochs"])
    if clears(ev.fitness, ev.loss, task.id, task.entry_bar):
        ev.val_pred, ev.test_pred = (p.astype(np.float32).reshape(-1, 1) for p in (val, test))
    return ev


def regression_info(budget: int, candidates: int) -> RunInfo:
    config = config_from_dict({"search": {"evaluations": budget}, "ensemble": {"size": 3, "candidates": candidates}, "space": {}})
    data = {"problem": PROBLEM.to_dict(), "sample_shape": [8], "x_dtype": "float32", "sizes": {"train": 10, "val": 12, "test": 8}}
    return RunInfo(config=config, gene_names=list(GENE_NAMES), data=data, val_y=VAL_Y, test_y=TEST_Y)


def regression_search(info: RunInfo, on_result=None) -> SearchState:
    """The search of ``info``'s config on :func:`predicting`, in process (a checkpoint only if ``on_result`` writes one)."""
    config = info.config
    state = SearchState.fresh(0, config.ensemble.candidates)
    run_search(state, InProcessTransport(predicting, 2), config.space.for_sample_shape((8,)),
               search_config(config.search.evaluations, 4, config.ensemble.candidates, 0, checkpoint_seconds=3600.0), on_result=on_result)
    return state


def test_the_live_ensemble_is_chosen_from_the_hall_as_it_is_and_ends_on_the_summarys():
    budget = 24
    info = regression_info(budget, candidates=6)
    choose = SelectionCache(info)  # as the session's Checkpointer holds it

    def checkpoint(state):
        state.selection = choose(state.hall_of_fame)

    out = io.StringIO()
    progress = Progress(budget, 0, "rmse", every=0, stream=out, higher_is_better=False, choose=choose)
    expected, stale = [], []

    def on_result(record, state):
        if len(state.records) == 4:
            checkpoint(state)  # the one checkpoint inside the run (checkpoint_seconds is long)
        progress(record, state)
        now = select_for_run(state.hall_of_fame, info)
        expected.append(now.curve_val[now.picks - 1] if now is not None else math.nan)
        stale.append(state.selection != now)

    state = regression_search(info, on_result)
    checkpoint(state)  # the session's last checkpoint, which the summary reads
    lines = out.getvalue().splitlines()
    assert len(lines) == budget and any(stale)  # the checkpoint's ensemble went stale during the run
    shown = [line.split("| ensemble ")[1].split(" |")[0] for line in lines]
    assert shown == [score_text(v, "rmse") for v in expected]
    summary = summarize(state, info).ensemble
    assert shown[-1] == score_text(summary.score("val", "rmse"), "rmse")
