"""A signal that comes while `evens run` starts up (MPI_Init, the user's code, the data broadcast,
the devices) is kept, not lost: the job ends with exit 75, resumable, as a signal during the search.

To signal at a known moment, the config names a loss in a module that every rank imports before any
data moves; the module waits there until the test lets it go. By then MPI is initialised on every
rank, so MPICH's own SIGUSR1 handler is in place.
"""
import os
import signal
import subprocess
import time

import pytest
from cli_fixture import SMALL
from conftest import ROOT, evens_cmd, mpiexec

pytestmark = pytest.mark.e2e
RANKS = 2

SLOW_START = '''"""A loss whose module, on import, waits until the test writes the file "go" beside it."""
import os
import time

import torch.nn.functional as F

_here = os.path.dirname(os.path.abspath(__file__))
open(os.path.join(_here, f"importing.{os.getpid()}"), "w").close()
_deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(_here, "go")) and time.monotonic() < _deadline:
    time.sleep(0.05)


def loss(out, target):
    return F.cross_entropy(out, target)
'''


def wait_for_imports(proc, folder, seconds=60):
    deadline = time.monotonic() + seconds
    while len([n for n in os.listdir(folder) if n.startswith("importing.")]) < RANKS:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the ranks never reached the user's code"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signal_during_start_up_ends_the_job_resumable(tmp_path, small_config, sig):
    """SIGTERM (preemption) and SIGUSR1 (Slurm's early warning) to every process while the ranks are
    past MPI_Init and before the broadcast: exit 75 and a fresh run's directory left as it was."""
    models = tmp_path / "models"
    models.mkdir()
    (models / "slow_start.py").write_text(SLOW_START)
    out = str(tmp_path / "run")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    proc = subprocess.Popen([mpiexec(), "-n", str(RANKS), *evens_cmd(), "run", small_config, "--out", out, *SMALL,
                             "--set", "search.evaluations=2", "--set", f"model.path={models}", "--set", "train.loss=slow_start:loss",
                             "--set", "train.isolation=none"],  # (so that every rank imports the loss's module)
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_imports(proc, models)
        os.killpg(proc.pid, sig)
        time.sleep(0.5)  # delivered while every rank is still starting up
        (models / "go").touch()
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 75, stderr
    assert f"stopped by signal {int(sig)} during start-up" in stderr and "Traceback" not in stderr, stderr
    assert not os.path.exists(out), "a new run stopped before its first checkpoint leaves no directory behind"
