"""Study: is a chosen network's member better as its fold models averaged (bagging, the default) or as one model
refit on every training row (``ensemble.refit = true``)?

Run from the repository root, on finished cross-validated runs (bench_small.py's ``evens`` runs, say)::

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/study_refit.py RUN_DIR [RUN_DIR ...] --out rows.jsonl
    .venv/bin/python scripts/bench/study_refit.py --tables-from rows.jsonl

For each run, its ensemble as chosen (the same members, the same weights: the choice is made out of fold
either way) is scored on the test split twice: with each member's fold models averaged, as the run stored
them; and with each member replaced by one network of the same genome trained on every training row, as
``ensemble.refit`` trains it (evens' own worker trainer, the part ``(k, k)``, the seed the engine gives that
part). Only the member's form differs between the two, so the comparison is paired within each run, at the
cost of one training per member instead of a second search. The test split is used for nothing else.

Per run: test accuracy and log-loss both ways; per dataset (the run folder's name up to ``-evens``) and
over all: the mean paired difference ``refit - bagged`` with its standard error and the CPU seconds of the
refits; it ends with one JSON line.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from quality_stats import paired

import harness


def refit_row(run_dir: str) -> dict:
    """Bagged and refit test scores of the run's ensemble (see the module's docstring)."""
    import torch

    from data_bcast import load_dataset
    from ensemble.predict import load_ensemble
    from ensemble.problem import problem_from_dict
    from ensemble.train import DeviceData
    from evolve.engine.loop import task_seed
    from evolve.runfile import checkpoint
    from evolve.transport.protocol import Task
    from evolve.transport.worker import trainer_for

    torch.set_num_threads(1)
    path = os.path.join(run_dir, "checkpoint.h5")
    state, info = checkpoint.load(path, weights=False)
    config, space = info.config, info.space()
    k = config.data.fold_count
    if k < 2:
        raise SystemExit(f"study_refit: {run_dir} is not cross-validated (data.folds {config.data.folds})")
    if config.ensemble.refit:
        raise SystemExit(f"study_refit: {run_dir} already refits its members")
    problem = problem_from_dict(info.data["problem"])
    d = config.data
    _, arrays = load_dataset(d.path, d.val_fraction, d.test_fraction, d.split_seed)
    data = DeviceData.from_arrays(arrays, problem)
    ensemble = load_ensemble(run_dir, device="cpu")
    x_test, y_test = arrays["test/x"], arrays["test/y"]
    weights = np.asarray(ensemble.weights, dtype=np.float64)
    bagged = np.tensordot(weights / weights.sum(), np.stack(ensemble.member_predictions(x_test)), axes=1)
    evaluate, records = trainer_for(data, d.split_seed), state.by_id()
    began = time.process_time()
    refits = []
    for member in ensemble.members:
        genome = records[member.id].genome
        task = Task.from_key(member.id, space, space.key(genome), task_seed(config.search.seed, member.id, k + 1), fold=(k, k))
        ev = evaluate(task)
        if ev.status != "ok":
            raise SystemExit(f"study_refit: {run_dir}: the refit of #{member.id} ended {ev.status}: {ev.message}")
        refits.append(ev.test_pred)
    cpu = time.process_time() - began
    refit = np.tensordot(weights / weights.sum(), np.stack(refits), axes=1)
    scores = {side: problem.scores(pred, y_test) for side, pred in (("bagged", bagged), ("refit", refit))}
    name = os.path.basename(os.path.normpath(run_dir))
    return {"run": name, "dataset": name.split("-evens")[0], "members": len(ensemble.members), "folds": k,
            "bagged_accuracy": scores["bagged"]["accuracy"], "refit_accuracy": scores["refit"]["accuracy"],
            "bagged_loss": scores["bagged"]["loss"], "refit_loss": scores["refit"]["loss"], "refit_cpu": cpu}


def report(rows: list[dict]) -> int:
    out = {}
    print(f"\n{'data':>18} {'runs':>4} {'bagged':>7} {'refit':>7} {'refit - bagged (acc)':>22} {'(log-loss)':>20} {'refit CPU':>9}")
    for name in [*dict.fromkeys(r["dataset"] for r in rows), "all"]:
        mine = [r for r in rows if name in ("all", r["dataset"])]
        acc = paired([r["refit_accuracy"] for r in mine], [r["bagged_accuracy"] for r in mine])
        loss = paired([r["refit_loss"] for r in mine], [r["bagged_loss"] for r in mine], higher_better=False)
        means = [float(np.mean([r[f"{s}_accuracy"] for r in mine])) for s in ("bagged", "refit")]
        cpu = float(np.mean([r["refit_cpu"] for r in mine]))
        print(f"{name:>18} {len(mine):>4} {means[0]:7.4f} {means[1]:7.4f} {acc.mean:+12.4f} +- {acc.se:.4f} "
              f"{loss.mean:+10.4f} +- {loss.se:.4f} {cpu:9.0f}")
        out[name] = {"runs": len(mine), "bagged": means[0], "refit": means[1], "accuracy_diff": [acc.mean, acc.se],
                     "loss_diff": [loss.mean, loss.se], "refit_cpu": cpu}
    harness.emit(out)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="*", help="finished cross-validated run directories")
    p.add_argument("--out", help="a JSON line per run, appended; runs already there are skipped")
    p.add_argument("--tables-from", help="only print the tables of a rows file")
    args = p.parse_args(argv)
    rows = []
    source = args.tables_from or args.out
    if source and os.path.exists(source):
        rows = harness.read_rows(source)
    if not args.tables_from:
        done = {r["run"] for r in rows}
        print(harness.machine_line("study_refit", f"runs={len(args.runs)}"), flush=True)
        for run_dir in args.runs:
            if os.path.basename(os.path.normpath(run_dir)) in done:
                continue
            row = refit_row(run_dir)
            rows.append(row)
            print(f"{row['run']:>28}: bagged {row['bagged_accuracy']:.4f}  refit {row['refit_accuracy']:.4f}  "
                  f"({row['members']} members, {row['refit_cpu']:.0f} s CPU)", flush=True)
            if args.out:
                harness.append_row(args.out, row)
    return report(rows) if rows else 0


if __name__ == "__main__":
    sys.exit(main())
