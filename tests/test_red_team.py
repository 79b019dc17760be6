"""Faults found by trying to break evens as an attacker would (issue 24, section 4: items 5, 6 and 7).

Each test reproduces the attack on a real small run and asserts what the user gets: one line, a
sensible exit status, and nothing of theirs destroyed or left behind.
"""
import json
import os
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest
from conftest import ROOT, evens_cmd, launch, mpiexec, seals_again, tiny_search

from data_bcast.h5file import write_dataset
from ensemble.problem import Regression

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("red_team")]  # one process: the module's run is made once
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)


def evens(*args, timeout=60):
    """``evens ARGS`` on one process (no mpiexec), as a user types it."""
    return subprocess.run(evens_cmd() + list(args), capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=ENV, check=False)


def one_line_error(proc) -> str:
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, proc.stderr
    return errors[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished regression run of 3 tiny networks whose test targets are all the same number."""
    tmp = tmp_path_factory.mktemp("red_team")
    rng = np.random.default_rng(0)
    splits = {}
    for split, n in (("train", 60), ("val", 20), ("test", 20)):
        x = rng.normal(size=(n, 8)).astype(np.float32)
        y = np.full(n, 7.0, np.float32) if split == "test" else (x @ np.arange(8.0)).astype(np.float32)
        splits[split] = (x, y)
    data = str(tmp / "data.h5")
    write_dataset(data, splits)
    cfg = tmp / "c.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n[search]\nevaluations = 3\n[ensemble]\nsize = 2\n')
    out = str(tmp / "run")
    proc = launch(2, evens_cmd() + ["run", str(cfg), "--out", out, *tiny_search("['mlp']")], timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return {"dir": out, "data": data, "stdout": proc.stdout}


def copy_run(run, tmp_path) -> str:
    copy = str(tmp_path / "run")
    shutil.copytree(run["dir"], copy)
    return copy


# 4.5: SIGTERM during predict

@pytest.mark.parametrize("ranks", [1, 2])
def test_sigterm_during_predict_leaves_no_temporary_file(run, tmp_path, ranks):
    """As Slurm cancels a step: SIGTERM to every process of it, mid-write."""
    x = np.random.default_rng(1).normal(size=(40_000, 8)).astype(np.float32)
    with h5py.File(tmp_path / "new.h5", "w") as f:
        f["x"] = x
    out = tmp_path / "p.h5"
    # a small batch keeps the write going for tens of seconds: the signal comes mid-write
    args = evens_cmd() + ["predict", run["dir"], str(tmp_path / "new.h5"), "--out", str(out), "--batch-size", "8"]
    proc = subprocess.Popen(args if ranks == 1 else [mpiexec(), "-n", str(ranks), *args], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not any(p.name.startswith(".p.h5.") and p.stat().st_size > 8192 for p in tmp_path.iterdir()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the temporary file never grew"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.h5"]  # no hidden temporary, no half-written output
    line = one_line_error(subprocess.CompletedProcess(args, proc.returncode, "", err))
    assert proc.returncode == 128 + signal.SIGTERM and "ended by SIGTERM" in line, (proc.returncode, err)


# 4.6: the run lock

def test_a_lock_hard_linked_to_another_file_is_refused_and_that_file_kept(run, tmp_path):
    run_dir = copy_run(run, tmp_path)
    victim = tmp_path / "precious.txt"
    victim.write_text("the user's own words\n")
    lock = os.path.join(run_dir, ".evens-lock")
    os.remove(lock)
    os.link(victim, lock)
    summary = tmp_path / "run" / "summary.json"
    summary_before = summary.read_text()
    proc = evens("select", run_dir, "--method", "top_k")
    line = one_line_error(proc)
    assert proc.returncode == 2 and ".evens-lock" in line and "link" in line, line
    assert victim.read_text() == "the user's own words\n"
    assert summary.read_text() == summary_before  # the refused select changed nothing


def test_a_fifo_lock_is_refused_in_one_line_without_hanging(run, tmp_path):
    run_dir = copy_run(run, tmp_path)
    lock = os.path.join(run_dir, ".evens-lock")
    os.remove(lock)
    os.mkfifo(lock)
    proc = evens("select", run_dir, "--method", "top_k", timeout=60)
    line = one_line_error(proc)
    assert proc.returncode == 2 and ".evens-lock" in line and "FIFO" in line, line


# 4.7: messages

def test_an_absurd_depth_in_a_crafted_run_file_is_one_line(run, tmp_path):
    run_dir = copy_run(run, tmp_path)
    with h5py.File(os.path.join(run_dir, "checkpoint.h5"), "r+") as f:
        for member in f["ensemble/members"].values():
            network = json.loads(member.attrs["network"])
            network["depth"] = 10**15
            member.attrs["network"] = json.dumps(network)
        seals_again(f)  # crafted, not damaged: its checksums hold
    proc = evens("predict", run_dir, run["data"], "--split", "test", "--out", str(tmp_path / "p.h5"))
    line = one_line_error(proc)
    assert proc.returncode == 2 and "checkpoint.h5: member #" in line and "cannot be built here (MemoryError)" in line, line
    assert not any(p.name.startswith(".p.h5") for p in tmp_path.iterdir())


def test_an_npz_given_to_run_names_evens_convert(tmp_path):
    np.savez(tmp_path / "d.npz", x_train=np.zeros((10, 4), np.float32), y_train=np.zeros(10, np.int64))
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[data]\npath = "{tmp_path / "d.npz"}"\n')
    proc = launch(2, evens_cmd() + ["run", str(cfg), "--out", str(tmp_path / "r")], timeout=60, cwd=ROOT)
    line = one_line_error(proc)
    assert proc.returncode == 2 and "d.npz" in line and "evens convert" in line, line


def test_r2_of_constant_targets_is_undefined_not_zero(run):
    problem = Regression.from_targets(np.zeros((4, 2)))
    y = np.array([[1.0, 7.0], [2.0, 7.0], [3.0, 7.0], [4.0, 7.0]])
    assert np.isnan(problem.scores(y + 0.5, y)["r2"])  # output 1 is constant and missed: R² would divide by 0
    assert problem.scores(y, y)["r2"] == 1.0  # a perfect fit is still 1
    def strict(name):
        pytest.fail(f"{name} in JSON")

    with open(os.path.join(run["dir"], "summary.json")) as f:
        summary = json.load(f, parse_constant=strict)
    for part in (summary["best"], summary["ensemble"]):
        assert part["test_r2"] is None and part["test_rmse"] > 0 and np.isfinite(part["val_r2"])
    assert run["stdout"].count("test rmse") == 2 and run["stdout"].count("r2 n/a") == 2, run["stdout"]
    proc = evens("report", run["dir"])  # read back from the run file
    assert proc.returncode == 0 and proc.stdout.count("r2 n/a") == 2, proc.stdout + proc.stderr
    proc = evens("report", run["dir"], "--json")
    assert proc.returncode == 0, proc.stderr
    reported = json.loads(proc.stdout, parse_constant=strict)
    assert reported["ensemble"]["test_r2"] is None and all(t["test_r2"] is None for t in reported["top"])
