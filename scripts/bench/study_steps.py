"""Study: how many optimiser steps does a preset's network need on small data? Accuracy against the step budget.

Run from the repository root (the datasets come from scripts/bench/small_data.py, read from the aeon wheel)::

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/study_steps.py --jobs 2 --out docs/measurements/steps.jsonl
    .venv/bin/python scripts/bench/study_steps.py --tables-from docs/measurements/steps.jsonl

For each dataset, ``--networks`` random genomes of the preset the data fits (signal or tabular, as evens
makes it for the data; a series' networks of ``--family`` only, CNNs by default: an RNN's step costs 2 to 10
times a CNN's on these series) are each trained with every step budget of
``--steps`` (its epochs: the budget times its batch size over the rows it fits on, rounded up). Each training
is a 3-fold cross-validation over the training split only, with evens' own trainer on fold views
(ensemble.train.DeviceData.fold_view): what is measured is the mean held-out fold accuracy, which is what
the search would see. The test split is never looked at. Prints, per dataset and budget, the mean fold
accuracy over the networks (and its standard error), the share of networks within 0.01 of their own best
budget, and CPU seconds per training; the output ends with one JSON line.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import random
import sys
import tempfile
import time

import numpy as np

import harness
import small_data

from data_bcast import load_dataset
from ensemble.folds import assign_folds
from ensemble.problem import Classification
from evolve.search import presets
from evolve.search.ga import random_genome
from evolve.search.space_config import parse_space

FOLDS = 3


def space_for(name: str, path: str, family: str = ""):
    """The preset space evens makes for this data (with 3 folds; ``family`` alone, if given), and its training rows."""
    plan, arrays = load_dataset(path, val_fraction=0.0, test_fraction=0.15)
    facts = presets.DataFacts(tuple(plan.sample_shape), plan.kind, len(arrays["train/y"]), FOLDS)
    chosen, _ = presets.choose(facts)
    table = presets.table(chosen, facts) | ({"family": family} if family and chosen != "tabular" else {})
    space = parse_space(table).for_data(facts.sample_shape, facts.problem)
    return space, arrays, facts


def train_one(job: dict) -> dict:
    """One network at one step budget: its mean fold accuracy and CPU seconds (in a worker process)."""
    import torch

    from ensemble.specs import TrainSpec
    from ensemble.train import DeviceData, train_and_evaluate

    torch.set_num_threads(1)
    space, arrays, facts = space_for(job["dataset"], job["path"], job["family"])
    network, training = space.specs(space.key(job["genome"]))
    fit_rows = facts.fit_rows
    epochs = max(1, math.ceil(job["steps"] * training.batch_size / fit_rows))
    training = TrainSpec(**{**vars(training), "epochs": epochs})
    problem = Classification(int(arrays["train/y"].max()) + 1)
    data = DeviceData.from_arrays(arrays, problem)
    fold = assign_folds(arrays["train/y"], FOLDS, 0, stratified=True)
    began = time.process_time()
    accuracies = []
    for j in range(FOLDS):
        ev = train_and_evaluate(network, training, data.fold_view(fold, j), seed=job["seed"] + j)
        accuracies.append(ev.metrics.get("val_accuracy", 0.0) if ev.status == "ok" else 0.0)
    return {**{k: job[k] for k in ("dataset", "network", "steps", "seed")}, "batch": training.batch_size, "epochs": epochs,
            "accuracy": float(np.mean(accuracies)), "cpu_seconds": (time.process_time() - began) / FOLDS}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="GunPoint,ItalyPowerDemand,BasicMotions,wine")
    parser.add_argument("--steps", default="100,300,1000,3000")
    parser.add_argument("--networks", type=int, default=4)
    parser.add_argument("--family", default="cnn", help="the family of a series' networks (\"\": the preset's families)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", help="a JSON line per training, appended as each finishes")
    parser.add_argument("--tables-from", help="only print the tables of a JSON-lines file")
    args = parser.parse_args(argv)
    if args.tables_from:
        rows = harness.read_rows(args.tables_from)
        print_tables(rows)
        return 0
    folder = tempfile.mkdtemp(prefix="study-steps-")
    jobs = []
    for name in args.datasets.split(","):
        path = small_data.prepare(name, folder)
        space, _, _ = space_for(name, path, args.family)
        rng = random.Random(f"steps-{name}")
        for n in range(args.networks):
            genome = random_genome(rng, len(space))
            jobs += [{"dataset": name, "path": path, "network": n, "genome": genome, "steps": int(s), "seed": 1000 * n, "family": args.family}
                     for s in args.steps.split(",")]
    rows = []
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        for row in pool.map(train_one, jobs):
            rows.append(row)
            if args.out:
                harness.append_row(args.out, row)
            print(f"{row['dataset']:>18} net {row['network']} steps {row['steps']:>5} batch {row['batch']:>3} epochs {row['epochs']:>5}: "
                  f"fold accuracy {row['accuracy']:.3f} ({row['cpu_seconds']:.1f} s)", flush=True)
    print_tables(rows)
    return 0


def print_tables(rows: list[dict]) -> None:
    summary = {}
    for name in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == name]
        best = {}
        for r in mine:
            best[r["network"]] = max(best.get(r["network"], 0.0), r["accuracy"])
        print(f"\n{name}: mean fold accuracy over {len(best)} networks by step budget")
        for steps in sorted({r["steps"] for r in mine}):
            at = [r for r in mine if r["steps"] == steps]
            acc = np.array([r["accuracy"] for r in at])
            near = np.mean([r["accuracy"] >= best[r["network"]] - 0.01 for r in at])
            se = acc.std(ddof=1) / math.sqrt(len(acc)) if len(acc) > 1 else 0.0
            cpu = np.mean([r["cpu_seconds"] for r in at])
            print(f"  {steps:>6} steps: {acc.mean():.3f} +- {se:.3f}   within 0.01 of its best: {near:.0%}   {cpu:.1f} s CPU per training")
            summary.setdefault(name, {})[steps] = {"accuracy": float(acc.mean()), "se": float(se), "near_best": float(near), "cpu": float(cpu)}
    print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
