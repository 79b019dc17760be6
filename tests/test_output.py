"""What users read: singular words for one, one precision for every score, quiet exits on a closed pipe, and
`evens simulate`'s warning about a population far below the workers (issue 25, defects 6, 8 and 9)."""
import argparse
import io
import math
import os
import subprocess
from dataclasses import replace

import pytest
from cli_fixture import SMALL
from conftest import ROOT, evens_cmd, launch
from test_checkpoint_report import finished_run

from evolve.app.presentation.progress import Progress
from evolve.app.presentation.report import summarize, top_networks
from evolve.app.presentation.report_text import format_summary, format_top
from evolve.app.commands.simulate import simulate_command
from evolve.app.commands.status import format_status
from evolve.app.presentation.summary import Curve, EarlyStopping, Summary

pytestmark = pytest.mark.xdist_group("output")  # one process: the module's run is made once

SIGPIPE_STATUS = 141  # 128 + SIGPIPE: what a shell reports for `yes | head`


# --- defect 9: wording and precision -------------------------------------------------------------

def one_pick_summary() -> Summary:
    state, info = finished_run(budget=12)
    s = summarize(state, info)
    e, b = s.ensemble, s.best
    e = replace(e, picks=1, members=e.members[:1], weights=[1.0], metrics={**e.metrics, "val_accuracy": 1.0, "test_accuracy": 0.5},
                curve=Curve(path=e.curve.path[:1], val=[1.0], test=[0.5], metric=e.curve.metric))
    b = replace(b, metrics={**b.metrics, "val_accuracy": 1.0, "test_accuracy": 1.0})
    return replace(s, ensemble=e, best=b, early_stopping=EarlyStopping(stopped=1, epochs_saved=1, epochs_trained=5))


def test_the_summary_says_one_network_and_one_pick_in_the_singular():
    text = format_summary(one_pick_summary())
    assert "early stopping: 1 network stopped below the median, saving 1 epoch " in text
    assert "1 networks" not in text and "1 picks" not in text and "1 epochs" not in text
    assert "(greedy, 1 pick of 1 network: " in text or "(top_k, 1 pick of 1 network: " in text


def test_an_accuracy_of_one_prints_with_four_decimals_like_the_others():
    s = one_pick_summary()
    text = format_summary(s)
    assert f"best network #{s.best.id}: val 1.0000  test 1.0000" in text
    assert "val 1.0000  test 0.5000" in text
    state, info = finished_run(budget=12)
    t = top_networks(state, info.space(), 1)[0]
    metrics = {**t.metrics, "val_accuracy": 1.0, "test_accuracy": 0.98765, "params": 1234}
    top = [replace(t, id=3, rank=1, ensemble_weight=1.0, metrics=metrics, seconds=1.25, network="mlp")]
    row = format_top(top, "accuracy", 10, 1)[-1]
    assert " 1.0000 " in row and " 0.9877 " in row


def test_the_live_status_line_prints_scores_with_four_decimals():
    progress = Progress(12, 0, "accuracy", every=30, stream=io.StringIO())
    line = progress.line({"done": 3, "best": 1.0, "ensemble": 0.98, "per_minute": 6.0, "eta": 90.0})
    assert "best val accuracy 1.0000 | ensemble 0.9800 |" in line
    assert "ensemble -" in progress.line({"done": 3, "best": 1.0, "ensemble": math.nan, "per_minute": 6.0, "eta": 90.0})


def test_status_prints_one_network_in_the_singular_and_scores_with_four_decimals():
    s = one_pick_summary()
    facts = {"run_dir": "r", "job": None, "state": "finished", "checkpoint_age_seconds": 3.0, "evaluations": 12, "budget": 12,
             "per_minute_recent": None, "recent_seconds": None, "per_minute_overall": 1.0, "eta_seconds": None, "best": s.best.to_dict(),
             "ensemble": s.ensemble.to_dict(), "metric": "accuracy", "failures": {}, "workers": 2, "workers_training": 0, "tasks_queued": 0,
             "longest_training": None, "worker_utilization": 0.5, "sessions": 1}
    text = format_status(facts)
    assert "best network: #" in text and "val 1.0000  test 1.0000" in text
    assert "ensemble: 1 network (" in text


# --- defect 6: a closed pipe ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def finished_run_dir(tmp_path_factory):
    from conftest import write_blobs

    tmp = tmp_path_factory.mktemp("pipe")
    data = write_blobs(tmp / "data.h5", sample_shape=(1, 6, 6), n=(90, 30, 30), classes=3)
    cfg = tmp / "small.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n[search]\nevaluations = 6\ncheckpoint_seconds = 0.0\n')
    out = str(tmp / "run")
    proc = launch(2, evens_cmd() + ["run", str(cfg), "--out", out, "--quiet", *SMALL])
    assert proc.returncode == 0, proc.stderr
    return out


def run_into_closed_pipe(args):
    """The command with its standard output a pipe whose reader has gone (as `| head` leaves it once head has
    its lines): every write fails with EPIPE, whatever the size of the output."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
        return subprocess.run(evens_cmd() + args, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT, env=env)
    finally:
        os.close(write_end)


@pytest.mark.e2e
@pytest.mark.parametrize("args", [["report"], ["report", "--csv", "-"], ["status"]], ids=["report", "report-csv", "status"])
def test_a_closed_pipe_ends_a_command_quietly_with_the_status_of_sigpipe(finished_run_dir, args):
    proc = run_into_closed_pipe([args[0], finished_run_dir, *args[1:]])
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert proc.stderr == "" and proc.returncode == SIGPIPE_STATUS


@pytest.mark.e2e
def test_report_into_head_prints_its_first_line_and_no_traceback(finished_run_dir):
    shell = f"{' '.join(evens_cmd())} report {finished_run_dir} --top 1000 | head -n 1"
    proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.stdout.startswith("evaluations: 6 of 6") and proc.stdout.count("\n") == 1
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr


# --- defect 8: a population far below the workers ------------------------------------------------

def simulate_args(population, workers, as_json=False):
    return argparse.Namespace(config=os.path.join(ROOT, "examples", "digits.toml"), overrides=[f"search.population={population}"],
                              workers=workers, task_seconds=30.0, sigma=0.5, evaluations=2 * workers, master_us=100.0, json=as_json,
                              hours=[12.0, 72.0])


def test_simulate_warns_when_the_population_is_far_below_the_workers():
    text = simulate_command(simulate_args(10, 400))
    warnings = [line for line in text.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert "population 10" in warnings[0] and "400 workers" in warnings[0] and "search.population" in warnings[0]
    import json

    assert "search.population" in json.loads(simulate_command(simulate_args(10, 400, as_json=True)))["warnings"][0]


def test_simulate_does_not_warn_for_a_sensible_population():
    text = simulate_command(simulate_args(64, 400))
    assert "warning" not in text
    import json

    assert json.loads(simulate_command(simulate_args(64, 400, as_json=True)))["warnings"] == []


def test_a_broken_pipe_other_than_the_output_is_a_bug_with_its_traceback(monkeypatch):
    """Only a closed standard output is a quiet end: a BrokenPipeError from another pipe (a trainer's) is not hidden."""
    from evolve.app.commands import cli
    from evolve.app.presentation import report

    def broken(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(report, "report", broken)
    with pytest.raises(BrokenPipeError):
        cli.main(["report", "anywhere"])
