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


CONTENDER_ORDER = ["evens", "evens-classic", "random", "optuna-tpe", "evens-promotion", "evens-no-promotion", "random-asha",
                   "optuna-tpe-hyperband", "dehb", "top-k-1epoch"]
CPU_POINTS = 60  # against CPU: each seed's curve read at this many CPU times, then averaged


def on_grid(spent: list[float], values: list, grid: np.ndarray) -> np.ndarray:
    """A step curve (``values[i]`` from CPU ``spent[i]`` on) read at each of ``grid``: NaN before its first value."""
    out = np.full(len(grid), np.nan)
    for i, c in enumerate(grid):
        k = int(np.searchsorted(spent, c, side="right")) - 1
        if k >= 0 and values[k] is not None:
            out[i] = values[k]
    return out


def plot_anytime(dataset: str, runs: dict[str, list[dict]], metric: str, folder: str, against_cpu: bool = False) -> str:
    """Draw ``folder/anytime-<dataset>.png`` (``anytime-cpu-<dataset>.png`` with ``against_cpu``) from the runs of
    one dataset; returns its path.

    Each run (one contender, one seed) holds ``anytime_best`` (a value per network trained),
    ``anytime_ensemble`` (a value per checkpoint, at the network counts ``anytime_at``) and ``anytime_cpu``
    (the CPU seconds spent after each network): against CPU, each seed's curves are read on a common grid of
    CPU times (:func:`on_grid`) and averaged where seeds have a value.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    # The peers in one order with one colour each on every figure, whatever order the rows came in;
    # diagnostics (evens-model, ...) after them.
    order = CONTENDER_ORDER + sorted(set(runs) - set(CONTENDER_ORDER))
    most = max((r["anytime_cpu"][-1] for rows in runs.values() for r in rows if r.get("anytime_cpu")), default=1.0)
    grid = np.linspace(0.0, most, CPU_POINTS)
    for i, contender in enumerate(order):
        rows = runs.get(contender)
        if not rows:
            continue
        colour = f"C{i % 10}"
        if against_cpu:
            # (the mean only where every seed has a value: a seed's first network arriving would make a step of its own)
            best = np.mean([on_grid(r["anytime_cpu"], r["anytime_best"], grid) for r in rows], axis=0)
            left.plot(grid, best, label=contender, color=colour)
            ensemble = [on_grid([r["anytime_cpu"][k - 1] for k in r["anytime_at"]], r["anytime_ensemble"], grid) for r in rows]
            right.plot(grid, np.mean(ensemble, axis=0), label=contender, color=colour)
            continue
        best = mean_curve([r["anytime_best"] for r in rows])
        left.plot(np.arange(1, len(best) + 1), best, label=contender, color=colour)
        at = rows[0]["anytime_at"]
        right.plot(at, mean_curve([r["anytime_ensemble"] for r in rows])[: len(at)], marker="o", markersize=3, label=contender, color=colour)
    seeds = max(len(rows) for rows in runs.values())
    for ax, title in ((left, "best so far (chosen on validation)"), (right, "ensemble of the networks so far")):
        ax.set_title(title)
        ax.set_xlabel("CPU seconds of training" if against_cpu else "networks trained")
        ax.grid(alpha=0.3)
    lower = " (lower is better)" if metric == "rmse" else ""
    left.set_ylabel(f"test {metric}{lower}, mean over {seeds} seeds")
    right.legend(loc="best")
    fig.suptitle(f"{dataset}: quality against {'CPU seconds' if against_cpu else 'networks trained'}")
    fig.tight_layout()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"anytime-{'cpu-' if against_cpu else ''}{dataset}.png")
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
