"""Benchmark: one worker's training throughput on a GPU, by precision, and by workers sharing one GPU.

Run on a machine with a CUDA GPU, from the repository root::

    python scripts/bench/bench_gpu.py            # about 4 minutes on an H100
    python scripts/bench/bench_gpu.py --quick    # under a minute; ends with one JSON line

(``--device cpu`` runs the same measurements, on tiny data, on the CPU: to try the script where there
is no GPU; its figures mean nothing.)

Three measurements, each run side by side in one launch:

1. **Precision.** evens' trainer (:func:`ensemble.train.train`, what every worker runs) on data
   resident on the GPU, for each of ``train.precision`` = ``fp32`` (IEEE float32), ``tf32`` (the
   matrix units' TF32) and ``bf16`` (bfloat16 autocast), against a bare PyTorch loop in fp32
   (``handwritten``: what the trainer itself costs on a GPU). Networks from the search space:
   a wide MLP and a CNN on synthetic 3x32x32 uint8 images (CIFAR-sized, generated here: nothing is
   downloaded), at three batch sizes (one with --quick). Repetitions are interleaved; each cell is a median of samples per
   second; ratios are against fp32. The validation accuracy after the timed epochs is printed beside
   each, so that a faster precision that learns worse shows.
2. **Workers per GPU.** The search's networks are small (the demo trains 8x8 digits), and one such
   training leaves most of an H100 idle, waiting on kernel launches from one Python thread. k
   processes, each a worker with its own copy of the data on the same GPU, train the same network at
   once (after a barrier); the aggregate samples per second over k = 1 is what running k worker
   ranks per GPU buys (ranks beyond the GPUs of a node share them round-robin: ensemble.device).
3. **GPU vs CPU.** The same small network on the CPU with all its cores, one process: what a GPU
   worker is worth against a CPU one for the networks the demo searches.

The JSON line holds ``bf16_vs_fp32`` and ``tf32_vs_fp32`` (geometric means over the networks at the
larger batch), ``evens_vs_handwritten`` (fp32), ``workers_per_gpu`` ({k: aggregate over k = 1}) and
``gpu_vs_cpu_small``.
"""
from __future__ import annotations

import math
import os
import platform
import queue
import random
import statistics
import sys
import time

import harness
import numpy as np
import torch
import torch.multiprocessing as mp
from bench_train import run_handwritten as bare_loop

from ensemble.models import build_network
from ensemble.problem import Classification
from ensemble.specs import NetworkSpec, TrainSpec
from ensemble.train import DeviceData, predict, set_precision, train

BIG = {
    "mlp": NetworkSpec("mlp", depth=3, width=1024, activation="relu"),
    "cnn": NetworkSpec("cnn", depth=3, width=64, activation="relu", norm="batch"),
}
SMALL = NetworkSpec("cnn", depth=2, width=16, activation="relu")  # a demo-sized network on 8x8 images
PRECISIONS = ("fp32", "tf32", "bf16")


def images(n: int, shape: tuple[int, ...], classes: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images: a pattern shared by all classes, a faint class pattern (signal to noise about 2.5
    summed over the pixels) and noise. Learnable in a few epochs, not at once."""
    rng = np.random.default_rng(seed)
    patterns = rng.normal(0, 1, size=shape) + 2.5 / math.sqrt(math.prod(shape)) * rng.normal(0, 1, size=(classes,) + shape)
    y = rng.integers(0, classes, size=n)
    x = np.empty((n,) + shape, dtype=np.uint8)
    for start in range(0, n, 4096):
        part = patterns[y[start : start + 4096]] + rng.normal(size=(len(y[start : start + 4096]),) + shape)
        x[start : start + 4096] = np.clip(128 + 40 * part, 0, 255).astype(np.uint8)
    return x, y


def arrays_for(n_train: int, shape: tuple[int, ...], seed: int = 0) -> dict[str, np.ndarray]:
    n_val = max(256, n_train // 10)
    x, y = images(n_train + 2 * n_val, shape, seed=seed)
    cut = (0, n_train, n_train + n_val, n_train + 2 * n_val)
    return {f"{s}/{k}": v[a:b] for s, a, b in zip(("train", "val", "test"), cut, cut[1:]) for k, v in (("x", x), ("y", y))}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fresh(spec: NetworkSpec, data: DeviceData, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_network(spec, data.sample_shape, data.problem.outputs).to(data.device)


def run_evens(model, data: DeviceData, spec: TrainSpec, seed: int) -> None:
    status, _ = train(model, data, spec, torch.Generator().manual_seed(seed))
    assert status == "ok", status


def run_handwritten(model, data: DeviceData, spec: TrainSpec, seed: int) -> None:
    """The bare loop: resident tensors, randperm, index, forward, loss, backward, fused Adam."""
    bare_loop(model, data, spec, seed, fused=True)


def accuracy(model, data: DeviceData) -> float:
    pred = predict(model, data.head, data.x["val"], autocast=data.autocast).cpu().numpy()
    return float((pred.argmax(1) == data.y["val"]).mean())


def precision_table(arrays, device, batches, epochs, reps) -> dict:
    """Samples/s of evens' trainer per network, batch and precision, and of the bare loop in fp32."""
    datas = {p: DeviceData.from_arrays(arrays, Classification(10), device, p) for p in PRECISIONS}
    n = arrays["train/x"].shape[0]
    cells = [(m, b, c) for m in BIG for b in batches for c in PRECISIONS + ("handwritten",)]
    times = {cell: [] for cell in cells}
    accs = {cell: [] for cell in cells}

    def once(cell, seed, timed_epochs):
        model_name, batch, contender = cell
        data = datas["fp32" if contender == "handwritten" else contender]
        set_precision(data.precision)
        model = fresh(BIG[model_name], data, seed)
        spec = TrainSpec(1e-3, batch, timed_epochs)
        sync(device)
        start = time.perf_counter()
        (run_handwritten if contender == "handwritten" else run_evens)(model, data, spec, seed)
        sync(device)
        elapsed = time.perf_counter() - start
        return elapsed, accuracy(model, data)

    for cell in cells:  # warm-up: kernel choice (cuDNN benchmark off), allocator, lazy inits
        once(cell, 0, 1)
    order = list(cells)
    shuffle = random.Random(0)
    for rep in range(reps):
        shuffle.shuffle(order)
        for cell in order:
            elapsed, acc = once(cell, rep, epochs)
            times[cell].append(elapsed)
            accs[cell].append(acc)
    set_precision("fp32")
    return {cell: (epochs * n / statistics.median(times[cell]), statistics.mean(accs[cell])) for cell in cells}


def _shared_worker(rank, k, device_name, n_train, epochs, barrier, results):
    torch.set_num_threads(1)
    device = torch.device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    data = DeviceData.from_arrays(arrays_for(n_train, (1, 8, 8), seed=rank), Classification(10), device)
    spec = TrainSpec(1e-3, 64, epochs)
    run_evens(fresh(SMALL, data, rank), data, TrainSpec(1e-3, 64, 1), rank)  # warm-up
    sync(device)
    barrier.wait()
    start = time.perf_counter()
    run_evens(fresh(SMALL, data, rank), data, spec, rank)
    sync(device)
    results.put((rank, time.perf_counter() - start, time.perf_counter()))


def shared_gpu(device_name: str, ks: list[int], n_train: int, epochs: int) -> dict[int, float]:
    """Aggregate samples/s of k workers training the small network at once on one device."""
    ctx = mp.get_context("spawn")
    rates = {}
    for k in ks:
        barrier, results = ctx.Barrier(k), ctx.Queue()
        procs = [ctx.Process(target=_shared_worker, args=(r, k, device_name, n_train, epochs, barrier, results)) for r in range(k)]
        for p in procs:
            p.start()
        out = []
        while len(out) < k:  # a worker that dies never answers: fail, never wait forever
            try:
                out.append(results.get(timeout=1))
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    for p in procs:
                        p.kill()
                    sys.exit(f"bench_gpu: a worker of {k} sharing the device failed (exit {dead[0].exitcode})")
        for p in procs:
            p.join()
        # from the barrier to the last worker's end: the k trainings overlapped, the slowest bounds the wall
        wall = max(seconds for _, seconds, _ in out)
        rates[k] = k * epochs * n_train / wall
    return rates


def cpu_small(n_train: int, epochs: int, threads: int, reps: int) -> float:
    torch.set_num_threads(threads)
    data = DeviceData.from_arrays(arrays_for(n_train, (1, 8, 8)), Classification(10), "cpu")
    run_evens(fresh(SMALL, data, 0), data, TrainSpec(1e-3, 64, 1), 0)
    times = []
    for rep in range(reps):
        model = fresh(SMALL, data, rep)
        start = time.perf_counter()
        run_evens(model, data, TrainSpec(1e-3, 64, epochs), rep)
        times.append(time.perf_counter() - start)
    return epochs * n_train / statistics.median(times)


def geomean(values) -> float:
    return math.exp(statistics.mean(math.log(v) for v in values))


def main() -> None:
    parser = harness.parser(__doc__, quick="smaller data, fewer epochs and repetitions: under a minute")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu, to try the script without a GPU")
    parser.add_argument("--workers", default="1,2,4,8", help="workers sharing the device, comma-separated")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_gpu: no CUDA device is visible (use --device cpu to try the script on the CPU)")
    quick = args.quick
    n_big = 8192 if quick else 32768
    epochs, reps = (2, 3) if quick else (3, 5)
    batches = [256] if quick else [128, 512, 2048]
    n_small, small_epochs = (1440, 5) if quick else (1440, 20)
    ks = [int(k) for k in args.workers.split(",")]
    if device.type == "cpu":
        n_big, epochs, reps, batches, small_epochs = 512, 1, 1, [256], 1
    torch.backends.cudnn.benchmark = False

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    print(harness.machine_line("bench_gpu", f"device={device} ({name})  torch={torch.__version__}  quick={quick}"), flush=True)

    table = precision_table(arrays_for(n_big, (3, 32, 32)), device, batches, epochs, reps)
    print(f"\n## 1. precision: {n_big} 3x32x32 uint8 images, {epochs} epochs per timed run, median of {reps}")
    print(f"{'network':<8} {'batch':>5} {'contender':<12} {'samples/s':>11} {'vs fp32':>8} {'val acc':>8}")
    for model_name in BIG:
        for batch in batches:
            base = table[(model_name, batch, "fp32")][0]
            for contender in PRECISIONS + ("handwritten",):
                rate, acc = table[(model_name, batch, contender)]
                print(f"{model_name:<8} {batch:>5} {contender:<12} {rate:>11.0f} {rate / base:>7.2f}x {acc:>8.3f}")
    top = batches[-1]
    result = {
        "bf16_vs_fp32": geomean([table[(m, top, "bf16")][0] / table[(m, top, "fp32")][0] for m in BIG]),
        "tf32_vs_fp32": geomean([table[(m, top, "tf32")][0] / table[(m, top, "fp32")][0] for m in BIG]),
        "evens_vs_handwritten": geomean([table[(m, b, "fp32")][0] / table[(m, b, "handwritten")][0] for m in BIG for b in batches]),
        "samples_per_s": {f"{m}/{b}/{c}": round(table[(m, b, c)][0]) for m in BIG for b in batches for c in PRECISIONS + ("handwritten",)},
    }

    print(f"\n## 2. workers sharing one {device.type} device: the demo-sized CNN on {n_small} 1x8x8 images, "
          f"batch 64, {small_epochs} epochs each", flush=True)
    shared = shared_gpu(str(device), ks, n_small, small_epochs)
    print(f"{'workers':>7} {'aggregate samples/s':>20} {'vs 1':>6}")
    for k in ks:
        print(f"{k:>7} {shared[k]:>20.0f} {shared[k] / shared[ks[0]]:>5.2f}x")
    result["workers_per_gpu"] = {str(k): shared[k] / shared[ks[0]] for k in ks}
    result["small_samples_per_s"] = {str(k): round(shared[k]) for k in ks}

    if device.type == "cuda":
        threads = os.cpu_count() or 1
        cpu = cpu_small(n_small, small_epochs, threads, 3)
        print(f"\n## 3. the same small network, one process on the CPU with {threads} threads: {cpu:.0f} samples/s; "
              f"one GPU worker is {shared[ks[0]] / cpu:.2f}x that")
        result["gpu_vs_cpu_small"] = shared[ks[0]] / cpu
    result.update(device=name, quick=quick)
    print(f"\n# bf16 vs fp32 {result['bf16_vs_fp32']:.2f}x, tf32 vs fp32 {result['tf32_vs_fp32']:.2f}x (batch {top}); "
          f"trainer vs bare loop {result['evens_vs_handwritten']:.3f}; workers per GPU "
          + ", ".join(f"{k}: {v:.2f}x" for k, v in result["workers_per_gpu"].items()))
    harness.emit(result)


if __name__ == "__main__":
    main()
