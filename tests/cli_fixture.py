"""What the end-to-end tests of the `evens` command share: a small search's config, and ways to watch a job."""
import json
import os
import subprocess
import time

import h5py
from conftest import ROOT, evens_cmd, mpiexec, tiny_search

SMALL = tiny_search() + ["--set", "ensemble.size=3"]


def report(run_dir):
    out = subprocess.run(evens_cmd() + ["report", run_dir, "--json"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def checkpoint_evaluations(run_dir):
    try:
        with h5py.File(os.path.join(run_dir, "checkpoint.h5"), "r") as f:
            return int(sum(f["segments"]["rows"][...]))
    except (OSError, KeyError):
        return 0


def wait_for_checkpoint(proc, run_dir, evaluations, seconds=120):
    """Until the running job's checkpoint holds ``evaluations``; the job must not end meanwhile."""
    deadline = time.monotonic() + seconds
    while checkpoint_evaluations(run_dir) < evaluations:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.2)


def start_job(args):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    return subprocess.Popen([mpiexec(), "-n", "3", *evens_cmd(), *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
