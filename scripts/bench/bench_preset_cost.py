"""Benchmark: seconds of CPU per network of the presets, before and after a change to them, for a few sample shapes.

Run from the repository root::

    .venv/bin/python scripts/bench/bench_preset_cost.py --before HEAD --threads 1,2
    .venv/bin/python scripts/bench/bench_preset_cost.py --quick          # 2 networks a case, 1 thread

For each case, the data is written to a scratch folder and the preset is made as ``evens run`` makes it (the
default config: ``data.folds = "auto"``, the preset the data fits). ``--networks`` genomes are drawn at random
(the same draws for both versions of the presets), and each network is timed as evens trains it: one training
per fold (5 on fewer than 1,000 training rows without their own val split), each of the genome's epochs. What is
measured is the first fold's training (``ensemble.train.train_and_evaluate``) of 1 epoch and of 1 + ``--epochs``
epochs (doubled until they add ``--span`` CPU seconds): their difference gives the seconds per epoch, the first the
fixed part (building the network, its first steps, the final predictions); seconds per network = (fixed part + epochs x seconds per epoch) x trainings (the median stopping rule of a
search stops some networks sooner: these are the figures of networks trained to the end), in wall-clock seconds and
in CPU seconds of this process (all its threads: on a shared machine the steadier figure). Printed per network:
its genes, its estimated forward multiply-adds per sample (``evolve.search.presets.sample_macs``) and the
estimated multiply-adds of the whole network (x 3 for the backward pass); per case, the mean and the largest.

``--before REV`` takes the presets of a git revision (its ``evolve/search/presets.py``, read with ``git show``)
beside the work tree's (a case whose table is the same in both is timed once); the networks are built and trained
by the work tree's code either way.

The cases (``--cases``):

* ``images256``: 36 training rows (and 12 test rows) of 3x256x256 images: the shapes of ``evens make-shapes``
  drawn at 32x32 and enlarged 8 times, in 3 channels with noise (issue 35's user-met case);
* ``shapes``: ``evens make-shapes`` (1x16x16, 1,000 / 500 / 1,500 rows; examples/shapes.toml);
* ``signals``: ``evens make-signals`` (2x128, 1,000 / 500 / 1,500 rows; examples/signals.toml);
* ``digits``: scikit-learn's 8x8 digits as ``evens`` writes them for the demo (720 / 359 / 718 rows).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
import types

import numpy as np

import harness

from data_bcast import load_dataset
from data_bcast.h5file import write_dataset
from data_bcast.synthetic import make_shapes, write_shapes, write_signals
from ensemble.folds import assign_folds
from ensemble.problem import Classification
from evolve.app.run.prepare import resolve_folds
from evolve.config.schema import config_from_dict
from evolve.search import presets
from evolve.search.ga import random_genome
from evolve.search.space_config import parse_space


def write_images256(path: str) -> None:
    """36 training and 12 test images of 3x256x256: make_shapes at 32x32, each pixel enlarged to 8x8, three channels."""
    splits = {}
    for split, n, stream in (("train", 36, 0), ("test", 12, 2)):
        rng = np.random.default_rng([0, stream])
        x, y = make_shapes(n, rng, side=32)
        big = np.kron(x, np.ones((1, 1, 8, 8), dtype=np.float32))
        tint = rng.uniform(0.5, 1.0, size=(n, 3, 1, 1)).astype(np.float32)
        splits[split] = ((big * tint + rng.normal(0, 0.1, size=(n, 3, 256, 256))).astype(np.float32), y)
    write_dataset(path, splits)


def write_digits(path: str) -> None:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    order = np.random.default_rng(0).permutation(len(y))
    x, y = x[order], y[order].astype(np.int64)
    write_dataset(path, {"train": (x[:720], y[:720]), "val": (x[720:1079], y[720:1079]), "test": (x[1079:], y[1079:])})


CASES = {"images256": write_images256, "shapes": lambda p: write_shapes(p), "signals": lambda p: write_signals(p), "digits": write_digits}


def presets_at(rev: str) -> types.ModuleType:
    """evolve/search/presets.py as it is at git revision ``rev``, as a module of its own."""
    source = subprocess.run(["git", "show", f"{rev}:evolve/search/presets.py"], cwd=harness.ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType(presets.__name__)  # named as the work tree's module, which dataclasses look up by name
    exec(compile(source, f"{rev}:evolve/search/presets.py", "exec"), module.__dict__)
    return module


def prepared(case: str, folder: str):
    """The case's data as evens reads it (folds resolved as ``evens run`` resolves them) and its preset's facts."""
    path = os.path.join(folder, f"{case}.h5")
    CASES[case](path)
    config = resolve_folds(config_from_dict({"data": {"path": path}}))
    plan, arrays = load_dataset(path, config.data.val_fraction, config.data.test_fraction, config.data.split_seed)
    facts = presets.DataFacts(tuple(plan.sample_shape), "classification", len(arrays["train/y"]), config.data.fold_count)
    return arrays, facts


def space_of(module, facts):
    name, _ = module.choose(facts)
    table = module.table(name, facts)
    return table, parse_space(table).for_data(facts.sample_shape, facts.problem)


def time_network(space, key, arrays, facts, epochs: int, span: float) -> dict:
    """One network: its first training timed at 1 epoch and at 1 + ``epochs`` (doubled until they add ``span`` CPU
    seconds), scaled to its epochs and trainings."""
    from ensemble.specs import TrainSpec
    from ensemble.train import DeviceData, train_and_evaluate

    network, training = space.specs(key)
    problem = Classification(int(arrays["train/y"].max()) + 1)
    data = DeviceData.from_arrays(arrays, problem)
    trainings = facts.folds if facts.folds > 1 else 1
    if facts.folds > 1:
        data = data.fold_view(assign_folds(arrays["train/y"], facts.folds, 0, stratified=True), 0)
    def timed(n: int) -> tuple[float, float, str]:
        began, cpu = time.perf_counter(), time.process_time()
        ev = train_and_evaluate(network, TrainSpec(**{**vars(training), "epochs": n}), data, seed=0)
        return time.perf_counter() - began, time.process_time() - cpu, ev.status

    one, cpu_one, status = timed(1)  # building the network, one epoch, the predictions
    measured = min(epochs, training.epochs - 1)
    while measured:  # more epochs until they take ``span`` CPU seconds beyond the first (or the genome has no more)
        more, cpu_more, status = timed(1 + measured)
        if cpu_more - cpu_one >= span or measured == training.epochs - 1:
            break
        measured = min(2 * measured, training.epochs - 1)
    per_epoch, cpu_per_epoch = ((more - one) / measured, (cpu_more - cpu_one) / measured) if measured else (one, cpu_one)
    genes = dict(zip(space.names, key))
    macs = presets.sample_macs({**genes, "downsample": genes.get("downsample", 1)}, facts.sample_shape)
    return {"status": status, "epochs": training.epochs, "batch": training.batch_size, "trainings": trainings,
            "seconds_per_epoch": per_epoch, "seconds": (one + per_epoch * (training.epochs - 1)) * trainings,
            "cpu_seconds": (cpu_one + cpu_per_epoch * (training.epochs - 1)) * trainings,
            "sample_macs": macs, "network_macs": 3 * macs * facts.fit_rows * training.epochs * trainings,
            "genes": {g: genes[g] for g in ("family", "depth", "width", "kernel_size", "downsample") if g in genes}}


def warm_up() -> None:
    """A first small training in this process, so that torch's own first-use costs do not land on the first network."""
    from ensemble.specs import NetworkSpec, TrainSpec
    from ensemble.train import DeviceData, train_and_evaluate

    rng = np.random.default_rng(0)
    arrays = {f"{s}/x": rng.normal(size=(16, 1, 8, 8)).astype(np.float32) for s in ("train", "val", "test")}
    arrays |= {f"{s}/y": np.arange(16) % 2 for s in ("train", "val", "test")}
    train_and_evaluate(NetworkSpec("cnn", 2, 8), TrainSpec(1e-3, 4, 2), DeviceData.from_arrays(arrays, Classification(2)), seed=0)


def main(argv=None) -> int:
    parser = harness.parser(__doc__, quick="2 networks a case, 1 thread, fewer epochs measured: a few minutes")
    parser.add_argument("--cases", default="images256,shapes,signals")
    parser.add_argument("--before", default="", help="a git revision whose presets to time beside the work tree's (e.g. HEAD)")
    parser.add_argument("--networks", type=int, default=4)
    parser.add_argument("--threads", default="1,2", help="torch threads, each a pass over every network")
    parser.add_argument("--epochs", type=int, default=2, help="epochs measured beyond the first, at the least (the rest is scaled from them)")
    parser.add_argument("--span", type=float, default=5.0, help="CPU seconds those epochs take at the least (doubled until they do)")
    parser.add_argument("--row-macs", type=float, default=0.0, help="the work tree's presets with another presets.ROW_MACS (a what-if)")
    parser.add_argument("--out", help="a JSON line per network, appended as each is timed")
    args = parser.parse_args(argv)
    if args.quick:
        args.networks, args.threads, args.epochs, args.span = 2, "1", 1, 1.0
    import torch

    if args.row_macs:
        presets.ROW_MACS = args.row_macs

    versions = ([(args.before, presets_at(args.before))] if args.before else []) + [("now", presets)]
    print(harness.machine_line("bench_preset_cost", f"cases={args.cases} networks={args.networks} threads={args.threads} "
                                                    f"epochs={args.epochs} before={args.before or '-'} row_macs={presets.ROW_MACS:g}"), flush=True)
    folder = tempfile.mkdtemp(prefix="preset-cost-")
    warm_up()
    summary = {}
    for case in args.cases.split(","):
        arrays, facts = prepared(case, folder)
        print(f"\n{case}: samples {facts.sample_shape}, {facts.n_train} training rows, folds {facts.folds} "
              f"({facts.fit_rows} rows a training)", flush=True)
        tables = []
        for label, module in versions:
            table, space = space_of(module, facts)
            if table in tables:  # the same networks as the version before: timed once
                print(f"  presets {label}: the same table as {versions[0][0]}", flush=True)
                continue
            tables.append(table)
            shown = {g: table[g] for g in ("width", "kernel_size", "downsample", "batch_size", "epochs") if g in table}
            print(f"  presets {label}: {json.dumps(shown)}; largest network {presets.row_macs(table, facts.sample_shape) / 1e9:.1f} G "
                  f"multiply-adds per training row", flush=True)
            rng = random.Random(f"preset-cost-{case}")
            keys = [space.key(random_genome(rng, len(space))) for _ in range(args.networks)]
            for threads in (int(t) for t in args.threads.split(",")):
                torch.set_num_threads(threads)
                rows = []
                for n, key in enumerate(keys):
                    row = {"case": case, "presets": label, "threads": threads, "network": n, **time_network(space, key, arrays, facts, args.epochs, args.span)}
                    rows.append(row)
                    if args.out:
                        harness.append_row(args.out, row)
                    print(f"    {threads} thread(s) net {n} {json.dumps(row['genes'])} batch {row['batch']} epochs {row['epochs']} x "
                          f"{row['trainings']}: {row['sample_macs'] / 1e6:.1f} M MAC/sample, {row['network_macs'] / 1e12:.2f} T MAC/network; "
                          f"{row['seconds_per_epoch']:.2f} s/epoch -> {row['seconds']:.0f} s/network ({row['cpu_seconds']:.0f} s CPU)", flush=True)
                seconds, cpu = [r["seconds"] for r in rows], [r["cpu_seconds"] for r in rows]
                print(f"    {threads} thread(s): mean {np.mean(seconds):.0f} s/network ({np.mean(cpu):.0f} s CPU), "
                      f"largest {max(seconds):.0f} s ({max(cpu):.0f} s CPU)", flush=True)
                summary[f"{case}/{label}/{threads}t"] = {"mean_s": round(float(np.mean(seconds)), 1), "max_s": round(max(seconds), 1),
                                                         "mean_cpu_s": round(float(np.mean(cpu)), 1), "max_cpu_s": round(max(cpu), 1)}
    harness.emit(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
