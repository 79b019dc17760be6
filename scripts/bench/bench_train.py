"""Benchmark: training throughput of evens' trainer against two plain PyTorch loops, side by side.

Run from the repository root (after ./scripts/setup.sh)::

    .venv/bin/python scripts/bench/bench_train.py            # about 2 minutes on 2 cores
    .venv/bin/python scripts/bench/bench_train.py --quick    # under a minute; ends with one JSON line

Contenders, on the same model (same initial weights), the same resident tensors, the same optimizer
(Adam), batch size and number of epochs:

* ``evens``: :func:`ensemble.train.train`, the loop every worker runs;
* ``handwritten``: the minimal loop (randperm, index, forward, loss, zero_grad, backward, step)
  with the default ``torch.optim.Adam``;
* ``handwritten_fused``: the same minimal loop with ``Adam(fused=True)``, as evens makes it: the
  difference between this and ``evens`` is all the trainer itself costs;
* ``dataloader``: ``DataLoader(TensorDataset(x, y), shuffle=True)`` and the default Adam, the
  textbook loop;
* ``evens_nchw``: evens' trainer on the same network in the default (NCHW) memory layout, without
  the channels-last layer: what that layer is worth (for the MLP, which has no convolutions, it is
  the same network, a control that should read 1.0).

The models are built by :func:`ensemble.models.build_network`, so every contender runs the same
network, channels-last layout of the CNN included.

Models: an MLP and a small CNN on the digits demo data (720 training images of 1x8x8; written to a
temporary file if data/digits.h5 is absent). Timed: the training epochs only (no scoring), with
torch pinned to ``--threads`` threads. Repetitions are interleaved in a shuffled order so that
background load on a shared machine hits every contender alike; each contender's median is
reported, and ratios of samples per second: ``vs_handwritten`` (target >= 0.95: the trainer adds
nothing to a bare loop) and ``vs_dataloader`` (target >= 1.5: resident tensors beat per-sample
collation), as geometric means over the models.
"""
from __future__ import annotations

import math
import os
import random
import statistics
import tempfile
import time

import harness
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from data_bcast import load_dataset
from data_bcast.convert import write_digits
from ensemble.models import ChannelsLast, build_network
from ensemble.problem import Classification
from ensemble.specs import NetworkSpec, TrainSpec
from ensemble.train import DeviceData, as_float, train

MODELS = {
    "mlp": NetworkSpec("mlp", depth=2, width=64, activation="relu"),
    "cnn": NetworkSpec("cnn", depth=2, width=16, activation="relu"),
}


def digits_arrays():
    path = os.path.join(harness.ROOT, "data", "digits.h5")
    if not os.path.exists(path):
        path = os.path.join(tempfile.mkdtemp(), "digits.h5")
        write_digits(path)
    plan, arrays = load_dataset(path)
    return plan, arrays


def fresh_model(spec: NetworkSpec, data: DeviceData, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_network(spec, data.sample_shape, data.problem.outputs).to(data.device)


def run_evens(model, data: DeviceData, spec: TrainSpec, seed: int) -> None:
    status, _ = train(model, data, spec, torch.Generator().manual_seed(seed))
    assert status == "ok"


def run_handwritten(model, data: DeviceData, spec: TrainSpec, seed: int, fused: bool = False) -> None:
    x, y = data.x["train"], data.fit_target
    optimizer = torch.optim.Adam(model.parameters(), lr=spec.learning_rate, fused=fused)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(spec.epochs):
        order = torch.randperm(x.shape[0], generator=generator).to(data.device)
        for start in range(0, x.shape[0], spec.batch_size):
            index = order[start : start + spec.batch_size]
            loss = F.cross_entropy(model(as_float(x[index])), y[index])  # uint8 images scaled as evens does
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


def run_dataloader(model, data: DeviceData, spec: TrainSpec, seed: int) -> None:
    loader = DataLoader(TensorDataset(data.x["train"], data.fit_target), batch_size=spec.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    optimizer = torch.optim.Adam(model.parameters(), lr=spec.learning_rate)
    model.train()
    for _ in range(spec.epochs):
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


def run_handwritten_fused(model, data: DeviceData, spec: TrainSpec, seed: int) -> None:
    run_handwritten(model, data, spec, seed, fused=True)


def run_evens_nchw(model, data: DeviceData, spec: TrainSpec, seed: int) -> None:
    plain = torch.nn.Sequential(*[m for m in model if not isinstance(m, ChannelsLast)])
    run_evens(plain.to(memory_format=torch.contiguous_format), data, spec, seed)


CONTENDERS = {
    "evens": run_evens,
    "handwritten": run_handwritten,
    "handwritten_fused": run_handwritten_fused,
    "dataloader": run_dataloader,
    "evens_nchw": run_evens_nchw,
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = harness.parser(__doc__, quick="fewer epochs and repetitions: under a minute")
    parser.add_argument("--epochs", type=int, default=0, help="epochs per timed run (default 40, quick 20)")
    parser.add_argument("--reps", type=int, default=0, help="timed runs per contender and model (default 7, quick 5)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one worker's share of a small node)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args()
    epochs = args.epochs or (20 if args.quick else 40)
    reps = args.reps or (5 if args.quick else 7)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    plan, arrays = digits_arrays()
    data = DeviceData.from_arrays(arrays, Classification(plan.num_classes), device)
    n = data.x["train"].shape[0]
    spec = TrainSpec(learning_rate=1e-3, batch_size=args.batch_size, epochs=epochs, optimizer="adam")

    times: dict[tuple[str, str], list[float]] = {(m, c): [] for m in MODELS for c in CONTENDERS}
    order = [(m, c) for m in MODELS for c in CONTENDERS]
    shuffle = random.Random(0)
    for model_name, contender in order:  # one untimed warm-up each: allocator, kernels, lazy inits
        CONTENDERS[contender](fresh_model(MODELS[model_name], data, 0), data, TrainSpec(1e-3, args.batch_size, 1), 0)
    for rep in range(reps):
        shuffle.shuffle(order)
        for model_name, contender in order:
            model = fresh_model(MODELS[model_name], data, rep)
            sync(device)
            start = time.perf_counter()
            CONTENDERS[contender](model, data, spec, rep)
            sync(device)
            times[(model_name, contender)].append(time.perf_counter() - start)

    print(harness.machine_line("bench_train", f"torch={torch.__version__}  device={device}  threads={args.threads}  "
                               f"train={n} samples  batch={args.batch_size}  epochs={epochs}  reps={reps}"))
    print(f"{'model':<5} {'contender':<18} {'median s':>9} {'samples/s':>11} {'evens vs it':>12}")
    rates: dict[tuple[str, str], float] = {}
    for model_name in MODELS:
        for contender in CONTENDERS:
            rates[(model_name, contender)] = epochs * n / statistics.median(times[(model_name, contender)])
        for contender in CONTENDERS:
            median = statistics.median(times[(model_name, contender)])
            rate = rates[(model_name, contender)]
            print(f"{model_name:<5} {contender:<18} {median:>9.3f} {rate:>11.0f} {rates[(model_name, 'evens')] / rate:>11.2f}x")

    def geomean(values):
        return math.exp(statistics.mean(math.log(v) for v in values))

    result = {
        "vs_handwritten": geomean([rates[(m, "evens")] / rates[(m, "handwritten")] for m in MODELS]),
        "vs_dataloader": geomean([rates[(m, "evens")] / rates[(m, "dataloader")] for m in MODELS]),
        "vs_handwritten_fused": geomean([rates[(m, "evens")] / rates[(m, "handwritten_fused")] for m in MODELS]),
        "cnn_channels_last_vs_nchw": rates[("cnn", "evens")] / rates[("cnn", "evens_nchw")],
        "per_model": {m: {"samples_per_s": {c: round(rates[(m, c)]) for c in CONTENDERS},
                          "vs_handwritten": rates[(m, "evens")] / rates[(m, "handwritten")],
                          "vs_dataloader": rates[(m, "evens")] / rates[(m, "dataloader")],
                          "vs_handwritten_fused": rates[(m, "evens")] / rates[(m, "handwritten_fused")],
                          "vs_nchw": rates[(m, "evens")] / rates[(m, "evens_nchw")]} for m in MODELS},
        "device": str(device), "threads": args.threads, "epochs": epochs, "reps": reps,
    }
    print(f"# evens vs handwritten {result['vs_handwritten']:.3f} (target >= 0.95); vs DataLoader {result['vs_dataloader']:.2f} "
          f"(target >= 1.5); vs the same loop with a fused Adam {result['vs_handwritten_fused']:.3f}; "
          f"CNN channels-last vs NCHW {result['cnn_channels_last_vs_nchw']:.2f}")
    harness.emit(result)


if __name__ == "__main__":
    main()
