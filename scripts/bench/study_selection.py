"""Study: how should the ensemble be chosen from a hall of fame? Variants side by side on stored runs.

Run from the repository root, on run directories kept by bench_ensemble.py::

    .venv/bin/python scripts/bench/bench_ensemble.py --seeds 20 --evaluations 16 --keep /tmp/runs
    .venv/bin/python scripts/bench/study_selection.py /tmp/runs/seed*

Nothing is trained: every variant chooses from the same stored hall of fame on the validation split
and is scored on the test split. The product's method is ``greedy`` (ensemble/select.py); the others
are candidates that were considered and measured here, implemented in this script only:

* ``greedy``: Caruana et al. (2004), forward selection with replacement from the best member,
  accuracy first and log-loss on ties, best prefix of 5 picks (what evens does);
* ``greedy_nll``: the same, on log-loss alone;
* ``greedy_pruned``: the same, over the better half of the hall only (Caruana et al. 2006);
* ``bagged_from_best``: 20 bags, each the best member plus a random half of the others, greedy in
  each, picks pooled;
* ``bagged``: 20 bags of a random half of the hall (Caruana et al. 2006), picks pooled;
* ``top_k``: the mean of the best 5; ``best``: the best single network;
* ``product:...``: the product's own :func:`ensemble.select.select_ensemble` with the run's
  ``[ensemble]`` settings (``product:run``), and with one or two of them changed: log-loss as the
  criterion, at least 3 or 5 distinct members, more picks, no bags (the variants in :data:`PRODUCT`).

A run with ``data.folds`` chooses on its out-of-fold predictions over the training split, as the
search does (the hall of fame's ``val_pred``), so the same script studies small-data selection.

Prints, per variant: mean test accuracy, how often it is at least the best single network's
(and within 0.005 of it), the worst difference, and one JSON line.

``--members`` prints instead each run's hall of fame, one member a line: its score on the rows the
ensemble is chosen on, its design, its test accuracy and the test rows it gets wrong, then how many
members get each of those rows wrong (is a miss the ensemble's choice, or every member's?).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics

import numpy as np

from ensemble.problem import problem_from_dict
from ensemble.select import select_ensemble
from evolve.runfile import checkpoint

SIZE, BAGS = 5, 20


def greedy(val, y, problem, key, size=SIZE):
    """Indices picked by forward selection with replacement from index 0; the best-scoring prefix."""
    order, running = [0], val[0].copy()
    keys = [key(problem.scores(running, y))]
    for p in range(2, size + 1):
        best, best_key = None, None
        for i, v in enumerate(val):
            k = key(problem.scores((running + v) / p, y))
            if best_key is None or k > best_key:
                best, best_key = i, k
        order.append(best)
        running += val[best]
        keys.append(best_key)
    return order[: 1 + max(range(len(keys)), key=lambda p: (keys[p], -p))]


def bagged(val, y, problem, key, keep_best, seed=0):
    rng, picks = random.Random(seed), []
    pool = list(range(len(val)))
    for _ in range(BAGS):
        if keep_best:
            bag = [0] + sorted(rng.sample(pool[1:], len(pool[1:]) // 2))
        else:
            bag = sorted(rng.sample(pool, max(1, len(pool) // 2)))
        picks += [bag[i] for i in greedy([val[i] for i in bag], y, problem, key)]
    return picks


def acc_key(s):
    return (s["accuracy"], -s["loss"])


def nll_key(s):
    return (-s["loss"],)


VARIANTS = {
    "best": lambda val, y, pr: [0],
    "greedy": lambda val, y, pr: greedy(val, y, pr, acc_key),
    "greedy_nll": lambda val, y, pr: greedy(val, y, pr, nll_key),
    "greedy_pruned": lambda val, y, pr: greedy(val[: max(1, (len(val) + 1) // 2)], y, pr, acc_key),
    "bagged_from_best": lambda val, y, pr: bagged(val, y, pr, acc_key, keep_best=True),
    "bagged": lambda val, y, pr: bagged(val, y, pr, acc_key, keep_best=False),
    "top_k": lambda val, y, pr: list(range(min(SIZE, len(val)))),
}


PRODUCT = {  # changes to the run's own [ensemble] settings
    "run": {},
    "loss": {"criterion": "loss"},
    "min3": {"min_members": 3},
    "min5": {"min_members": 5},
    "loss_min5": {"criterion": "loss", "min_members": 5},
    "size10": {"size": 10},
    "loss_size10": {"criterion": "loss", "size": 10},
    "no_bags": {"bags": 0},
    "top10": {"method": "top_k", "size": 10},
    "top32": {"method": "top_k", "size": 32},
    "loss_size30": {"criterion": "loss", "size": 30},
    "loss_min10": {"criterion": "loss", "min_members": 10, "size": 20},
}


def product_accuracy(state, info, problem, **changes) -> float:
    """Test accuracy of the ensemble select_ensemble chooses with the run's settings under ``changes``."""
    ens = {**info.config.to_dict()["ensemble"], **changes}
    criterion = ens["criterion"] if ens["criterion"] != "auto" else "metric" if info.config.search.metric != "auto" else "accuracy"
    chosen = select_ensemble(list(state.hall_of_fame), problem, info.val_y, info.test_y, ens["method"], ens["size"],
                             criterion=criterion, bags=ens["bags"], seed=info.config.search.seed, min_members=ens["min_members"])
    return chosen.curve_test[chosen.picks - 1]


def print_members(run: str, state, info) -> None:
    """The hall of fame of ``run``, member by member (``--members``)."""
    wrong_by = np.zeros(len(info.test_y), int)
    print(f"{run}: {len(state.hall_of_fame)} members (chosen-on accuracy and log-loss, design, test accuracy, test rows wrong)")
    for m in state.hall_of_fame:
        chosen = float(np.mean(m.val_pred.argmax(1) == info.val_y))
        wrong = np.flatnonzero(m.test_pred.argmax(1) != info.test_y)
        wrong_by[wrong] += 1
        net, tr = m.network, m.training
        design = (f"{net.get('family')} depth {net.get('depth')} width {net.get('width')} "
                  f"epochs {tr.get('epochs')} batch {tr.get('batch_size')}")
        print(f"  #{m.id:<4d} {chosen:.3f} {m.loss:.4f}  {design:<40} test {1 - len(wrong) / len(wrong_by):.4f}  wrong {wrong.tolist()}")
    print("  members wrong on each missed test row:", {int(i): int(wrong_by[i]) for i in np.flatnonzero(wrong_by)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories")
    parser.add_argument("--members", action="store_true", help="print each run's hall of fame, member by member, instead")
    args = parser.parse_args()
    if args.members:
        for run in sorted(args.runs):
            print_members(run, *checkpoint.load(os.path.join(run, "checkpoint.h5"), weights=False))
        return
    results = {name: [] for name in [*VARIANTS, *(f"product:{p}" for p in PRODUCT)]}
    for run in sorted(args.runs):
        state, info = checkpoint.load(os.path.join(run, "checkpoint.h5"), weights=False)
        problem = problem_from_dict(info.data["problem"])
        if problem.kind != "classification":
            raise SystemExit(f"{run}: this study compares accuracy; it takes classification runs")
        val = [m.val_pred.astype(np.float64) for m in state.hall_of_fame]
        test = [m.test_pred.astype(np.float64) for m in state.hall_of_fame]
        for name, choose in VARIANTS.items():
            picks = choose(val, info.val_y, problem)
            mean = sum(test[i] for i in picks) / len(picks)
            results[name].append(problem.scores(mean, info.test_y)["accuracy"])
        for name, changes in PRODUCT.items():
            results[f"product:{name}"].append(product_accuracy(state, info, problem, **changes))
    best = results["best"]
    summary = {"runs": len(best)}
    print(f"# study_selection: {len(best)} runs; test accuracy of each way to choose, against the best single network")
    print(f"{'variant':>17} {'mean':>7} {'>= best':>8} {'>= best-0.005':>14} {'worst diff':>11} {'mean diff':>10} {'- product:run (SE)':>19}")
    for name, acc in results.items():
        diff = [a - b for a, b in zip(acc, best)]
        paired = [a - b for a, b in zip(acc, results["product:run"])]
        se = statistics.stdev(paired) / len(paired) ** 0.5 if len(paired) > 1 else float("nan")
        row = {"mean": statistics.mean(acc), "at_least_best": sum(d >= 0 for d in diff),
               "within_0.005": sum(d >= -0.005 for d in diff), "worst": min(diff), "mean_diff": statistics.mean(diff),
               "vs_product_run": statistics.mean(paired), "vs_product_run_se": se}
        summary[name] = row
        print(f"{name:>17.17} {row['mean']:>7.4f} {row['at_least_best']:>5}/{len(best)} {row['within_0.005']:>11}/{len(best)} "
              f"{row['worst']:>+11.4f} {row['mean_diff']:>+10.4f} {row['vs_product_run']:>+10.4f} ({se:.4f})")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
