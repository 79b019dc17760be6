"""Study: how calibrated is the ensemble that each way of choosing it gives? Side by side on stored runs.

Run from the repository root, on run directories kept by bench_ensemble.py (classification)::

    .venv/bin/python scripts/bench/bench_ensemble.py --seeds 16 --ranks 4 --evaluations 40 --keep /tmp/runs
    .venv/bin/python scripts/bench/study_calibration.py /tmp/runs/seed*
    .venv/bin/python scripts/bench/study_calibration.py --quick /tmp/runs/seed*   # the first 3 runs

Nothing is trained: every variant is the product's own :func:`ensemble.select.select_ensemble`
with one setting changed, choosing from the same stored hall of fame on the validation split, and
is scored on the test split: accuracy, negative log-likelihood (NLL) and expected calibration error
(ECE, 15 bins), as `evens run`'s summary prints them. Variants: ``best`` (the best single network: the hall's first, the earlier
id among ties), ``best-by-loss`` (among the networks tied at the best validation score, the one with
the lowest validation log-loss), ``top5`` (the mean of the best 5), and greedy selection by ``accuracy`` (ties: lower log-loss) or by
``loss`` (log-loss), on all candidates at once or pooled over 8 bags of random halves (``bags8``,
with accuracy the default: ensemble.criterion = "auto", ensemble.bags = 8).

Prints each variant's means, its paired difference from the default (mean ± standard error over
the runs), in how many runs its NLL is worse than the best single network's, and one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

import numpy as np

from ensemble.problem import problem_from_dict
from ensemble.select import select_ensemble
from evolve.runfile import checkpoint

DEFAULT = "accuracy-bags8"
VARIANTS = {  # name: select_ensemble's settings (None: the best single network)
    "best": None,
    "best-by-loss": None,
    "top5": {"method": "top_k"},
    "accuracy": {"criterion": "accuracy"},
    "loss": {"criterion": "loss"},
    DEFAULT: {"criterion": "accuracy", "bags": 8},
    "loss-bags8": {"criterion": "loss", "bags": 8},
}


def score_run(run: str, size: int) -> dict[str, dict[str, float]]:
    """Every variant's test accuracy, NLL and ECE on one stored run."""
    state, info = checkpoint.load(os.path.join(run, "checkpoint.h5"), weights=False)
    problem = problem_from_dict(info.data["problem"])
    if problem.kind != "classification":
        raise SystemExit(f"{run}: calibration is measured on classification runs")
    members = list(state.hall_of_fame)
    by_id = {m.id: m for m in members}
    seed = info.config.search.seed
    out = {}
    for name, settings in VARIANTS.items():
        if name == "best-by-loss":
            tied = [m for m in members if m.fitness == members[0].fitness]
            ids = [min(tied, key=lambda m: (problem.calibration(m.val_pred, info.val_y)["nll"], m.id)).id]
        elif settings is None:
            ids = [members[0].id]
        else:
            chosen = select_ensemble(members, problem, info.val_y, info.test_y, size=size, seed=seed,
                                     **{"method": "greedy", **settings})
            ids = list(chosen.path[: chosen.picks])
        test = sum(by_id[i].test_pred.astype(np.float64) for i in ids) / len(ids)
        out[name] = {"accuracy": problem.scores(test, info.test_y, user=False)["accuracy"],
                     **problem.calibration(test, info.test_y), "members": len(set(ids))}
    return out


def paired(a: list[float], b: list[float]) -> tuple[float, float]:
    d = [x - y for x, y in zip(a, b)]
    return statistics.mean(d), (statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories")
    parser.add_argument("--size", type=int, default=5, help="picks of one greedy pass (ensemble.size)")
    parser.add_argument("--quick", action="store_true", help="the first 3 runs only")
    args = parser.parse_args()
    runs = sorted(args.runs)[: 3 if args.quick else None]
    scored = [score_run(run, args.size) for run in runs]
    n = len(scored)
    print(f"# study_calibration: {n} runs ({os.path.commonpath(runs) if n > 1 else runs[0]}); test split; "
          f"paired differences from {DEFAULT} (the default), mean ± standard error")
    print(f"{'variant':>15} {'accuracy':>9} {'NLL':>7} {'ECE':>7} {'members':>8} {'d accuracy':>17} {'d NLL':>17} "
          f"{'d ECE':>17} {'NLL > best':>10}")
    summary: dict = {"runs": n}
    column = lambda name, key: [s[name][key] for s in scored]  # noqa: E731
    for name in VARIANTS:
        row = {k: statistics.mean(column(name, k)) for k in ("accuracy", "nll", "ece", "members")}
        for k in ("accuracy", "nll", "ece"):
            row[f"d_{k}"] = paired(column(name, k), column(DEFAULT, k))
        row["nll_worse_than_best"] = sum(s[name]["nll"] > s["best"]["nll"] for s in scored)
        row["max_nll"] = max(column(name, "nll"))
        summary[name] = row
        d = lambda k: f"{row[k][0]:+.4f} ± {row[k][1]:.4f}"  # noqa: E731
        print(f"{name:>15} {row['accuracy']:>9.4f} {row['nll']:>7.4f} {row['ece']:>7.4f} {row['members']:>8.1f} "
              f"{d('d_accuracy'):>17} {d('d_nll'):>17} {d('d_ece'):>17} {row['nll_worse_than_best']:>6}/{n}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
