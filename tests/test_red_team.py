"""Faults found by trying to break evens as an attacker would (issue 24, section 4: item 6).

Each test reproduces the attack on a real small run and asserts what the user gets: one line, a
sensible exit status, and nothing of theirs destroyed or left behind.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest
from conftest import ROOT, evens_cmd, launch, tiny_search

from data_bcast.h5file import write_dataset

pytestmark = pytest.mark.e2e
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
