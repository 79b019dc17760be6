"""Which device each worker takes, and the start-up check over all ranks' bindings (mocked GPUs)."""
import pytest
import torch

from ensemble import device as dev
from ensemble.device import check_bindings, choose_device, gpu_index


@pytest.mark.parametrize("workers_per_gpu, expected", [
    (0, [0, 1, 2, 3, 0, 1, 2, 3]),  # round robin
    (1, [0, 1, 2, 3, 0, 1, 2, 3]),  # one each; the fifth wraps (and the UUID check refuses it)
    (2, [0, 0, 1, 1, 2, 2, 3, 3]),  # two each, in blocks
    (3, [0, 0, 0, 1, 1, 1, 2, 2]),
])
def test_gpu_index_for_eight_workers_on_four_gpus(workers_per_gpu, expected):
    assert [gpu_index(i, 4, workers_per_gpu) for i in range(8)] == expected


def test_a_task_that_sees_one_gpu_takes_it_whatever_its_node_index():
    assert [gpu_index(i, 1, 1) for i in range(4)] == [0, 0, 0, 0]  # srun --gpus-per-task=1


@pytest.fixture
def four_gpus(monkeypatch):
    chosen = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: chosen.append(d))
    return chosen


def test_choose_device_takes_its_gpu_and_makes_it_current(four_gpus):
    assert choose_device(5, "auto") == torch.device("cuda", 1)
    assert choose_device(5, "cuda", workers_per_gpu=2) == torch.device("cuda", 2)
    assert four_gpus == [torch.device("cuda", 1), torch.device("cuda", 2)]
    assert choose_device(5, "cpu") == torch.device("cpu")


def test_no_gpu_means_the_cpu_unless_cuda_was_asked_for(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # e.g. CUDA_VISIBLE_DEVICES=""
    assert choose_device(0, "auto") == torch.device("cpu")
    with pytest.raises(RuntimeError, match="no CUDA device is visible"):
        choose_device(0, "cuda")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        choose_device(0, "tpu")


def gpu(rank, host, uuid):
    return {"rank": rank, "host": host, "device": "cuda:0", "name": "NVIDIA H100", "uuid": uuid, "threads": 1}


def cpu(rank, host, threads):
    return {"rank": rank, "host": host, "device": "cpu", "name": "cpu", "uuid": "", "threads": threads}


def test_two_workers_on_one_gpu_by_accident_are_refused_before_training():
    # every task saw "GPU 0" and it was the same card: a launch without per-task GPU binding
    bindings = [gpu(1, "n1", "GPU-a"), gpu(2, "n1", "GPU-a"), gpu(3, "n2", "GPU-b"), gpu(4, "n2", "GPU-c")]
    error, lines = check_bindings(bindings, workers_per_gpu=1, cores={})
    assert error == ("ranks 1, 2 are all bound to GPU GPU-a on n1, but train.workers_per_gpu is 1; "
                     "check the launch's GPU binding (each task seeing the same GPU?) or raise it")
    assert lines == ["devices: 4 worker(s) on 3 GPU(s) (NVIDIA H100) of 2 host(s), up to 2 worker(s) per GPU"]
    assert check_bindings(bindings, workers_per_gpu=2, cores={})[0] is None
    assert check_bindings(bindings, workers_per_gpu=0, cores={})[0] is None  # sharing allowed, and reported
    # the same UUID on two hosts is two cards (UUIDs are per host as far as this check goes)
    assert check_bindings([gpu(1, "n1", "GPU-a"), gpu(2, "n2", "GPU-a")], 1, {})[0] is None


def test_cpu_threads_that_oversubscribe_a_host_are_reported():
    # three single-threaded ranks on 2 cores: the launch's choice, nothing fewer threads could fix
    assert check_bindings([cpu(1, "n1", 1), cpu(2, "n1", 1), cpu(3, "n1", 1)], 0, {"n1": 2})[1] == [
        "devices: 3 worker(s) on the CPUs of 1 host(s)"]
    error, lines = check_bindings([cpu(1, "n1", 4), cpu(2, "n1", 4), cpu(3, "n2", 1)], 0, {"n1": 2, "n2": 2})
    assert error is None
    assert lines == ["devices: 3 worker(s) on the CPUs of 2 host(s)",
                     "warning: the workers on n1 run 8 torch threads on 2 cores; set train.threads lower, or leave it 0 to divide the cores"]


def test_describe_the_cpu():
    d = dev.describe_device(torch.device("cpu"))
    assert d["device"] == "cpu" and d["uuid"] == "" and d["threads"] == torch.get_num_threads()


def test_ranks_bound_to_cores_of_their_own_each_take_them_all_and_unbound_ranks_divide_them():
    from evolve.app.infra.local import ranks_sharing

    node = frozenset(range(16))
    assert ranks_sharing(node, [node] * 4) == 4  # mpiexec, no binding: 4 threads each
    own = [frozenset(range(4 * i, 4 * i + 4)) for i in range(4)]  # srun --cpus-per-task=4 --cpu-bind=cores
    assert [ranks_sharing(m, own) for m in own] == [1, 1, 1, 1]
    halves = [frozenset(range(8)), frozenset(range(8)), frozenset(range(8, 16))]  # two ranks on one socket's cores
    assert [ranks_sharing(m, halves) for m in halves] == [2, 2, 1]
    assert ranks_sharing(node, [None, node, node]) == 2  # the master trains nothing and takes no share
    assert ranks_sharing(None, [None, node]) == 1


@pytest.mark.parametrize("env, threads, expected", [
    ({}, 0, 4),  # 16 cores, 4 training ranks on them
    ({"OMP_NUM_THREADS": "2"}, 0, 2),  # the user's (or srun's) OMP_NUM_THREADS
    ({"SLURM_CPUS_PER_TASK": "8"}, 0, 8),
    ({"OMP_NUM_THREADS": "2", "SLURM_CPUS_PER_TASK": "8"}, 0, 2),
    ({"OMP_NUM_THREADS": "2"}, 3, 3),  # train.threads wins
    ({"OMP_NUM_THREADS": "junk"}, 0, 4),
])
def test_trainer_threads_honour_train_threads_then_the_launcher_then_divide_the_cores(monkeypatch, env, threads, expected):
    from evolve.app.infra import local

    for name in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(local, "usable_cores", lambda: 16)
    monkeypatch.setattr(local, "spare_cores", lambda cores: cores)  # an idle machine
    assert local.trainer_threads(4, threads) == expected


@pytest.mark.parametrize("machine, bound, load, spare", [
    (16, 16, 0.3, 16),  # idle: every core
    (16, 16, 6.4, 10),  # six cores' worth of other work
    (2, 2, 4.0, 1),  # a busy 2-core CI machine: one
    (16, 4, 12.0, 4),  # bound by a scheduler to 4 cores: its own, whatever the machine's load
])
def test_spare_cores_leave_out_the_machines_load_unless_a_scheduler_bound_the_rank(monkeypatch, machine, bound, load, spare):
    from evolve.app.infra import local

    monkeypatch.setattr(local.os, "cpu_count", lambda: machine)
    monkeypatch.setattr(local.os, "getloadavg", lambda: (load, load, load))
    assert local.spare_cores(bound) == spare


def test_workers_take_the_threads_omp_num_threads_asks_for(tmp_path):
    """End to end: with train.threads = 0 each worker of an MPI job trains on the threads OMP_NUM_THREADS says,
    and without it on its share of the cores (devices.json records what each took)."""
    import json
    import os
    import sys

    from conftest import ROOT, launch, write_blobs

    from data_bcast.host import usable_cores

    data = write_blobs(tmp_path / "d.h5", sample_shape=(6,), n=(60, 20, 20))
    args = [sys.executable, "-m", "evolve", "run", "--set", f"data.path={data}", "--set", "search.evaluations=2",
            "--set", "space.epochs={low = 1, high = 1}", "--set", "space.width=[4]", "--set", "space.depth={low = 1, high = 1}",
            os.path.join(ROOT, "examples", "diabetes.toml")]
    for omp, most in (("3", 3), ("", max(1, usable_cores() // 2))):
        out = tmp_path / f"run{omp}"
        proc = launch(3, args + ["--out", str(out)], timeout=180, cwd=ROOT, env={"OMP_NUM_THREADS": omp})
        assert proc.returncode == 0, proc.stderr
        with open(out / "devices.json") as f:
            threads = [w["threads"] for w in json.load(f)["workers"]]
        # OMP_NUM_THREADS: exactly; else half the cores at most (two workers share them; fewer if the machine is busy)
        assert threads == [most, most] if omp else all(1 <= t <= most for t in threads), threads
