"""Reading a run that a job is writing (issue 35, defects 13 and 14): every reader sees one checkpoint whole, never one
version's listing or selection with another's segments or weights, and a run a starting job has claimed is called that.

The races are made deterministic: a job's checkpoint (a rename over checkpoint.h5, then the removal of the segments
it merged) is made to happen at the worst moment, between two reads of one reader."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from checkpoint_fixture import SPACE, info
from fakes import landscape, search_config

from ensemble import store
from ensemble.hall_of_fame import HallOfFame, Member
from ensemble.problem import Classification
from ensemble.select import select_ensemble
from ensemble.store import StoredEnsemble, chosen_members, read_chosen, write_ensemble
from evolve.app.presentation.report import report
from evolve.app.run.reselect import SelectionCache, reselect
from evolve.app.infra.rundir import CLAIM_NAME, claim_run_dir
from evolve.app.infra.runlock import LOCK_NAME
from evolve.app.commands.status import format_status, status
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.errors import RunDirError
from evolve.runfile import checkpoint, history
from evolve.transport.protocol import InProcessTransport

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (not conftest's: the job's process imports this module, not torch)
VAL_Y, TEST_Y = np.array([0, 1, 2, 0, 1, 2]), np.array([2, 1, 0, 2])


def _member(ident: int, fitness: float) -> Member:
    rng = np.random.default_rng(ident)
    return Member(ident, fitness, {"family": "mlp"}, {"learning_rate": 0.01},
                  rng.dirichlet(np.ones(3), len(VAL_Y)).astype(np.float32), rng.dirichlet(np.ones(3), len(TEST_Y)).astype(np.float32),
                  {"0.weight": rng.normal(size=(3, 4)).astype(np.float32)})


def _run_file(path: str, best: int) -> None:
    """A run file whose hall holds members 0 to 3 and whose ensemble is member ``best`` alone (the best by fitness)."""
    problem = Classification(3)
    hall = HallOfFame(8, [_member(i, 0.9 if i == best else 0.5 - 0.01 * i) for i in range(4)])
    selection = select_ensemble(list(hall), problem, VAL_Y, TEST_Y, "top_k", 1)
    assert selection.ids == [best]
    with h5py.File(path, "w") as f:
        write_ensemble(f.create_group(store.GROUP), StoredEnsemble(problem, (4,), "float32", VAL_Y, TEST_Y, hall, selection))


def _checkpoint_after_first_read(monkeypatch, replace) -> None:
    """``replace()`` (a job's checkpoint) runs once, right after the reader's first reading of an ensemble group."""
    real, done = store.read_ensemble, []

    def read_then_checkpoint(*args, **kwargs):
        out = real(*args, **kwargs)
        if not done:
            done.append(True)
            replace()
        return out
    monkeypatch.setattr(store, "read_ensemble", read_then_checkpoint)


@pytest.mark.parametrize("reader", ["read_chosen", "read_members"])
def test_predict_reads_the_ensemble_and_its_weights_from_one_checkpoint(tmp_path, monkeypatch, reader):
    """Defect 14: read_chosen opened the run file twice, took the chosen ids from one checkpoint and the weights from the
    next, and called a healthy run 'member #1 has no stored weights'. Predict, export and load_ensemble read through it."""
    run = tmp_path / "run"
    run.mkdir()
    path = str(run / store.RUN_FILE_NAME)
    _run_file(path, best=0)
    _run_file(str(tmp_path / "next.h5"), best=1)
    _checkpoint_after_first_read(monkeypatch, lambda: os.replace(tmp_path / "next.h5", path))  # as the job replaces it
    if reader == "read_chosen":
        stored = read_chosen(str(run))
        chosen = chosen_members(stored, str(run), need_weights=True)
    else:  # what predict, export and load_ensemble call
        from ensemble.predict import read_members

        stored, chosen = read_members(str(run))
    assert [m.id for m, _ in chosen] == [0]  # the checkpoint that was in place when the reader opened it, whole
    np.testing.assert_array_equal(chosen[0][0].weights["0.weight"], _member(0, 0.0).weights["0.weight"])
    assert all(m.weights is None for m in stored.hall_of_fame if m.id != 0)  # only the chosen members' weights are read


class Job:
    """A job's checkpoints, as evens run writes them: the search goes on in process and each :meth:`checkpoint` saves it
    (new segments, merged like a binary counter; the state file renamed over the old; the segments it no longer lists
    removed), with its ensemble chosen again."""

    def __init__(self, path: str):
        self.path, self.state, self.choose = path, SearchState.fresh(0, candidates=6), SelectionCache(info())

    def checkpoint(self, evaluations: int) -> None:
        run_search(self.state, InProcessTransport(landscape, 2), SPACE, search_config(evaluations, 4, 6, 0))
        self.state.selection = self.choose(self.state.hall_of_fame)
        checkpoint.save(self.path, self.state, info())


def _checkpoint_before_segments_open(monkeypatch, job: Job, evaluations: int) -> list:
    """The job checkpoints (and removes segments the reader's listing names) right before a reader first opens the
    segments it listed: the race of defect 13. Returns the names of the segments that were removed under the reader."""
    real, gone = history.open_listed, []

    def checkpoint_then_open(folder, listed):
        if not gone:
            job.checkpoint(evaluations)
            gone.extend(s.name for s in listed if not os.path.exists(os.path.join(folder, s.name)))
            assert gone, "the job's checkpoint removed none of the segments listed: no race"
        return real(folder, listed)
    monkeypatch.setattr(history, "open_listed", checkpoint_then_open)
    return gone


def test_report_reads_one_checkpoint_while_a_job_merges_its_segments(tmp_path, monkeypatch):
    """Defect 13: report read the state file of one checkpoint and the segments of the next (or met the merge that
    removed them). It reads one checkpoint whole: counts, tables, CSV and figures agree with each other."""
    run = tmp_path / "run"
    run.mkdir()
    job = Job(str(run / "checkpoint.h5"))
    for n in (5, 9, 12):
        job.checkpoint(n)
    gone = _checkpoint_before_segments_open(monkeypatch, job, 40)  # merges every segment into one
    summary = json.loads(report(str(run), as_json=True, top=1000, csv_path=str(tmp_path / "runs.csv")))
    assert gone
    shown = sorted(row["id"] for row in summary["top"])  # every network (all succeed on this landscape)
    assert summary["evaluations"] == summary["status_counts"]["ok"] == len(shown) == 40  # the checkpoint in place at the opening
    with open(tmp_path / "runs.csv") as f:
        assert len(f.read().splitlines()) == 1 + 40
    state, _ = checkpoint.load(str(run / "checkpoint.h5"))
    assert shown == sorted(r.id for r in state.records)


def test_status_reads_a_jobs_first_checkpoint_which_has_no_account_yet(tmp_path):
    """A job's first checkpoint is written before its first result, without the account of the history (the search
    loop starts it): status read it as a run from before the account and failed with an AttributeError."""
    run = tmp_path / "run"
    claim = claim_run_dir(str(run))  # this process is the job
    try:
        state = SearchState.fresh(0, candidates=6)
        assert state.tally is None
        checkpoint.save(str(run / "checkpoint.h5"), state, info())
        facts = status(str(run))
        assert facts["state"] == "running" and facts["evaluations"] == 0 and facts["failures"] == {}
        assert "evaluations: 0 of" in format_status(facts)
    finally:
        claim.lock.release()


def test_a_run_directory_a_starting_job_has_claimed_is_called_that(tmp_path):
    """Defect 13: on a run directory a job has claimed and not yet checkpointed, status said 'no checkpoint.h5 here; is
    this a run directory?'. Status says the run is starting and which job holds it; report and select name that job."""
    run = tmp_path / "run"
    claim = claim_run_dir(str(run))  # this process is the starting job
    try:
        facts = status(str(run))
        assert facts["state"] == "starting" and facts["job"]["pid"] == str(os.getpid())
        line = format_status(facts)
        assert "is starting" in line and f"process {os.getpid()}" in line and "\n" not in line
        for command in (lambda: report(str(run)), lambda: reselect(str(run))):
            with pytest.raises(RunDirError, match=f"a job has claimed this run and is starting \\(host .*, process {os.getpid()}, since "):
                command()
    finally:
        claim.lock.release()


def test_a_run_directory_whose_starting_job_died_is_called_that(tmp_path):
    """A start killed before its first checkpoint leaves its claim and a lock naming a process that is gone."""
    run = tmp_path / "run"
    run.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    (run / CLAIM_NAME).write_text("created=1\n")
    (run / LOCK_NAME).write_text(f"host={os.uname().nodename} pid={dead} started=2026-01-01T00:00:00+0000\n")
    for command in (lambda: status(str(run)), lambda: report(str(run))):
        with pytest.raises(RunDirError, match=f"the job that claimed this run \\(.*process {dead}.*\\) ended before its first checkpoint"):
            command()
    (run / CLAIM_NAME).unlink()
    (run / LOCK_NAME).unlink()
    with pytest.raises(RunDirError, match="no checkpoint.h5 here; is this a run directory"):
        status(str(run))


WRITER = """
import sys
sys.path[:0] = [{tests!r}, {root!r}]
from test_concurrent_reads import Job
job, n = Job(sys.argv[1]), 4
job.checkpoint(n)
print("ready", flush=True)
while sys.stdin.readline():  # a checkpoint for every line the test writes, until it closes the pipe
    n += 3
    job.checkpoint(n)
"""


def test_readers_beside_a_job_that_checkpoints_all_the_time_never_call_it_damaged(tmp_path):
    """Stress: a job (another process) checkpoints while report, status and predict's reading run in a loop, none of them
    says 'damaged' or 'no stored weights', and report's tables are its account's. The job checkpoints in step with the
    readers (a line each turn), so the test races however loaded the machine is."""
    run = tmp_path / "run"
    run.mkdir()
    path = str(run / "checkpoint.h5")
    writer = subprocess.Popen([sys.executable, "-c", WRITER.format(tests=os.path.join(ROOT, "tests"), root=ROOT), path],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        assert writer.stdout.readline() == "ready\n"
        versions = set()
        for turn in range(10):
            writer.stdin.write("\n")  # a checkpoint: it lands while these reads run
            writer.stdin.flush()
            summary = json.loads(report(str(run), as_json=True, top=1000))
            assert summary["evaluations"] == len(summary["top"])  # one checkpoint's account and history
            assert status(str(run))["evaluations"] >= 4
            stored = read_chosen(str(run))
            assert all(m.weights for m, _ in chosen_members(stored, str(run), need_weights=True))
            st = os.stat(path)
            versions.add((st.st_ino, st.st_mtime_ns))
        assert len(versions) > 3  # the job did checkpoint under the readers
    finally:
        writer.stdin.close()
        writer.wait(timeout=60)
    assert writer.returncode == 0
