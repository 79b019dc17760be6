"""evens status (issue 25, defect 1): for the run's real age, what the workers are doing (training apart
from queued), the rate, the time to go, the checkpoint's age and the job holding the run; nothing
current for a run no job holds."""
import os
import time
from dataclasses import replace

import pytest
from fakes import SimulatedTransport, VirtualClock, search_config
from test_checkpoint_report import finished_run

from evolve.app.presentation.report import tally_of
from evolve.app.infra.runlock import RunLock
from evolve.app.commands.status import format_status, status, status_command
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.errors import RunDirError
from evolve.runfile import checkpoint, version
from evolve.runfile.version import read_run
from evolve.search.space_config import parse_space


def save(folder, state, info):
    """``state`` saved as the run's checkpoint, with the account of its records as a master keeps it (the tests
    move records' times about after the search, so the account is taken again from what they are now)."""
    folder.mkdir(exist_ok=True)
    state.tally = tally_of(state.records, info)
    checkpoint.save(str(folder / "checkpoint.h5"), state, info)
    return str(folder)


def with_budget(info, evaluations):
    return replace(info, config=replace(info.config, search=replace(info.config.search, evaluations=evaluations)))


def running(state, saved_at, session_age, training, queued, workers=(1, 2)):
    """``state`` as a job's checkpoint leaves it mid-search: its last results finished in the session
    ``session_age`` seconds old at ``saved_at``, with ``training`` [(rank, id, seconds)] and ``queued`` [(rank, id)]."""
    finished = sorted(r.finished for r in state.records)
    shift = saved_at - 1.0 - finished[-1]  # the last result a second before the save
    for r in state.records:
        r.started, r.finished = r.started + shift, r.finished + shift
    state.dispatch = {"workers": list(workers), "training": [[w, i, saved_at - s] for w, i, s in training],
                      "queued": [list(q) for q in queued], "session_started": saved_at - session_age, "saved_at": saved_at}
    return state


def test_a_young_search_shows_trainings_apart_from_queued_tasks_and_a_rate_over_its_age(tmp_path):
    """Before: 'workers: 4 of 2 busy' (queued tasks counted as busy) and a rate of the last ten
    minutes' results divided by ten minutes for a search 15 s old, so an ETA of hours."""
    state, info = finished_run(budget=20)
    now = time.time() + 100  # (the job took the lock before its checkpoint)
    state = running(state, saved_at=now - 2, session_age=15, training=[(1, 20, 4.0), (2, 21, 1.5)], queued=[(1, 22), (2, 23)])
    info = with_budget(info, 40)  # (20 done, 20 to go)
    folder = save(tmp_path / "run", state, info)
    with RunLock.acquire(folder):
        s = status(folder, now=now)
    assert s["state"] == "running" and s["workers"] == 2 and s["workers_training"] == 2 and s["tasks_queued"] == 2
    assert s["longest_training"] == {"id": 20, "rank": 1, "seconds": pytest.approx(4.0)}
    assert s["recent_seconds"] == pytest.approx(15.0)
    in_window = sum(r.finished > now - 2 - 15 for r in state.records)
    assert s["per_minute_recent"] == pytest.approx(in_window / 15 * 60)
    assert s["eta_seconds"] == pytest.approx(20 / s["per_minute_recent"] * 60 - 2.0)  # from now, not from the checkpoint
    assert s["checkpoint_age_seconds"] == pytest.approx(2.0)
    text = format_status(s)
    assert "workers (at the last checkpoint): 2 of 2 training, 2 task(s) queued behind them; the longest, #20 on rank 1, for 4s" in text
    assert "per minute over the last 15s, about" in text and "a job holds the run" in text and "last checkpoint 2s ago" in text


def test_an_old_search_takes_its_rate_over_the_last_ten_minutes_before_the_checkpoint(tmp_path):
    state, info = finished_run(budget=20)
    now = time.time() + 100
    state = running(state, saved_at=now - 30, session_age=3600, training=[(1, 20, 1.0)], queued=[])
    folder = save(tmp_path / "run", state, info)
    with RunLock.acquire(folder):
        s = status(folder, now=now)
    assert s["recent_seconds"] == pytest.approx(600.0)
    assert s["per_minute_recent"] == pytest.approx(sum(r.finished > now - 30 - 600 for r in state.records) / 10)


@pytest.mark.parametrize("budget, word", [(20, "finished"), (50, "stopped short of its budget")])
def test_a_run_no_job_holds_shows_no_rate_and_no_time_to_go(tmp_path, budget, word):
    """Before: a run that had ended 28 s after it started still showed a rate and 'about 1h30m00s to go'."""
    state, info = finished_run(budget=20)
    info = with_budget(info, budget)
    folder = save(tmp_path / "run", state, info)
    s = status(folder, now=time.time() + 3600)
    assert s["job"] is None and s["per_minute_recent"] is None and s["eta_seconds"] is None
    assert s["state"] == ("finished" if budget == 20 else "stopped")
    assert s["per_minute_overall"] == pytest.approx(20 / (info.wall_seconds / 60))
    text = format_status(s)
    assert word in text and "to go" not in text and "per minute over the last" not in text
    assert "workers (at the last checkpoint): none training" in text


def test_a_job_that_has_not_checkpointed_yet_gets_no_rate_from_the_last_job(tmp_path):
    state, info = finished_run(budget=20)
    now = time.time()
    state = running(state, saved_at=now - 7200, session_age=60, training=[], queued=[])
    info = with_budget(info, 40)
    folder = save(tmp_path / "run", state, info)
    with RunLock.acquire(folder):  # (its stamp: now, after the checkpoint)
        s = status(folder, now=now)
    assert s["state"] == "running" and s["per_minute_recent"] is None and s["eta_seconds"] is None
    assert "this job has not written a checkpoint yet" in format_status(s)


def test_the_run_file_holds_the_dispatchers_view_at_each_checkpoint():
    """What status shows is what the master's dispatcher held when it saved: every id training or
    queued is one the checkpoint lists as pending, training before queued on each worker."""
    clock = VirtualClock()
    transport = SimulatedTransport({1: 1.0, 2: 1.7, 3: 2.3}, clock=clock, depth=2)
    views = []

    def keep(state):
        views.append((dict(state.dispatch), sorted(p.id for p in state.pending)))

    config = search_config(30, population=6, prefetch=1, checkpoint_seconds=2.0)
    state = SearchState.fresh(0, 8)
    run_search(state, transport, parse_space({}).for_sample_shape((1, 8, 8)), config, checkpoint=keep, clock=clock,
               wall_clock=clock)
    mid = [(v, pending) for v, pending in views if v["training"]]
    assert mid, "no checkpoint was written while trainings were out"
    for view, pending in mid:
        assert view["workers"] == [1, 2, 3] and len(view["training"]) <= 3
        assert len({w for w, _, _ in view["training"]}) == len(view["training"])  # one training a worker
        out = sorted([i for _, i, _ in view["training"]] + [i for _, i in view["queued"]])
        assert out == pending
        assert all(w in {t[0] for t in view["training"]} for w, _ in view["queued"])  # queued only behind a training
        assert view["saved_at"] >= max(s for _, _, s in view["training"])
    assert any(v["queued"] for v, _ in mid)  # prefetch queued tasks behind trainings
    assert state.dispatch["training"] == [] and state.dispatch["queued"] == []  # the search finished: nothing out


def test_the_view_survives_the_run_file(tmp_path):
    state, info = finished_run(budget=12)
    state.dispatch = {"workers": [1, 2], "training": [[1, 12, 5.0]], "queued": [[1, 13]], "session_started": 1.0, "saved_at": 6.0}
    checkpoint.save(str(tmp_path / "c.h5"), state, info)
    assert checkpoint.load(str(tmp_path / "c.h5"), weights=False)[0].dispatch == state.dispatch


def test_status_of_a_missing_run_directory_is_one_line():
    with pytest.raises(RunDirError, match="no such run directory"):
        status_command(os.path.join("/nonexistent", "run"))


def test_a_read_that_met_a_replacement_is_tried_again_and_damage_is_reported_at_once(tmp_path, monkeypatch):
    """read_run (status and report beside a job): an opening that failed while the job replaced the state file
    is tried again; one that failed on a file nobody replaced is damage, and raises on the first try."""
    state, info = finished_run()
    path = os.path.join(save(tmp_path / "run", state, info), "checkpoint.h5")
    opening, tries = version.RunVersion, []

    def replaced_while_opening(p, segments=True):
        tries.append(1)
        if len(tries) < 3:
            checkpoint.save(p, state, info)  # the job checkpoints: a new state file under the same name
            raise ValueError("segment seg-0.h5 cannot be read (No such file or directory)")
        return opening(p, segments)

    monkeypatch.setattr(version, "RunVersion", replaced_while_opening)
    assert len(read_run(path)[0].records) == len(state.records) and len(tries) == 3
    monkeypatch.setattr(version, "RunVersion", lambda p, segments=True: tries.append(1) or opening(p, segments))
    with open(path, "r+b") as f:
        f.write(b"\xff" * 64)  # its superblock
    tries.clear()
    start = time.monotonic()
    with pytest.raises(RunDirError):
        read_run(path)
    assert len(tries) == 1 and time.monotonic() - start < 5


def test_a_job_killed_while_it_held_the_run_is_not_shown_as_holding_it(tmp_path):
    """SIGKILL leaves the lock file naming its holder (the kernel drops the flock, not the name): status must
    not show a job holding the run, a rate or a time to go for it."""
    import signal
    import subprocess
    import sys

    from conftest import ROOT

    state, info = finished_run(budget=20)
    info = with_budget(info, 40)
    folder = save(tmp_path / "run", state, info)
    code = f"import os, signal; from evolve.app.infra.runlock import RunLock; RunLock.acquire({folder!r}); os.kill(os.getpid(), signal.SIGKILL)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=60).returncode == -signal.SIGKILL
    s = status(folder)
    assert s["job"] is None and s["ended_job"]["pid"] and s["state"] == "stopped" and s["eta_seconds"] is None
    assert "no job holds the run (the last, host" in format_status(s) and "ended without letting it go" in format_status(s)


@pytest.mark.parametrize("age, held", [(60.0, True), (3600.0, False)])
def test_another_hosts_job_holds_the_run_while_its_heartbeat_is_fresh(tmp_path, age, held):
    from evolve.app.infra.runlock import LOCK_NAME

    state, info = finished_run(budget=20)
    folder = save(tmp_path / "run", state, info)
    lock = os.path.join(folder, LOCK_NAME)
    with open(lock, "w") as f:
        f.write("host=some-other-node pid=4242 started=2026-11-27T07:30:42+0000 slurm_job=81234\n")
    os.utime(lock, (time.time() - age, time.time() - age))
    s = status(folder)
    assert (s["job"] is not None) == held and (s["ended_job"] is not None) == (not held)
    assert ("Slurm job 81234" in format_status(s))
