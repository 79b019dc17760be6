"""The CUDA paths: device choice, data resident on the GPU, mixed precision, predicting with a stored
ensemble. Skipped where no GPU is visible (CI has none); run on a GPU machine with
``python -m pytest tests/test_cuda.py``."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT, blob_splits, launch, tiny_search, write_blobs
from test_store_predict import FAMILIES, stored_run

from ensemble.device import choose_device, describe_device
from ensemble.predict import load_ensemble
from ensemble.problem import Classification
from ensemble.specs import NetworkSpec, TrainSpec
from ensemble.train import DeviceData, set_precision, train_and_evaluate

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")


def arrays_for(shape):
    splits = blob_splits(shape, (400, 100, 100))
    return {f"{s}/{k}": v for s, xy in splits.items() for k, v in zip("xy", xy)}


def test_choose_device_binds_node_local_ranks_round_robin():
    count = torch.cuda.device_count()
    for local in range(2 * count):
        device = choose_device(local, "auto")
        assert device == torch.device("cuda", local % count) and torch.cuda.current_device() == local % count
    assert choose_device(0, "cpu") == torch.device("cpu")
    torch.cuda.set_device(0)


def test_data_lives_on_the_gpu_and_the_labels_stay_on_the_host():
    data = DeviceData.from_arrays(arrays_for((1, 8, 8)), Classification(3), "cuda")
    assert all(t.is_cuda for t in data.x.values()) and data.fit_target.is_cuda
    assert all(isinstance(y, np.ndarray) for y in data.y.values())


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("shape,spec", [((12,), NetworkSpec("mlp", 2, 32)), ((1, 8, 8), NetworkSpec("cnn", 2, 16, residual=True)),
                                        ((2, 16), NetworkSpec("rnn", 2, 16, cell="lstm"))])
def test_gpu_training_learns_like_the_cpu_in_every_precision(precision, shape, spec):
    arrays = arrays_for(shape)
    training = TrainSpec(1e-2, 32, 6)
    cpu = train_and_evaluate(spec, training, DeviceData.from_arrays(arrays, Classification(3), "cpu"), seed=1)
    gpu = train_and_evaluate(spec, training, DeviceData.from_arrays(arrays, Classification(3), "cuda", precision), seed=1)
    set_precision("fp32")
    assert cpu.status == gpu.status == "ok"
    assert gpu.metrics["val_accuracy"] > 0.9 and abs(gpu.metrics["val_accuracy"] - cpu.metrics["val_accuracy"]) < 0.05
    assert gpu.val_pred.dtype == np.float32 and np.allclose(gpu.val_pred.sum(axis=1), 1, atol=1e-5)
    assert all(w.dtype == np.float32 for w in gpu.weights.values() if w.dtype.kind == "f")


@pytest.mark.timing
def test_gpu_latency_is_measured():
    """Wall-clock timing: the measured latency (the median of 5 timed forward passes) is positive and under
    10 ms a sample."""
    data = DeviceData.from_arrays(arrays_for((12,)), Classification(3), "cuda")
    from ensemble.train import Watch
    ev = train_and_evaluate(NetworkSpec("mlp", 1, 16), TrainSpec(1e-2, 32, 1), data, seed=0, watch=Watch(measure_latency=True))
    assert ev.status == "ok" and 0 < ev.metrics["latency_us"] < 1e4


@pytest.mark.parametrize("shape", list(FAMILIES))
def test_a_stored_ensemble_predicts_the_same_on_the_gpu_as_on_the_cpu(tmp_path, shape):
    set_precision("fp32")
    path, stored, arrays = stored_run(tmp_path, shape, FAMILIES[shape])
    on_cpu = load_ensemble(path, device="cpu").predict(arrays["test/x"])
    gpu = load_ensemble(path, device="cuda")
    assert gpu.device.type == "cuda"
    on_gpu = gpu.predict(arrays["test/x"])
    assert on_gpu.keys() == on_cpu.keys()
    np.testing.assert_array_equal(on_gpu["label"], on_cpu["label"])
    np.testing.assert_allclose(on_gpu["probabilities"], on_cpu["probabilities"], atol=1e-4)


def test_describe_device_names_the_gpu_by_uuid():
    d = describe_device(choose_device(0, "cuda"))
    assert d["device"] == "cuda:0" and d["uuid"].startswith("GPU-") and len(d["uuid"]) > 10 and d["name"]


def test_cuda_visible_devices_empty_means_the_cpu():
    code = ("from ensemble.device import choose_device; print(choose_device(0, 'auto'));\n"
            "try:\n    choose_device(0, 'cuda')\nexcept RuntimeError as e:\n    print('refused:', e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["cpu", "refused: the device 'cuda' was asked for, but no CUDA device is visible on this node"]


@pytest.mark.parametrize("workers_per_gpu, ok", [(0, True), (2, True), (1, False)])
def test_two_workers_on_the_one_gpu_are_refused_when_one_per_gpu_was_asked(tmp_path, workers_per_gpu, ok):
    data = write_blobs(tmp_path / "d.h5", sample_shape=(1, 6, 6), n=(90, 30, 30))
    proc = launch(3, [sys.executable, "-m", "evolve", "run", "--out", str(tmp_path / "run"), "--set", f"data.path={data}",
                      "--set", "search.evaluations=2", "--set", "train.device=cuda", "--set", f"train.workers_per_gpu={workers_per_gpu}",
                      *tiny_search(), os.path.join(ROOT, "examples", "digits.toml")], timeout=180, cwd=ROOT)
    if ok:
        assert proc.returncode == 0, proc.stderr
        assert "devices: 2 worker(s) on 1 GPU(s)" in proc.stderr and "up to 2 worker(s) per GPU" in proc.stderr
        with open(tmp_path / "run" / "devices.json") as f:
            workers = json.load(f)["workers"]
        assert [w["rank"] for w in workers] == [1, 2] and len({w["uuid"] for w in workers}) == 1
    else:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("evens: error:")]
        assert proc.returncode == 2 and len(errors) == 1, proc.stderr
        assert "ranks 1, 2 are all bound to GPU GPU-" in errors[0] and "train.workers_per_gpu is 1" in errors[0]
        assert not (tmp_path / "run").exists()  # refused before any training, nothing left behind


@pytest.fixture()
def gpu_trainer_setup():
    """A training process's set-up that trains on the GPU (train.isolation = "process"), as a worker rank
    hands it: the node's data by descriptor, the device by the rank's node-local index."""
    from test_isolation import trainer_setup

    setup, memory = trainer_setup(arrays_for((1, 8, 8)), "cuda")
    yield setup, memory.fd
    memory.close()


@pytest.mark.parametrize("memory_cap", [0.0, 2.0])
def test_a_training_process_on_the_gpu_survives_a_cuda_oom_and_a_kill(gpu_trainer_setup, memory_cap):
    """Isolation on the GPU: a training that asks the GPU for 400 GB is `crashed` with "memory:", one
    that kills its own process (holding a CUDA context) is `crashed` with its cause, and a fresh process
    trains the next on the GPU; with train.max_host_memory_gb the CUDA libraries fit under the cap."""
    from test_isolation import task

    from evolve.transport.isolation import TrainerProcess

    setup, fd = gpu_trainer_setup
    process = TrainerProcess({**setup, "max_host_memory_gb": memory_cap}, fd)
    try:
        assert process.start()["device"].startswith("cuda"), process.device
        good = process.evaluate(task(1, "none"))
        assert good.status == "ok", good.message
        oom = process.evaluate(task(2, "cuda_huge"))
        assert oom.status == "crashed" and oom.message.startswith("memory: "), oom.message
        assert process.evaluate(task(3, "none")).fitness == good.fitness
        killed = process.evaluate(task(4, "sigkill"))
        assert killed.status == "crashed" and "killed by SIGKILL" in killed.message, killed.message
        again = process.evaluate(task(5, "none"))
        assert again.status == "ok" and again.fitness == good.fitness
    finally:
        process.close()
