"""The project's Slurm job scripts under a real Slurm (tests/slurm_cluster.py: munged, slurmctld and slurmd on localhost,
started once for this module), with srun launching the ranks through its pmi2 plugin as on a site.

Each test submits scripts/slurm/evens-cpu.sbatch with sbatch and watches the job through scontrol and its run
directory. A requeued job is started at once (``scontrol update StartTime=now``) instead of after Slurm's two-minute
hold. The two tests that wait on Slurm's clocks (an early warning, a time limit) run their course in threads from
the module's start, beside the others (``clocked``). Where Slurm cannot run (not root, not installed) every test
here skips, saying why; scripts/test.sh installs it where it runs as root with apt. ``-m "not slurm"`` leaves them
out while working.
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from cli_fixture import checkpoint_evaluations, report
from conftest import ROOT, tiny_search, write_blobs
from slurm_cluster import LocalSlurm, why_not

pytestmark = [pytest.mark.slurm, pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("slurm")]
SBATCH = os.path.join(ROOT, "scripts", "slurm", "evens-cpu.sbatch")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = why_not()
    if reason:
        pytest.skip(reason)
    cluster = LocalSlurm(str(tmp_path_factory.mktemp("slurm")))
    try:
        cluster.start()
    except RuntimeError as exc:
        cluster.stop()
        pytest.skip(f"a local Slurm did not start here: {exc}")
    yield cluster
    cluster.stop()


def make_job(slurm, tmp_path):
    """Submit the CPU job script for a small search on 3 ranks; ``submit(*evens_args, sbatch=[...], script=..., **env)``."""
    data = write_blobs(tmp_path / "data.h5", sample_shape=(1, 6, 6), n=(90, 30, 30))
    config = tmp_path / "small.toml"
    config.write_text(f'[data]\npath = "{data}"\n[search]\ncheckpoint_seconds = 0.0\n')
    evens = tmp_path / "evens"  # evens, with the arguments of tmp_path/more_args after the script's (a test's later say)
    evens.write_text(f'#!/bin/bash\nexec "{sys.executable}" -m evolve "$@" $(cat "{tmp_path}/more_args" 2>/dev/null)\n')
    evens.chmod(0o755)
    run_dir = str(tmp_path / "run")
    output = str(tmp_path / "job.out")
    submitted = []
    env = {"EVENS": str(evens), "EVENS_SRUN_MPI": "pmi2", "EVENS_TASKS_PER_NODE": "3", "EVENS_RESTART_DELAY": "0",
           "EVENS_SLURM_DIR": os.path.dirname(SBATCH), "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1",
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}

    def submit(*evens_args, sbatch=(), script=SBATCH, **more_env):
        args = ["--nodes=1", "--ntasks-per-node=3", "--cpus-per-task=1", f"--output={output}", "--open-mode=append", *sbatch,
                script, str(config), run_dir, *tiny_search(), *evens_args]
        job_id = slurm.sbatch(args, env={**env, **more_env}, cwd=str(tmp_path))
        submitted.append(job_id)
        return job_id

    def out():
        return open(output).read() if os.path.exists(output) else ""

    def recorded():
        return checkpoint_evaluations(run_dir)

    def wait_for_records(job_id, n, seconds=120):
        deadline = time.monotonic() + seconds
        while recorded() < n:
            state = slurm.state(job_id)
            assert state in ("PENDING", "RUNNING", "CONFIGURING"), (state, out())
            assert time.monotonic() < deadline, ("no progress", out())
            time.sleep(0.3)

    def ids():
        from evolve.runfile import checkpoint
        state, _ = checkpoint.load(os.path.join(run_dir, "checkpoint.h5"), weights=False)
        return sorted(r.id for r in state.records)

    return SimpleNamespace(submit=submit, out=out, recorded=recorded, wait_for_records=wait_for_records, report=lambda: report(run_dir),
                           ids=ids, run_dir=run_dir, tmp=tmp_path, ids_submitted=submitted)


@pytest.fixture
def job(slurm, tmp_path):
    return make_job(slurm, tmp_path)


class Scenario(threading.Thread):
    """A test's whole course (``course(slurm, job)``) run in a thread from the module's start, so that the tests that
    wait on Slurm's clocks (a time limit, an early warning: about 100 s each) wait at once, beside the others; the
    test then joins it, and its assertions' failure is the test's."""

    def __init__(self, course, slurm, job):
        super().__init__(daemon=True)
        self.course, self.slurm, self.job, self.error = course, slurm, job, None

    def run(self) -> None:
        try:
            self.course(self.slurm, self.job)
        except BaseException as exc:  # (raised again in the test that joins it)
            self.error = exc

    def outcome(self, seconds: float) -> None:
        self.join(seconds)
        assert not self.is_alive(), ("still going after", seconds, self.job.out())
        if self.error is not None:
            raise self.error


@pytest.fixture(scope="module", autouse=True)
def clocked(request, slurm, tmp_path_factory):
    """The courses of the selected tests that wait on Slurm's clocks, started now; name -> Scenario."""
    selected = {getattr(item, "originalname", "") for item in request.session.items if item.module is request.module}
    started = {}
    for name, course in CLOCKED.items():
        if name in selected:
            started[name] = Scenario(course, slurm, make_job(slurm, tmp_path_factory.mktemp(name[:24])))
            started[name].start()
    yield started
    for scenario in started.values():
        if scenario.is_alive() and scenario.job.ids_submitted:
            slurm.run(["scancel", *map(str, scenario.job.ids_submitted)], check=False)
            scenario.join(60)


def test_a_search_runs_to_completion_under_sbatch_with_srun_launching_the_ranks(slurm, job):
    job_id = job.submit("--set", "search.evaluations=6")
    done = slurm.wait_for(job_id, ("COMPLETED", "FAILED", "CANCELLED"), 180)
    assert done["JobState"] == "COMPLETED", job.out()
    assert "srun --ntasks=3 --ntasks-per-node=3 --kill-on-bad-exit=1 --cpus-per-task=1 --mpi=pmi2" in job.out()
    assert "the search is complete" in job.out()
    assert job.ids() == list(range(6)) and job.report()["evaluations"] == 6


def test_processes_that_mpi_sees_each_alone_end_the_job_at_once_without_a_requeue(slurm, job):
    """The site's default MPI plugin (none here) with PyPI's MPICH: every rank refuses in one line, exit 2, not requeued."""
    job_id = job.submit("--set", "search.evaluations=6", EVENS_SRUN_MPI="")
    done = slurm.wait_for(job_id, ("COMPLETED", "FAILED", "CANCELLED"), 120)
    assert done["JobState"] == "FAILED" and done["Restarts"] == "0", job.out()
    errors = [line for line in job.out().splitlines() if line.startswith("evens: error:")]
    assert errors and all("srun started 3 processes, but MPI sees each one alone" in e for e in errors), job.out()
    assert "not restarting" in job.out() and "scontrol requeue" not in job.out() and "requeued" not in job.out()
    assert not os.path.exists(job.run_dir)


def test_the_early_warning_drains_requeues_and_resumes_to_completion(clocked):
    clocked["test_the_early_warning_drains_requeues_and_resumes_to_completion"].outcome(600)


def early_warning(slurm, job):
    """--signal=B:USR1@100 on a three-minute limit: the warning reaches the batch shell some 80 s in (time enough for the
    first results on a 2-core machine at load 10, whose start-up took over 30 s), the search drains and saves, the
    script requeues the job, and the requeued job resumes; every evaluation once."""
    job_id = job.submit("--set", "search.evaluations=1000000", "--set", "search.drain_seconds=5",
                        sbatch=["--time=00:03:00", "--signal=B:USR1@100"])
    slurm.wait_for(job_id, "RUNNING", 60)
    slurm.wait_for(job_id, "PENDING", 210)  # requeued by the script after the warning
    assert "SIGUSR1: asking the search to save its checkpoint" in job.out() and "requeued (it was RUNNING)" in job.out(), job.out()
    first = job.recorded()
    assert first > 0, ("the warning came before the first result was saved", job.out())
    (job.tmp / "more_args").write_text(f"--set search.evaluations={first + 30}")  # a budget the resumed job finishes
    slurm.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=10"])
    done = slurm.wait_for(job_id, ("COMPLETED", "FAILED", "CANCELLED"), 300, started_again=True)
    assert done["JobState"] == "COMPLETED" and int(done["Restarts"]) >= 1, job.out()
    assert f"run --resume {job.run_dir}" in job.out()
    assert first > 0 and job.ids() == list(range(first + 30))


def test_scancel_saves_exits_75_and_is_not_requeued(slurm, job):
    job_id = job.submit("--set", "search.evaluations=100000", "--set", "search.term_drain_seconds=3")
    job.wait_for_records(job_id, 2)
    slurm.run(["scancel", str(job_id)])
    done = slurm.wait_for(job_id, ("CANCELLED", "COMPLETED", "FAILED"), 90)
    deadline = time.monotonic() + 30
    said = re.compile(r"checkpoint saved; (job \d+ was cancelled|Slurm is ending job \d+ before its time limit).*, so it is not requeued")
    while not said.search(job.out()) and time.monotonic() < deadline:
        time.sleep(0.5)  # the batch shell writes its last lines as the job ends
    assert done["JobState"] == "CANCELLED" and done["Restarts"] == "0", job.out()
    assert said.search(job.out()), job.out()  # (this Slurm keeps no accounting: the second)
    time.sleep(3)
    assert slurm.state(job_id) == "CANCELLED"  # and it stays so
    assert 2 <= job.recorded() == len(job.ids())


def test_a_time_limit_without_warning_is_survived(clocked):
    clocked["test_a_time_limit_without_warning_is_survived"].outcome(600)


def time_limit(slurm, job):
    """No --signal: at the limit Slurm sends SIGTERM to every rank and the batch shell, and SIGKILL KillWait (30 s)
    later. The search drains for term_drain_seconds, saves and exits 75; the script, without accounting to ask, sees
    the job ending at its limit and requeues it. The requeued job resumes, given a budget it finishes (the user may
    change search.evaluations on resume), under a longer limit."""
    script = job.tmp / "no-warning.sbatch"
    script.write_text("".join(line for line in open(SBATCH) if "--signal" not in line))
    job_id = job.submit("--set", "search.evaluations=1000000", "--set", "search.term_drain_seconds=3",
                        sbatch=["--time=00:01:00"], script=str(script))
    job.wait_for_records(job_id, 1)
    slurm.wait_for(job_id, "PENDING", 150)  # past the limit, requeued
    assert "SIGTERM: the search is saving its checkpoint" in job.out(), job.out()
    assert "requeued (it was TIMEOUT)" in job.out(), job.out()
    first = job.recorded()
    (job.tmp / "more_args").write_text(f"--set search.evaluations={first + 30}")
    slurm.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=10"])
    done = slurm.wait_for(job_id, ("COMPLETED", "FAILED", "CANCELLED"), 300, started_again=True)
    assert done["JobState"] == "COMPLETED", job.out()
    assert first > 0 and job.ids() == list(range(first + 30))


def test_a_step_that_dies_is_restarted_inside_the_allocation(slurm, job):
    """A worker rank killed (as by the out-of-memory killer): srun's --kill-on-bad-exit ends the step, and the script
    resumes the run in a new step of the same job."""
    job_id = job.submit("--set", "search.evaluations=60")
    job.wait_for_records(job_id, 2)
    ranks = subprocess.run(["pgrep", "-f", f"evolve run .*{job.run_dir}"], capture_output=True, text=True).stdout.split()
    workers = [int(p) for p in ranks if "SLURM_PROCID=2" in open(f"/proc/{p}/environ").read().replace("\0", " ")]
    assert workers, ranks
    os.kill(workers[0], signal.SIGKILL)
    done = slurm.wait_for(job_id, ("COMPLETED", "FAILED", "CANCELLED"), 240)
    assert done["JobState"] == "COMPLETED" and done["Restarts"] == "0", job.out()
    assert "resuming (restart 1 of 3)" in job.out(), job.out()
    assert job.ids() == list(range(60))


# The tests whose course waits on Slurm's clocks: started by ``clocked`` when the module starts
CLOCKED = {"test_the_early_warning_drains_requeues_and_resumes_to_completion": early_warning,
           "test_a_time_limit_without_warning_is_survived": time_limit}
