"""``evens report --plot DIR``: PNG figures of a run, each readable on its own (matplotlib, optional).

- ``search.png``: every evaluation's validation metric, and the best so far, against the
  evaluation number and against wall time; failures marked along the bottom.
- ``ensemble.png``: the ensemble's metric on val and test after each pick, against the best
  single network.
- ``workers.png``: each worker's timeline, a bar per training coloured by how it ended.
- ``pareto.png`` (NSGA-II runs): every network's metric against the second objective, with the
  Pareto front.
- ``hyperparameters.png``: parallel coordinates of the top networks' hyperparameters, coloured by
  their validation metric.

The metric is "higher is better" accuracy for classification and RMSE ("lower is better") for
regression; each axis says which.
"""
from __future__ import annotations

import math
import os

from evolve.engine.state import SearchState
from evolve.errors import EvensError
from evolve.search.space import Choice, SearchSpace

COLOURS = {"ok": "#1f77b4", "stopped": "#9e9e9e", "timeout": "#ff7f0e", "diverged": "#d62728", "error": "#8c1a1a",
           "crashed": "#000000"}
TOP = 20


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise EvensError("--plot needs matplotlib: pip install 'evens[plot]'") from None
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _value(metric: str, fitness: float) -> float:
    """What the plots show: accuracy as is, RMSE as a positive number."""
    return fitness if metric == "accuracy" else -fitness


def _label(metric: str, split: str = "validation") -> str:
    return f"{split} accuracy (higher is better)" if metric == "accuracy" else f"{split} RMSE (lower is better)"


def plot_search(plt, state: SearchState, metric: str, path: str) -> None:
    records = sorted(state.records, key=lambda r: r.id)
    start = min(r.started for r in records)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    scored = [r for r in records if math.isfinite(r.fitness)]
    failed = [r for r in records if not math.isfinite(r.fitness)]
    floor = min((_value(metric, r.fitness) for r in scored), default=0.0)
    for ax, x_of, xlabel in ((axes[0], lambda r: r.id + 1, "evaluation (in the order they were proposed)"),
                             (axes[1], lambda r: (r.finished - start) / 60, "wall time since the first evaluation (minutes)")):
        for status in sorted({r.status for r in scored}):
            group = [r for r in scored if r.status == status]
            ax.scatter([x_of(r) for r in group], [_value(metric, r.fitness) for r in group], s=14, alpha=0.7,
                       color=COLOURS.get(status, "#555555"), label=f"{status} ({len(group)})",
                       marker="o" if status == "ok" else "x")
        if failed:
            ax.scatter([x_of(r) for r in failed], [floor] * len(failed), marker="v", color="#d62728", s=20,
                       label=f"failed: {', '.join(sorted({r.status for r in failed}))} ({len(failed)})")
        ok = sorted((r for r in scored if r.status == "ok"), key=x_of)
        best, xs, ys = -math.inf, [], []
        for r in ok:
            best = max(best, r.fitness)
            xs.append(x_of(r))
            ys.append(_value(metric, best))
        if xs:
            ax.step(xs, ys, where="post", color="black", linewidth=1.5, label="best so far")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(_label(metric))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right" if metric == "accuracy" else "upper right")
    axes[0].set_title("Every evaluation, and the best so far")
    axes[1].set_title("The same against time")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ensemble(plt, ensemble: dict, best: dict | None, metric: str, path: str) -> None:
    curve = ensemble["curve"]
    picks = list(range(1, len(curve["val"]) + 1))
    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    ax.plot(picks, curve["val"], "o-", label="ensemble, validation")
    ax.plot(picks, curve["test"], "s-", label="ensemble, test")
    if best:
        key = "accuracy" if metric == "accuracy" else "rmse"
        ax.axhline(best[f"test_{key}"], color="grey", linestyle="--", label=f"best single network #{best['id']}, test")
    ax.axvline(ensemble["picks"], color="black", linestyle=":", label=f"kept: {ensemble['picks']} picks")
    ax.set_xlabel(f"members picked ({ensemble['method']}; a network may be picked more than once)")
    ax.set_ylabel(f"{'accuracy (higher is better)' if metric == 'accuracy' else 'RMSE (lower is better)'}")
    ax.set_title("The ensemble as members are added")
    if len(picks) <= 20:  # bagged selection pools up to bags x size picks: let matplotlib place the ticks
        ax.set_xticks(picks)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_workers(plt, state: SearchState, path: str) -> None:
    records = state.records
    start = min(r.started for r in records)
    workers = sorted({r.worker for r in records})
    row = {w: i for i, w in enumerate(workers)}
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.35 * len(workers)), constrained_layout=True)
    seen = set()
    for r in records:
        colour = COLOURS.get(r.status, "#555555")
        label = r.status if r.status not in seen else None
        seen.add(r.status)
        ax.barh(row[r.worker], (r.finished - r.started) / 60, left=(r.started - start) / 60, height=0.7, color=colour,
                edgecolor="white", linewidth=0.4, label=label)
    ax.set_yticks(range(len(workers)))
    ax.set_yticklabels([f"rank {w}" for w in workers])
    ax.invert_yaxis()
    ax.set_xlabel("wall time since the first evaluation (minutes); gaps are idle time")
    ax.set_ylabel("worker")
    ax.set_title(f"Worker timeline: {len(records)} trainings on {len(workers)} workers, utilization {100 * state.utilization:.0f} %")
    ax.legend(fontsize=8, loc="upper right", ncol=len(seen))
    ax.grid(axis="x", alpha=0.3)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_pareto(plt, state: SearchState, front: list[dict], key: str, metric: str, path: str) -> None:
    ok = [r for r in state.records if r.status == "ok" and key in r.metrics]
    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    ax.scatter([r.metrics[key] for r in ok], [_value(metric, r.fitness) for r in ok], s=14, alpha=0.5, color="#9e9e9e",
               label=f"all networks ({len(ok)})")
    pts = sorted((m[key], _value(metric, m["fitness"])) for m in front)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="#d62728", label=f"Pareto front ({len(front)})")
    ax.set_xscale("log")
    ax.set_xlabel("trainable parameters (log scale, fewer is better)" if key == "params"
                  else "inference latency, microseconds per sample (log scale, lower is better)")
    ax.set_ylabel(_label(metric))
    ax.set_title("Trade-off found by NSGA-II")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_hyperparameters(plt, state: SearchState, space: SearchSpace, metric: str, path: str) -> None:
    ok = sorted((r for r in state.records if r.status == "ok"), key=lambda r: -r.fitness)[:TOP]
    decoded_all = [space.decode(r.genome) for r in ok]
    genes = [g for g in space.genes if _varies(g) and any(g.name in d for d in decoded_all)]  # inactive everywhere: left out
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(genes)), 5), constrained_layout=True)
    values = [_value(metric, r.fitness) for r in ok]
    lo, hi = min(values), max(values)
    cmap = plt.get_cmap("viridis" if metric == "accuracy" else "viridis_r")
    for r, v in sorted(zip(ok, values), key=lambda p: p[1] if metric == "accuracy" else -p[1]):
        decoded = space.decode(r.genome)
        ys = [_position(g, decoded.get(g.name)) for g in genes]
        ax.plot(range(len(genes)), ys, color=cmap((v - lo) / (hi - lo) if hi > lo else 1.0), alpha=0.8, linewidth=1.3)
    for i, g in enumerate(genes):
        ax.axvline(i, color="black", linewidth=0.6)
        ax.text(i, -0.06, _ends(g)[0], ha="center", va="top", fontsize=7)
        ax.text(i, 1.06, _ends(g)[1], ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(genes)))
    ax.set_xticklabels([g.name for g in genes], rotation=30, ha="right")
    ax.set_ylim(-0.15, 1.15)
    ax.set_yticks([])
    ax.set_ylabel("position within each gene's range (bottom to top, as labelled)")
    ax.set_title(f"Hyperparameters of the top {len(ok)} networks (colour: {_label(metric)}, {lo:.4g} to {hi:.4g})")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(lo, hi))
    fig.colorbar(sm, ax=ax, label=_label(metric))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _varies(gene) -> bool:
    domain = gene.domain
    return len(domain.options) > 1 if isinstance(domain, Choice) else domain.high > domain.low


def _position(gene, value) -> float:
    """Where ``value`` sits on the gene's axis, 0 to 1 (log ranges on a log scale; choices evenly)."""
    domain = gene.domain
    if isinstance(domain, Choice):
        choices = list(domain.options)
        return choices.index(value) / max(1, len(choices) - 1) if value in choices else 0.5
    low, high = domain.low, domain.high
    if high == low:
        return 0.5
    if domain.log and low > 0 and value and value > 0:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (float(value) - low) / (high - low)


def _ends(gene) -> tuple[str, str]:
    domain = gene.domain
    if isinstance(domain, Choice):
        return str(domain.options[0]), str(domain.options[-1])
    return f"{domain.low:.3g}", f"{domain.high:.3g}"


def write_plots(state: SearchState, summary: dict, space: SearchSpace, folder: str, objective: str | None) -> list[str]:
    """Write the figures into ``folder`` (created if missing); returns the paths written."""
    plt = _pyplot()
    if not state.records:
        raise EvensError(f"{summary['run_dir']}: no evaluations yet, nothing to plot")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise EvensError(f"{folder}: cannot create the folder ({exc.strerror or exc})") from None
    metric = summary["metric"]
    written = []

    def out(name: str) -> str:
        written.append(os.path.join(folder, name))
        return written[-1]

    plot_search(plt, state, metric, out("search.png"))
    if summary["ensemble"]:
        plot_ensemble(plt, summary["ensemble"], summary["best"], metric, out("ensemble.png"))
    plot_workers(plt, state, out("workers.png"))
    if summary.get("pareto") and objective:
        plot_pareto(plt, state, summary["pareto"], objective, metric, out("pareto.png"))
    if any(r.status == "ok" for r in state.records):
        plot_hyperparameters(plt, state, space, metric, out("hyperparameters.png"))
    return written
