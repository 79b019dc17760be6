"""The Slurm batch scripts, run without Slurm: stub srun/sbatch/scontrol on the PATH record their
arguments and launch the step with mpiexec, so the resume, requeue and restart logic really runs."""
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, mpiexec, tiny_search, write_blobs

pytestmark = pytest.mark.e2e
SLURM = os.path.join(ROOT, "scripts", "slurm")
STUBS = os.path.join(ROOT, "tests", "slurm_stubs")


def test_the_scripts_parse():
    for name in os.listdir(SLURM):
        assert subprocess.run(["bash", "-n", os.path.join(SLURM, name)]).returncode == 0, name


@pytest.fixture
def job(tmp_path):
    """Run scripts/slurm/evens-cpu.sbatch through the stub sbatch, as Slurm would, on 3 local ranks."""
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    evens = stub_dir / "evens"
    evens.write_text(f'#!/bin/bash\nexec "{sys.executable}" -m evolve "$@"\n')
    evens.chmod(0o755)
    data = write_blobs(tmp_path / "data.h5", sample_shape=(1, 6, 6), n=(90, 30, 30))
    config = tmp_path / "small.toml"
    config.write_text(f'[data]\npath = "{data}"\n[search]\ncheckpoint_seconds = 0.0\n')
    env = dict(os.environ, PATH=f"{STUBS}{os.pathsep}{os.path.dirname(mpiexec())}{os.pathsep}{os.environ['PATH']}",
               STUB_DIR=str(stub_dir), EVENS=str(evens), PYTHONPATH=ROOT, SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="1",
               SLURM_SUBMIT_DIR=ROOT, EVENS_TASKS_PER_NODE="3", EVENS_THREADS="1", EVENS_RESTART_DELAY="0")
    run_dir = str(tmp_path / "run")

    def start(*extra, **more_env):
        args = ["sbatch", "--nodes=1", os.path.join(SLURM, "evens-cpu.sbatch"), str(config), run_dir, *tiny_search(), *extra]
        return subprocess.Popen(args, env=dict(env, **more_env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    def calls():
        log = stub_dir / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    return start, calls, run_dir, stub_dir


def finish(proc, timeout=240):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def srun_calls(calls):
    return [c for c in calls() if c.startswith("srun ")]


def test_a_first_job_starts_the_run_and_a_later_one_resumes_it(job):
    start, calls, run_dir, _ = job
    code, err = finish(start("--set", "search.evaluations=3"))
    assert code == 0 and "the search is complete" in err, err
    first = srun_calls(calls)
    assert len(first) == 1 and f"--out {run_dir}" in first[0] and "--ntasks=3 --ntasks-per-node=3 --kill-on-bad-exit=1" in first[0]
    assert "--set train.device=cpu --set train.threads=1" in first[0]
    code, err = finish(start("--set", "search.evaluations=5"))
    assert code == 0, err
    second = srun_calls(calls)[1]
    assert f"run --resume {run_dir} " in second and "--out" not in second
    assert not any(c.startswith("scontrol") for c in calls())


def test_a_step_that_dies_is_resumed_inside_the_allocation_a_few_times_then_given_up(job):
    start, calls, run_dir, stub_dir = job
    (stub_dir / "fail_next").touch()  # a node is lost during the first step
    code, err = finish(start("--set", "search.evaluations=3"))
    assert code == 0 and "ended with exit 137; resuming (restart 1 of 3)" in err, err
    assert len(srun_calls(calls)) == 2
    (stub_dir / "fail_always").touch()
    code, err = finish(start("--set", "search.evaluations=6"))
    assert code == 137 and "the step failed 4 times (last exit 137); giving up" in err, err
    assert len(srun_calls(calls)) == 2 + 4  # bounded: never a loop


def test_bad_input_is_not_restarted(job):
    start, calls, run_dir, _ = job
    code, err = finish(start("--set", "search.evalutions=3"))
    assert code == 2 and "unknown key 'search.evalutions'" in err and "not restarting" in err, err
    assert len(srun_calls(calls)) == 1


@pytest.mark.slow
def test_the_early_warning_signal_checkpoints_and_requeues_the_job(job):
    start, calls, run_dir, _ = job
    proc = start("--set", "search.evaluations=100000")
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(run_dir, "checkpoint.h5")) or time.monotonic() < deadline - 110:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.3)
    os.kill(proc.pid, signal.SIGUSR1)  # what --signal=B:USR1@120 does: to the batch shell only
    code, err = finish(proc, timeout=120)
    assert code == 0, err
    assert "SIGUSR1: asking the search to save its checkpoint" in err and "checkpoint saved; job 4242 requeued" in err
    assert "scontrol requeue 4242" in calls()
    # the requeued job resumes
    code, err = finish(start("--set", "search.evaluations=3"))
    assert code == 0 and f"run --resume {run_dir}" in srun_calls(calls)[-1], err


def test_srun_is_given_the_cores_per_task_and_the_mpi_plugin_and_evens_chooses_the_threads(job):
    start, calls, run_dir, _ = job
    code, err = finish(start("--set", "search.evaluations=2", SLURM_CPUS_PER_TASK="1", EVENS_SRUN_MPI="pmi2", EVENS_THREADS=""))
    assert code == 0, err
    step = srun_calls(calls)[0]
    assert "--kill-on-bad-exit=1 --cpus-per-task=1 --mpi=pmi2 " in step, step  # srun stopped inheriting sbatch's -c in 22.05
    assert step.endswith("--set train.device=cpu")  # no train.threads from the script: evens divides the task's cores itself


def test_a_job_that_keeps_being_stopped_before_it_trains_stops_requeuing_itself(job):
    """A step that exits 75 before any evaluation (stopped during start-up, every time) is requeued twice, and the third
    job says why it does not requeue again instead of looping every two minutes; evens still takes the directory."""
    start, calls, run_dir, stub_dir = job
    stopped = stub_dir / "stopped"
    stopped.write_text("#!/bin/bash\nexit 75\n")  # what evens does when a signal stops it before its broadcast
    stopped.chmod(0o755)
    (stub_dir / "job_state").write_text("RUNNING")
    for job_number in (1, 2):
        code, err = finish(start("--set", "search.evaluations=2", EVENS=str(stopped)))
        assert code == 0 and "requeued (it was RUNNING)" in err, err
    code, err = finish(start("--set", "search.evaluations=2", EVENS=str(stopped)))
    assert code == 75 and "is not requeued: its last 2 requeues recorded no new evaluation" in err, err
    assert len([c for c in calls() if c.startswith("scontrol requeue")]) == 2
    code, err = finish(start("--set", "search.evaluations=2"))  # evens itself: the count does not stand in its way
    assert code == 0 and "the search is complete" in err, err
