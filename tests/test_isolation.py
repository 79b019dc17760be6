"""Trainings isolated from their rank (issue 24, section 1): a training process that dies, or passes its
time limit, is an evaluation with its cause, and the next task gets a fresh process."""
import glob
import os
import time

import numpy as np
import pytest
from conftest import ROOT

from data_bcast.layout import pack_arrays
from data_bcast.memory import NodeMemory
from ensemble.problem import problem_for
from ensemble.specs import BUILDER, GENES
from evolve.transport.isolation import KILL_GRACE, TrainerError, TrainerProcess, trainer_environment
from evolve.transport.protocol import Ended, Task

pytestmark = pytest.mark.xdist_group("isolation")  # one process: the module's training process is made once

MODELS = os.path.join(ROOT, "tests", "models")


def trainer_setup(arrays: dict, prefer: str) -> tuple[dict, NodeMemory]:
    """A training process's set-up as a worker rank hands it (the node's data by descriptor, 3 classes,
    the device preferred: "cpu" or "cuda"), and the memory holding ``arrays``: close it after the process."""
    specs, buffer = pack_arrays(arrays)
    memory = NodeMemory.private(buffer.size)
    memory.buffer[:] = buffer
    setup = {"sys_path": [MODELS], "data": {"size": memory.size, "specs": specs},
             "problem": problem_for("classification", arrays["train/y"], 3).to_dict(),
             "device": {"prefer": prefer, "local_index": 0, "threads": 1, "workers_per_gpu": 0},
             "train": {"precision": "fp32", "loss": "auto", "class_weights": "none", "split_seed": 0}}
    return setup, memory


def blobs(seed: int) -> dict:
    """Three classes of 4x4 samples, 60 / 20 / 20 rows, each class around its own mean."""
    rng = np.random.default_rng(seed)
    y = {s: rng.integers(0, 3, n).astype(np.int64) for s, n in (("train", 60), ("val", 20), ("test", 20))}
    arrays = {}
    for s in ("train", "val", "test"):
        arrays[f"{s}/x"] = (rng.normal(size=(len(y[s]), 1, 4, 4)) + y[s][:, None, None, None]).astype(np.float32)
        arrays[f"{s}/y"] = y[s]
    return arrays


@pytest.fixture(scope="module")
def fork_server():
    """This process as a worker rank would reach its node's fork server (evolve.transport.forkserver)."""
    from evolve.transport.forkserver import connect

    server = connect(os.urandom(6).hex(), trainer_environment())
    yield server
    server.close()


@pytest.fixture(scope="module", params=["fresh interpreter", "fork server"])
def trainer(request):
    server = request.getfixturevalue("fork_server") if request.param == "fork server" else None
    setup, memory = trainer_setup(blobs(0), "cpu")
    process = TrainerProcess(setup, memory.fd, server)
    assert process.start()["device"] == "cpu"
    yield process
    process.close()
    memory.close()


def task(ident: int, fault: str, time_limit: float = 0.0, seed: int = 7) -> Task:
    network = {BUILDER: "faulty_nets:build", GENES: {"fault": fault}}
    training = {"learning_rate": 0.01, "batch_size": 16, "epochs": 2}
    return Task(ident, network, training, seed=seed, watch={"time_limit": time_limit})


@pytest.mark.parametrize("fault, cause", [("sigkill", "killed by SIGKILL"), ("segfault", "killed by SIGSEGV"), ("exit", "exit status 3")])
def test_a_training_that_kills_its_process_is_crashed_with_its_cause_and_the_next_gets_a_fresh_one(trainer, fault, cause):
    before = trainer.starts
    good = trainer.evaluate(task(1, "none"))
    assert good.status == "ok" and good.epochs_done == 2
    # its predictions and weights come back whole, over the pipe
    assert good.val_pred.shape == (20, 3) and good.test_pred.shape == (20, 3) and np.isfinite(good.val_pred).all()
    assert sorted(good.weights) == ["inner.1.bias", "inner.1.weight"] and good.weights["inner.1.weight"].shape == (3, 16)
    ev = trainer.evaluate(task(2, fault))
    assert ev.status == "crashed" and f"its training process died: {cause}" in ev.message, ev.message
    assert trainer.starts == before  # the result comes back at once; the next task starts a fresh process
    again = trainer.evaluate(task(3, "none"))
    assert trainer.starts == before + 1
    assert again.status == "ok" and again.fitness == good.fitness  # the same network, the same seed: the same result


def test_a_training_stuck_inside_forward_is_killed_at_its_time_limit(trainer):
    # (the polite check between batches never comes; the limit leaves room for the first batch to begin at load 8:
    # at 4 s, and once at 8 s, a loaded machine's model set-up ran past it, and the polite check stopped the training
    # before its forward)
    limit = 15.0
    started = time.monotonic()
    ev = trainer.evaluate(task(4, "sleep", time_limit=limit))
    took = time.monotonic() - started
    assert ev.status == "timeout" and f"past its time limit of {limit:g} s" in ev.message, ev.message
    assert limit + KILL_GRACE - 0.5 <= took < limit + KILL_GRACE + 10
    assert trainer.evaluate(task(5, "none")).status == "ok"


def test_a_training_the_master_ends_is_killed_and_reaped_and_gives_no_result(trainer):
    """The master ends the job mid-training (MPIMasterTransport.end, issue 35 defect 17): the rank's wait for the result
    asks end_requested, kills the training's process (its group with it), reaps it, and raises Ended."""
    started = time.monotonic()
    trainer.end_requested = lambda: time.monotonic() - started > 1.0
    try:
        pid = trainer.proc.pid
        with pytest.raises(Ended):
            trainer.evaluate(task(6, "sleep"))
        assert time.monotonic() - started < 5 and trainer.proc is None
        assert not os.path.exists(f"/proc/{pid}"), "the ended training process is reaped"
    finally:
        trainer.end_requested = None
    assert trainer.evaluate(task(7, "none")).status == "ok"  # (a rank that goes on would start a fresh process)


@pytest.mark.parametrize("fault, words", [("huge", "memory: "), ("grow", "memory: its training process held"),
                                          ("grow_shared", "memory: its training process held")])
def test_a_training_past_its_memory_limit_is_crashed_with_memory_and_the_next_goes_on(trainer, fault, words):
    """train.max_host_memory_gb = 1: a request past it fails at once (RLIMIT_DATA), memory held past it
    is seen by the rank's watchdog (RssAnon) and the process killed, before the node's OOM killer."""
    limited = TrainerProcess({**trainer.setup, "max_host_memory_gb": 1.0}, trainer.data_fd, trainer.server)
    try:
        limited.start()
        pid = limited.proc.pid
        ev = limited.evaluate(task(20, fault))
        assert ev.status == "crashed" and ev.message.startswith(words), ev.message
        assert limited.evaluate(task(21, "none")).status == "ok"
    finally:
        limited.close()
    assert not glob.glob(f"/dev/shm/torch_{pid}_*"), "the killed process's shared memory is removed"


def test_a_training_process_that_cannot_set_up_says_why_in_one_line(tmp_path):
    memory = NodeMemory.private(16)
    setup = {"sys_path": [], "data": {"size": 16, "specs": []}, "problem": {"kind": "nonsense"},
             "device": {}, "train": {}}
    with pytest.raises(TrainerError) as info:
        TrainerProcess(setup, memory.fd).start()
    assert "\n" not in str(info.value) and str(info.value)
    memory.close()


def test_the_training_process_gets_no_mpi_launcher_variables():
    env = trainer_environment({"PMI_RANK": "1", "PMIX_NAMESPACE": "x", "HYDRA_CONTROL_FD": "7", "OMPI_COMM_WORLD_RANK": "1",
                               "PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0", "SLURM_LOCALID": "0"})
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0", "SLURM_LOCALID": "0"}


@pytest.mark.e2e
def test_networks_that_kill_segfault_exit_or_hang_are_recorded_and_the_job_finishes_its_budget(tmp_path):
    """At np=3 with train.isolation = "process": a user's network that SIGKILLs its process, segfaults,
    calls os._exit(3), sleeps inside forward past the time limit, or holds memory past
    train.max_host_memory_gb is recorded with its cause, and the search finishes its budget in one job
    (no job death, no resume)."""
    from conftest import evens_cmd, launch, write_blobs

    from evolve.runfile import checkpoint

    data = write_blobs(tmp_path / "data.h5", sample_shape=(1, 4, 4), n=(60, 20, 20), classes=3)
    cfg = tmp_path / "faulty.toml"
    cfg.write_text(f"""[data]
path = "{data}"
[model]
builder = "faulty_nets:build"
path = "{MODELS}"
[search]
evaluations = 18
population = 6
seed = 1
eval_timeout_seconds = 15.0  # (a loaded machine takes seconds to grow past 1 GB: the memory limit must come first)
[train]
threads = 1
isolation = "process"
max_host_memory_gb = 1.0
[space]
fault = ["none", "sigkill", "segfault", "exit", "sleep", "grow"]
epochs = {{low = 1, high = 2}}
""")
    # Each process notes at its exit whether it imported torch: the worker ranks must not (they run no model code)
    spy, noted = tmp_path / "spy", tmp_path / "imports.txt"
    spy.mkdir()
    (spy / "sitecustomize.py").write_text(
        "import atexit, os, sys\n"
        "def _note():\n"
        "    with open(os.environ['EVENS_IMPORT_SPY'], 'a') as f:\n"
        "        f.write(f\"{int('torch' in sys.modules)} {' '.join(sys.argv[:2])}\\n\")\n"
        "atexit.register(_note)\n")
    env = {"EVENS_IMPORT_SPY": str(noted), "PYTHONPATH": os.pathsep.join((str(spy), ROOT, os.path.join(ROOT, "tests")))}
    out = str(tmp_path / "run")
    done = launch(3, evens_cmd() + ["run", str(cfg), "--out", out], timeout=240, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = noted.read_text().splitlines()
    ranks = [line for line in lines if not any(other in line for other in ("trainer_process", "forkserver", "user_code"))]  # the ranks only
    assert len(ranks) == 3 and sorted(line[0] for line in ranks) == ["0", "0", "1"], lines  # the master imports torch; the workers not
    state, info = checkpoint.load(os.path.join(out, "checkpoint.h5"))
    space = info.space()
    assert len(state.records) == 18 and state.pending == [] and info.sessions == 1
    causes = {"sigkill": ("crashed", "killed by SIGKILL"), "segfault": ("crashed", "killed by SIGSEGV"),
              "exit": ("crashed", "exit status 3"), "sleep": ("timeout", "past its time limit of 15 s"), "none": ("ok", ""),
              "grow": ("crashed", "memory: ")}
    seen = set()
    for r in state.records:
        network, _ = space.settings(space.key(r.genome))
        fault = network[GENES]["fault"]
        status, words = causes[fault]
        assert r.status == status and words in r.message, (fault, r.status, r.message)
        seen.add(fault)
    assert seen == set(causes), seen  # (the seed was chosen so that every fault comes up)
