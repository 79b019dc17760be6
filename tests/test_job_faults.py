"""End to end: a job that is signalled, preempted, killed, loses a rank, runs out of disk or has a worker that
hangs or dies ends in order, says what happened, and leaves a run that resumes."""
import fcntl
import glob
import os
import re
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import h5py
import pytest
from cli_fixture import SMALL, checkpoint_evaluations, report, start_job, wait_for_checkpoint
from conftest import ROOT, evens_cmd, launch, launch_python, mpiexec, tiny_search

pytestmark = pytest.mark.e2e
SLURM = os.path.join(ROOT, "scripts", "slurm")
STUBS = os.path.join(ROOT, "tests", "slurm_stubs")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGKILL])
def test_interrupted_run_resumes(tmp_path, small_config, sig):
    """SIGTERM to every process (as Slurm does at preemption), SIGUSR1 (Slurm's early warning with
    --signal) or SIGKILL (a crash), then --resume."""
    out = str(tmp_path / "run")
    proc = start_job(["run", small_config, "--out", out, "--set", "search.evaluations=40", *SMALL])
    wait_for_checkpoint(proc, out, 3)
    os.killpg(proc.pid, sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0
    if sig != signal.SIGKILL:
        assert "checkpoint saved" in stderr and f"--resume {out}" in stderr
        assert proc.returncode == 75, stderr  # resumable: what a batch script tests to requeue
    done = checkpoint_evaluations(out)
    assert 3 <= done < 40

    out_then = report(out)["pending"]  # (with a task queued behind each training, up to 2 a worker, and those the in-flight log adds)
    resumed = launch(3, evens_cmd() + ["run", "--resume", out, "--set", f"search.evaluations={done + out_then + 2}"], timeout=180, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr
    final = report(out)
    assert final["evaluations"] == done + out_then + 2 and final["pending"] == 0 and final["sessions"] == 2


@pytest.mark.parametrize(
    "where, message",
    [("interrupt", "interrupted on rank 0"), ("worker", "injected worker fault")],
)
@pytest.mark.timing
def test_an_internal_failure_on_one_rank_ends_the_whole_job(tmp_path, small_config, where, message):
    """Wall-clock timing: the job ends within 90 s (a few s here); ranks left waiting on the failed one would
    hang until the 120 s timeout."""
    out = str(tmp_path / "run")
    start = time.monotonic()
    proc = launch_python(3, "prog_fault.py", where, "run", small_config, "--out", out, "--set", "search.evaluations=30", *SMALL, timeout=120)
    assert proc.returncode != 0
    assert message in proc.stderr and ("Traceback" in proc.stderr or where == "interrupt")
    assert time.monotonic() - start < 90


@pytest.mark.timing
def test_a_full_disk_ends_the_job_in_one_line_and_keeps_the_last_checkpoint(tmp_path, small_config):
    """Wall-clock timing: the job ends within 90 s (a few s here); workers left waiting on the master would
    hang until the 120 s timeout."""
    out = str(tmp_path / "run")
    start = time.monotonic()
    proc = launch_python(3, "prog_fault.py", "master", "run", small_config, "--out", out, "--set", "search.evaluations=30", *SMALL, timeout=120)
    # (from where it starts: a line of MPICH's, written by another process at the same moment, may precede it)
    errors = [line[line.index("evens: error:"):] for line in proc.stderr.splitlines() if "evens: error:" in line]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(errors) == 1 and "cannot write the checkpoint (No space left on device)" in errors[0] and f"--resume {out}" in errors[0]
    assert "MPI_Abort" not in proc.stderr  # the workers end with the master, trainings out or not (issue 35, defect 17)
    assert time.monotonic() - start < 90
    done = checkpoint_evaluations(out)  # the second write's: it loads, and the run resumes from it
    resumed = launch(3, evens_cmd() + ["run", "--resume", out, "--set", f"search.evaluations={done + 2}"], timeout=180, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr
    assert report(out)["evaluations"] == done + 2


def _job_pids(root_pid):
    """``root_pid`` and every process below it."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parents.setdefault(int(fh.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += parents.get(pid, [])
    return found


def _mpich_shm_files(root_pid):
    """The files in /dev/shm that MPICH's ranks of the job under ``root_pid`` have mapped (only names MPICH uses)."""
    names = set()
    for pid in _job_pids(root_pid):
        try:
            with open(f"/proc/{pid}/maps") as fh:
                for line in fh:
                    path = line.split(None, 5)[-1].strip().removesuffix(" (deleted)")
                    if path.startswith("/dev/shm/mpich_"):
                        names.add(path)
        except OSError:
            pass
    return names


def _wait_for(predicate, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.1)


def test_a_signal_drains_the_running_trainings_and_ends_cleanly(tmp_path, small_config):
    """SIGTERM to the job: nothing new goes out, the trainings out are recorded, the checkpoint holds
    them all (nothing to redo), the workers are stopped without MPI_Abort (no /dev/shm file left), exit 75."""
    out = str(tmp_path / "run")
    proc = start_job(["run", small_config, "--out", out, "--set", "search.evaluations=400", "--set", "train.isolation=none", "--set", "search.term_drain_seconds=60", *SMALL])
    _wait_for(lambda: checkpoint_evaluations(out) >= 3, proc)
    shm = _mpich_shm_files(proc.pid)
    assert shm, "the job maps MPICH's shared memory"
    os.killpg(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 75, stderr
    out_then = int(re.search(r"draining: waiting up to 60 s for (\d+) trainings", stderr).group(1))
    assert 1 <= out_then <= 2
    # the tasks queued behind them (search.prefetch, default 1) are dropped, unless one had just started
    recorded = int(re.search(r"draining: all (\d+) trainings recorded", stderr).group(1))
    assert out_then <= recorded <= 2 * out_then
    assert "MPI_Abort" not in stderr
    saved = int(re.search(r"checkpoint saved with (\d+) evaluations[;,]", stderr).group(1))
    assert not [p for p in shm if os.path.exists(p)], "a clean end frees MPICH's shared memory"
    final = report(out)
    assert final["evaluations"] == saved
    from evolve.runfile import checkpoint
    state, _ = checkpoint.load(os.path.join(out, "checkpoint.h5"))
    dropped = {p.id: p.attempts for p in state.pending}  # never started: to redo, nothing counted against them
    assert final["pending"] == len(dropped) <= 2 and set(dropped.values()) <= {0}
    assert sorted([r.id for r in state.records] + list(dropped)) == list(range(saved + len(dropped)))  # nothing lost
    resumed = launch(3, evens_cmd() + ["run", "--resume", out, "--set", f"search.evaluations={final['evaluations'] + len(dropped) + 2}"],
                     timeout=180, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(dropped)} to redo" in resumed.stderr


@pytest.mark.timing
def test_a_second_signal_ends_the_drain_at_once(tmp_path, small_config):
    """A training that never ends (its worker stopped) holds the drain; a second signal ends the job
    at once, with that training left to redo. Wall-clock timing: the job still runs 3 s after the first
    signal (the drain may wait 600 s), and ends within 15 s of the second (a second or two here)."""
    out = str(tmp_path / "run")
    env = dict(os.environ, EVENS_TEST_FAULTS="hang:4", OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    proc = subprocess.Popen([mpiexec(), "-n", "3", *evens_cmd(), "run", small_config, "--out", out, "--set", "search.evaluations=400", "--set", "train.isolation=none",
                             "--set", "search.term_drain_seconds=600", *SMALL], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for(lambda: checkpoint_evaluations(out) >= 8, proc)  # evaluation 4 is out for good
    os.killpg(proc.pid, signal.SIGTERM)
    time.sleep(3)
    assert proc.poll() is None, "the drain waits for the training out"
    first = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - first < 15
    assert proc.returncode == 75, stderr
    assert "a second signal" in stderr and "checkpoint saved" in stderr
    with h5py.File(os.path.join(out, "checkpoint.h5"), "r") as f:
        pending = dict(zip(f["pending/id"][...].tolist(), f["pending/attempts"][...].tolist()))
    # 4 (and what was queued behind it on its stopped worker) redone on resume; a stop is not a crash
    assert pending[4] == 0 and set(pending.values()) == {0} and len(pending) <= 2


@pytest.mark.timing
def test_after_sigterm_the_drain_fits_in_slurms_kill_wait(tmp_path, small_config):
    """Slurm sends SIGKILL KillWait (30 s by default) after SIGTERM, so the drain after SIGTERM waits
    search.term_drain_seconds, not drain_seconds (the early warning's). A training that never ends (its
    worker stopped) holds the drain; with term_drain_seconds = 2 and drain_seconds = 600 the job ends,
    checkpointed, with that training left to redo. Wall-clock timing: within 20 s of the signal (some
    3 s here); a drain of drain_seconds would run until the 60 s timeout."""
    out = str(tmp_path / "run")
    env = dict(os.environ, EVENS_TEST_FAULTS="hang:4", OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    proc = subprocess.Popen([mpiexec(), "-n", "3", *evens_cmd(), "run", small_config, "--out", out, "--set", "search.evaluations=400", "--set", "train.isolation=none",
                             "--set", "search.drain_seconds=600", "--set", "search.term_drain_seconds=2", *SMALL], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    _wait_for(lambda: checkpoint_evaluations(out) >= 8, proc)  # evaluation 4 is out for good
    os.killpg(proc.pid, signal.SIGTERM)
    signalled = time.monotonic()
    try:
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 75, stderr
    assert time.monotonic() - signalled < 20
    assert "draining: waiting up to 2 s" in stderr and "still out after 2 s" in stderr and "checkpoint saved" in stderr, stderr
    with h5py.File(os.path.join(out, "checkpoint.h5"), "r") as f:
        assert 4 in f["pending/id"][...].tolist()


@pytest.mark.slow
def test_a_network_that_kills_its_worker_is_recorded_as_crashed_and_the_run_finishes(tmp_path, small_config):
    """Evaluation 5 kills its worker process (as the out-of-memory killer would), which ends the whole
    MPI job; every resume may die once more, and the run still finishes its budget, with evaluation 5
    recorded as crashed and never sent a third time."""
    out = str(tmp_path / "run")
    env = {"EVENS_TEST_FAULTS": "kill:5"}
    first = launch(3, evens_cmd() + ["run", small_config, "--out", out, "--set", "search.evaluations=12", "--set", "train.isolation=none", *SMALL],
                   timeout=180, cwd=ROOT, env=env)
    assert first.returncode != 0, first.stderr  # the job died with its worker
    codes = []
    for _ in range(3):
        resumed = launch(3, evens_cmd() + ["run", "--resume", out], timeout=180, cwd=ROOT, env=env)
        codes.append(resumed.returncode)
        if resumed.returncode == 0:
            break
    assert codes[-1] == 0 and len(codes) <= 2, (codes, resumed.stderr)
    from evolve.runfile import checkpoint
    state, _ = checkpoint.load(os.path.join(out, "checkpoint.h5"))
    assert len(state.records) == 12 and state.pending == []
    crashed = state.by_id()[5]
    assert crashed.status == "crashed" and crashed.message == "in flight when 2 jobs ended; not sent again"
    assert "evaluation 5 was in flight when 2 jobs ended" in resumed.stderr
    assert sorted(r.id for r in state.records) == list(range(12))


@pytest.mark.slow
@pytest.mark.timing
def test_a_worker_that_stops_answering_is_named_and_the_job_ends(tmp_path, small_config):
    """Evaluation 3's worker stops (SIGSTOP) for good: past its time limit plus search.hang_seconds
    the master names its rank and host, checkpoints and ends the job with exit status 69; the
    resume redoes it once (it hangs again) and then records it as crashed. Wall-clock timing: the
    limits (8 s + 4 s: a tiny training outlasted 2 s + 3 s at load 10 on 2 cores) end the first job within
    60 s; a master that never noticed would run until the 120 s timeout."""
    out = str(tmp_path / "run")
    env = {"EVENS_TEST_FAULTS": "hang:3"}
    limits = ["--set", "search.eval_timeout_seconds=8", "--set", "search.hang_seconds=4", "--set", "train.isolation=none"]
    start = time.monotonic()
    first = launch(3, evens_cmd() + ["run", small_config, "--out", out, "--set", "search.evaluations=10", *limits, *SMALL],
                   timeout=120, cwd=ROOT, env=env)
    assert first.returncode == 69, first.stderr
    assert time.monotonic() - start < 60
    assert re.search(r"error: worker rank [12] on \S+ has not answered for \d+ s.*\(evaluation 3\)", first.stderr), first.stderr
    assert "checkpoint saved" in first.stderr
    again = launch(3, evens_cmd() + ["run", "--resume", out, *limits], timeout=120, cwd=ROOT, env=env)
    assert again.returncode == 69, again.stderr
    last = launch(3, evens_cmd() + ["run", "--resume", out, *limits], timeout=120, cwd=ROOT, env=env)
    assert last.returncode == 0, last.stderr
    from evolve.runfile import checkpoint
    state, _ = checkpoint.load(os.path.join(out, "checkpoint.h5"))
    assert len(state.records) == 10 and state.by_id()[3].status == "crashed"


# --- Slurm: scripts/slurm/evens-job.sh under the stubs of tests/slurm_stubs ------------------------------

# What the batch script reads of a step is its exit status. This stand-in for `evens run` notes that a
# rank started, and on SIGTERM exits as evens does once its checkpoint is saved (75), or as a rank
# killed by the signal would (STAND_IN_EXIT=143).
STAND_IN = """import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(int(os.environ.get("STAND_IN_EXIT", "75"))))
open(os.path.join(os.environ["STUB_DIR"], f"step.{os.getpid()}"), "w").close()
time.sleep(60)
"""


@pytest.fixture
def slurm_job(tmp_path, small_config):
    """Submit scripts/slurm/evens-cpu.sbatch through the stub sbatch, as Slurm would, on 3 local ranks;
    ``step`` is what the step runs: evens, the stand-in above, or a program that calls MPI_Abort at once."""
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    (stub_dir / "stand_in.py").write_text(STAND_IN)
    (stub_dir / "aborting.py").write_text("from mpi4py import MPI\nMPI.COMM_WORLD.Abort(3)\n")
    steps = {"evens": "-m evolve", "stand-in": f'"{stub_dir / "stand_in.py"}"', "aborting": f'"{stub_dir / "aborting.py"}"'}
    for name, program in steps.items():
        (stub_dir / name).write_text(f'#!/bin/bash\nexec "{sys.executable}" {program} "$@"\n')
        (stub_dir / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{STUBS}{os.pathsep}{os.path.dirname(mpiexec())}{os.pathsep}{os.environ['PATH']}",
               STUB_DIR=str(stub_dir), PYTHONPATH=ROOT, SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="1", SLURM_SUBMIT_DIR=ROOT,
               EVENS_TASKS_PER_NODE="3", EVENS_THREADS="1", EVENS_RESTART_DELAY="0", OMP_NUM_THREADS="1")
    run_dir = str(tmp_path / "run")

    def start(*extra, step="evens", **more_env):
        for name in os.listdir(stub_dir):  # a new job: not yet cancelled, no step started
            if name.startswith("step.") or name == "job_state":
                os.remove(stub_dir / name)
        args = ["sbatch", "--nodes=1", os.path.join(SLURM, "evens-cpu.sbatch"), small_config, run_dir, *tiny_search(), *extra]
        return subprocess.Popen(args, env=dict(env, EVENS=str(stub_dir / step), **more_env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)

    def wait_for_step(proc, ranks=3, seconds=60):
        deadline = time.monotonic() + seconds
        while len([n for n in os.listdir(stub_dir) if n.startswith("step.")]) < ranks:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.05)

    def finish(proc, timeout=120):
        try:
            _, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
        return proc.returncode, err

    def calls():
        log = stub_dir / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def scancel():
        subprocess.run(["scancel", "4242"], env=env, check=True, timeout=10)

    return SimpleNamespace(start=start, wait_for_step=wait_for_step, finish=finish, calls=calls, scancel=scancel, env=env,
                           stub_dir=stub_dir, run_dir=run_dir)


def _requeues(calls):
    return [c for c in calls if c.startswith("scontrol requeue")]


@pytest.mark.parametrize("cancel_shows, accounting", [("CANCELLED", None), ("COMPLETING", "CANCELLED by 1000")])
def test_scancel_is_not_requeued_but_a_preemption_is(slurm_job, cancel_shows, accounting):
    """scancel and a preemption both send SIGTERM, and the search exits 75 either way; evens-job.sh asks
    Slurm what happened. While Slurm kills a job, scontrol shows JobState=COMPLETING (the flag hides the
    state), and accounting (sacct) has it."""
    job = slurm_job
    if accounting:
        (job.stub_dir / "sacct_state").write_text(accounting + "\n")
    proc = job.start(step="stand-in", STUB_CANCELLED_SHOWS=cancel_shows)
    job.wait_for_step(proc)
    job.scancel()
    code, err = job.finish(proc)
    assert code == 75 and "job 4242 was cancelled, so it is not requeued; submit it again to resume" in err, err
    assert not _requeues(job.calls()) and "scontrol show job 4242 -o" in job.calls()

    if accounting:
        (job.stub_dir / "sacct_state").write_text("PREEMPTED\n")
    proc = job.start(step="stand-in")
    job.wait_for_step(proc)
    (job.stub_dir / "job_state").write_text(cancel_shows.replace("CANCELLED", "PREEMPTED") + "\n")
    os.killpg(proc.pid, signal.SIGTERM)  # a preemption: SIGTERM to every process of the job
    code, err = job.finish(proc)
    assert code == 0 and "job 4242 requeued (it was PREEMPTED)" in err, err
    assert _requeues(job.calls()) == ["scontrol requeue 4242"]


def test_a_job_being_cancelled_starts_no_new_step(slurm_job):
    """A step killed by scancel's SIGTERM (exit 143) is not restarted: the job is ending, and each new
    step would fail at once and spend a restart (EVENS_RESTARTS) until nothing is left."""
    job = slurm_job
    proc = job.start(step="stand-in", STAND_IN_EXIT="143")
    job.wait_for_step(proc)
    job.scancel()
    code, err = job.finish(proc)
    assert code == 143 and "the job is ending, not restarting" in err, err
    assert len([c for c in job.calls() if c.startswith("srun ")]) == 1


@pytest.mark.timing
def test_a_requeued_job_waits_for_the_old_step_to_let_the_run_go(slurm_job):
    """The old step still drains and holds the run's lock when the requeued job starts: the new job
    waits (bounded by EVENS_LOCK_WAIT) instead of exiting 2 for good, then runs. Wall-clock timing: the
    lock is held for 4 s, well inside the 60 s wait."""
    job = slurm_job
    os.makedirs(job.run_dir)
    fd = os.open(os.path.join(job.run_dir, ".evens-lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"host=old-node pid={os.getpid()} slurm_job=4242\n".encode())
        proc = job.start("--set", "search.evaluations=2", EVENS_LOCK_WAIT="60")
        time.sleep(4)
    finally:
        os.close(fd)  # the old step ends: its lock goes
    code, err = job.finish(proc, timeout=180)
    assert code == 0 and "held by an earlier step (host=old-node" in err and "the search is complete" in err, err
    assert "another job is using this run" not in err


def _held_files():
    """Every file that a process we can see has open or mapped."""
    held = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            with open(f"/proc/{pid}/maps") as fh:
                held.update(line.split(None, 5)[-1].strip() for line in fh if "/" in line)
        except OSError:
            pass
    return held


def test_mpich_leftovers_of_an_aborted_step_are_removed(slurm_job, tmp_path):
    """A step that ends in MPI_Abort leaves MPICH's /tmp/hydra_hwloc_xmlfile_* (mpiexec's hydra writes
    one per node and job). After each step evens-job.sh removes those files of this user that no
    process has open or mapped (also /dev/shm/mpich_shm_*); a file that a running job holds stays."""
    job = slurm_job
    held_file = f"/tmp/hydra_hwloc_xmlfile_evenstest{os.getpid()}"  # as another job of ours, running, holds its own
    before = set(glob.glob("/tmp/hydra_hwloc_xmlfile_*"))
    with open(held_file, "w"):
        proc = job.start(step="aborting", EVENS_RESTARTS="0")
        code, err = job.finish(proc)
        try:
            assert code == 3 and "giving up" in err, err
            assert os.path.exists(held_file), "a file that a process holds is never removed"
            left = set(glob.glob("/tmp/hydra_hwloc_xmlfile_*")) - before - {held_file}
            assert not left - _held_files(), f"the aborted step's files are left: {sorted(left - _held_files())}"
        finally:
            os.remove(held_file)


def _job_processes(token: str) -> list[str]:
    """The live processes (not zombies) whose environment holds ``token``: what a job started, at any depth."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if token.encode() not in f.read():
                    continue
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
        except OSError:
            continue
        if state != "Z":
            found.append(f"{pid} {state} {command}")
    return found


@pytest.mark.parametrize("attempt", range(2))
def test_when_mpiexec_returns_after_an_abort_no_process_of_the_job_is_left(tmp_path, small_config, attempt):
    """SIGTERM with trainings out and no drain: the master checkpoints and ends the job (exit 75). When mpiexec
    returns, no rank and no training process of the job is alive (before, it aborted the job: 3 of 13 runs left some
    for up to 30 s, and a requeued step could start beside them)."""
    token = f"evens-job-{os.getpid()}-{time.monotonic_ns()}"
    out = str(tmp_path / "run")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT, EVENS_TEST_JOB=token)
    proc = subprocess.Popen([mpiexec(), "-n", "3", *evens_cmd(), "run", small_config, "--out", out, "--set", "search.evaluations=400",
                             "--set", "search.term_drain_seconds=0", *SMALL, "--set", "space.epochs={low = 200, high = 300}"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for_checkpoint(proc, out, 1, seconds=180)
    assert len(_job_processes(token)) >= 5  # mpiexec, its proxy, three ranks, and training processes
    os.killpg(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    left = _job_processes(token)
    assert proc.returncode == 75 and "checkpoint saved" in stderr, stderr
    assert not left, f"alive when mpiexec returned: {left}"
