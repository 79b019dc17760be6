"""Anytime figures of bench_quality.py: quality against networks trained, one line per contender, mean over seeds.

For each dataset, ``anytime-<dataset>.png`` has two panels: the best network so far (chosen on
validation; its test metric) after each network trained, and the ensemble's test metric at the
checkpoints where bench_quality recomputed it from the networks trained so far. Needs matplotlib
(an optional dependency); the benchmark runs without it unless ``--plot`` is given.

Figures can be drawn again from a benchmark's output without running it (its last line is the JSON)::

    .venv/bin/python scripts/bench/quality_plots.py bench-quality.log docs/figures
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np


def mean_curve(curves: list[list]) -> np.ndarray:
    """The mean over seeds at each position (None and NaN left out; NaN where no seed has a value)."""
    length = max((len(c) for c in curves), default=0)
    grid = np.full((len(curves), length), np.nan)
    for i, c in enumerate(curves):
        grid[i, : len(c)] = [np.nan if v is None else v for v in c]
    counts = np.sum(np.isfinite(grid), axis=0)
    sums = np.nansum(grid, axis=0)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


CONTENDER_ORDER = ["evens", "evens-classic", "random", "optuna-tpe"]


def plot_anytime(dataset: str, runs: dict[str, list[dict]], metric: str, folder: str) -> str:
    """Draw ``folder/anytime-<dataset>.png`` from the runs of one dataset; returns its path.

    Each run (one contender, one seed) holds ``anytime_best`` (a value per network trained) and
    ``anytime_ensemble`` (a value per checkpoint, at the network counts ``anytime_at``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    # The peers in one order with one colour each on every figure, whatever order the rows came in;
    # diagnostics (evens-model, ...) after them.
    order = CONTENDER_ORDER + sorted(set(runs) - set(CONTENDER_ORDER))
    for i, contender in enumerate(order):
        rows = runs.get(contender)
        if not rows:
            continue
        colour = f"C{i}"
        best = mean_curve([r["anytime_best"] for r in rows])
        left.plot(np.arange(1, len(best) + 1), best, label=contender, color=colour)
        at = rows[0]["anytime_at"]
        right.plot(at, mean_curve([r["anytime_ensemble"] for r in rows])[: len(at)], marker="o", markersize=3, label=contender, color=colour)
    seeds = max(len(rows) for rows in runs.values())
    for ax, title in ((left, "best so far (chosen on validation)"), (right, "ensemble of the networks so far")):
        ax.set_title(title)
        ax.set_xlabel("networks trained")
        ax.grid(alpha=0.3)
    lower = " (lower is better)" if metric == "rmse" else ""
    left.set_ylabel(f"test {metric}{lower}, mean over {seeds} seeds")
    right.legend(loc="best")
    fig.suptitle(f"{dataset}: quality against networks trained")
    fig.tight_layout()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"anytime-{dataset}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(summary: dict, folder: str) -> list[str]:
    """Every dataset of a bench_quality JSON summary (its ``runs`` and ``metrics``)."""
    return [plot_anytime(dataset, runs, summary["metrics"][dataset], folder) for dataset, runs in summary["runs"].items()]


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    with open(argv[0]) as f:
        last = [line for line in f if line.startswith("{")][-1]
    for path in plot_all(json.loads(last), argv[1]):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
