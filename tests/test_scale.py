"""A run of ten million evaluations (issue 34): it resumes, reports, shows its status and chooses its ensemble again
without reading its history whole, in memory that does not grow with it.

The history is written by scripts/bench/synthetic_run.py through the product's checkpoint and segment code (some
10 minutes and 3.5 GB of disk at 10^7 on the 2-core machine), so this test runs only when asked for:

    EVENS_SCALE=10000000 .venv/bin/python -m pytest -q -m scale      # or a smaller size, e.g. 1000000

Each command runs in a process of its own, as a user runs it, and reports its peak resident memory (``VmHWM``);
the bounds asserted are memory, not time (bench_scale.py measures the time).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = [pytest.mark.scale, pytest.mark.slow]
EVALUATIONS = int(os.environ.get("EVENS_SCALE", "0"))
# Peaks the commands stay under at any size of history (measured at 10^7: resume 357 MB, status 62 MB, report
# 362 MB, select 389 MB; 80 MB of them the hashes of the networks proposed, 8 bytes each).
BOUNDS_MB = {"resume": 600 + 8 * EVALUATIONS / 1e6, "status": 200, "report": 800, "select": 600 + 8 * EVALUATIONS / 1e6}

PEAK = "import re\nPEAK = lambda: int(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)) / 1024\n"
RESUME = PEAK + """import json, sys
from evolve.engine import memory
from evolve.engine.loop import uses_median_rule
from evolve.runfile import checkpoint, segments
from evolve.search.early_stop import MedianRule
from evolve.search.registry import Context, make_strategy
def refuse(*args):
    raise SystemExit("the resume read the history")
segments.snapshot = checkpoint.snapshot = refuse
state, info = checkpoint.load(sys.argv[1], history=False)
search = info.config.search
assert memory.resumable(state.memory, search, uses_median_rule(search))
strategy = make_strategy(search.mode, Context(info.space(), search, state.rng, [], state.pending, state.strategy,
                                              memory=memory.part(state.memory, "strategy")))
rule = MedianRule.restored(memory.part(state.memory, "median"))
print(json.dumps({"recorded": state.recorded, "proposals": strategy.ask() is not None, "peak_mb": PEAK()}))
"""
COMMAND = PEAK + """import contextlib, io, json, sys
from evolve.app.commands.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": out.getvalue(), "peak_mb": PEAK()}))
"""


def run_python(code: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    if EVALUATIONS <= 0:
        pytest.skip("the scale test writes a history of EVENS_SCALE evaluations (10^7: some 10 minutes, 3.5 GB); set it to run")
    folder = str(tmp_path_factory.mktemp("scale") / "run")
    script = os.path.join(ROOT, "scripts", "bench", "synthetic_run.py")
    proc = subprocess.run([sys.executable, script, folder, str(EVALUATIONS)], cwd=ROOT, capture_output=True, text=True, timeout=7200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return folder


def test_a_resume_reads_the_state_file_alone(big_run):
    got = run_python(RESUME, os.path.join(big_run, "checkpoint.h5"))
    assert got["recorded"] == EVALUATIONS and got["proposals"]
    assert got["peak_mb"] < BOUNDS_MB["resume"], got


def test_status_and_report_count_every_evaluation_in_bounded_memory(big_run):
    status = run_python(COMMAND, "status", big_run, "--json")
    assert status["code"] == 0 and json.loads(status["out"])["evaluations"] == EVALUATIONS
    assert status["peak_mb"] < BOUNDS_MB["status"], status
    report = run_python(COMMAND, "report", big_run, "--json", "--top", "5")
    summary = json.loads(report["out"])
    assert report["code"] == 0 and summary["evaluations"] == EVALUATIONS and [t["rank"] for t in summary["top"][:5]] == [1, 2, 3, 4, 5]
    assert summary["top"][0]["id"] == summary["best"]["id"]
    assert report["peak_mb"] < BOUNDS_MB["report"], report


def test_select_chooses_again_without_the_history(big_run):
    chosen = run_python(COMMAND, "select", big_run, "--size", "3", "--json")
    assert chosen["code"] == 0 and json.loads(chosen["out"])["evaluations"] == EVALUATIONS
    assert chosen["peak_mb"] < BOUNDS_MB["select"], chosen
