"""A user's code is a guest (evolve.app.infra.user_code): on the master it runs in a process of its own for the checks, with
a time limit and no MPI in reach, and what it starts ends with it; evens' signal handlers survive it. Each case is a
real `mpiexec -n 3 evens run`, and each failed before the guest rules (the job hung beyond every signal, ended with a
traceback and MPI_Abort, left processes behind, or died of the signal it should have drained on)."""
import os
import signal
import subprocess
import time

from cli_fixture import checkpoint_evaluations, report
from conftest import ROOT, alive, evens_cmd, mpiexec, write_blobs

MODELS = os.path.join(ROOT, "tests", "models")


def guest_config(tmp_path, builder: str, evaluations: int = 4, check_seconds: float = 60.0) -> str:
    data = write_blobs(tmp_path / "blobs.h5", sample_shape=(2, 8))
    cfg = tmp_path / "guest.toml"
    cfg.write_text(f'''[data]
path = "{data}"

[model]
builder = "{builder}"
path = "{MODELS}"
check_seconds = {check_seconds}

[search]
evaluations = {evaluations}
population = 3

[train]
threads = 1

[space]
width = [4, 8]
epochs = {{ low = 1, high = 2 }}
''')
    return str(cfg)


def run_job(tmp_path, cfg: str, extra_env: dict | None = None, **popen) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT, **(extra_env or {})}
    return subprocess.Popen([mpiexec(), "-n", "3", *evens_cmd(), "run", cfg, "--out", str(tmp_path / "run")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **popen)


def ended(proc: subprocess.Popen, seconds: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the job did not end within {seconds} s: {err[-2000:]}") from None


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_a_builder_that_calls_mpi_ends_the_job_in_one_line(tmp_path):
    """Before: the master's check waited in MPI_Barrier with the workers in the start-up collective; four SIGTERMs
    did nothing, only SIGKILL ended it."""
    proc = run_job(tmp_path, guest_config(tmp_path, "guest_nets:calls_mpi"))
    _, err = ended(proc, 120)
    assert proc.returncode == 2, err
    lines = error_lines(err)
    assert len(lines) == 1 and "may not use MPI" in lines[0] and "guest_nets:calls_mpi" in lines[0], err


def test_a_builder_that_hangs_ends_the_job_after_the_check_time(tmp_path):
    proc = run_job(tmp_path, guest_config(tmp_path, "guest_nets:hangs", check_seconds=3))
    began = time.monotonic()
    _, err = ended(proc, 120)
    assert proc.returncode == 2, err
    lines = error_lines(err)
    assert len(lines) == 1 and "did not finish in 3 s" in lines[0], err
    assert time.monotonic() - began < 90


def test_a_builder_that_exits_or_a_module_that_exits_at_import_is_one_line(tmp_path):
    """Before: a 30-line traceback, MPI_Abort(..., 1) and an mpich_shm file left (import_by_name caught Exception only)."""
    for n, (builder, said) in enumerate((("guest_nets:exits", "raised SystemExit: 3"), ("guest_exit_at_import:build", "raised SystemExit"))):
        (tmp_path / str(n)).mkdir()
        proc = run_job(tmp_path / str(n), guest_config(tmp_path / str(n), builder))
        _, err = ended(proc, 120)
        assert proc.returncode == 2, err
        lines = error_lines(err)
        assert len(lines) == 1 and said in lines[0] and "MPI_Abort" not in err, err


def test_processes_a_builder_starts_end_with_its_training_and_the_job(tmp_path):
    """Before: the search's summary came at 27 s, mpiexec returned after 149 s: the builder's sleeping children (one
    forked from the master's check, others from training processes) held the ranks' output pipes."""
    pids = tmp_path / "pids"
    pids.mkdir()
    proc = run_job(tmp_path, guest_config(tmp_path, "guest_nets:forks"), {"GUEST_PIDS": str(pids)})
    _, err = ended(proc, 150)  # the builder's children sleep 300 s
    assert proc.returncode == 0, err
    started = [int(p) for p in os.listdir(pids)]
    assert len(started) >= 5  # the master's check, and one a training at least
    time.sleep(1)
    outlived = [pid for pid in started if alive(pid)]
    assert not outlived, f"{len(outlived)} of the {len(started)} processes the builder started outlived the job"


def test_a_builder_that_resets_the_signal_handlers_does_not_stop_the_drain(tmp_path):
    """Before: the module put SIGTERM back to its default as it was imported on the master, and SIGTERM killed the
    master at once (exit 15, the lock held, no checkpoint of the results)."""
    cfg = guest_config(tmp_path, "guest_resets_signals:build", evaluations=400)
    proc = run_job(tmp_path, cfg, {"PYTHONPATH": os.pathsep.join([ROOT, MODELS])})
    out = str(tmp_path / "run")
    deadline = time.monotonic() + 180
    while checkpoint_evaluations(out) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = ended(proc, 120)
    assert proc.returncode == 75, err
    assert "checkpoint saved" in err
    assert report(out)["evaluations"] >= 2
