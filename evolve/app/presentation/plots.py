"""``evens report --plot DIR``: PNG figures of a run, each readable on its own (matplotlib, optional).

- ``search.png``: every evaluation's validation metric, and the best so far, against the
  evaluation number and against wall time, zoomed onto the better three quarters of the successful
  networks, beside a panel of the whole range; failures marked along the bad edge.
- ``ensemble.png``: the ensemble's metric on val and test after each pick, against the best
  single network.
- ``workers.png``: each worker's timeline, a bar per training coloured by how it ended (the legend
  beside the axes).
- ``pareto.png`` (NSGA-II runs): every network's metric against the second objective, with the
  Pareto front.
- ``hyperparameters.png``: parallel coordinates of the best networks' hyperparameters (every
  category ticked), coloured by their validation metric, the best drawn last and thickest.

The metric is "higher is better" accuracy for classification and RMSE ("lower is better") for
regression; each axis says which.

The figures are drawn from :class:`PlotData`, made from the history a slice at a time: a sample of at most
:data:`SAMPLE` records (every one below that; past it, an even thinning in the order recorded), and, from every
record, the counts by status, the best-so-far steps and the best :data:`TOP` networks. So ``--plot`` reads the
whole history with bounded memory, and a figure never draws millions of points.
"""
from __future__ import annotations

import bisect
import heapq
import math
import os
from dataclasses import dataclass, field
from typing import Iterable

from evolve.app.presentation.summary import BestNetwork, EnsembleFacts, ParetoMember, Summary
from evolve.errors import EvensError
from evolve.search.records import Record, best_first
from evolve.search.space import Choice, SearchSpace

COLOURS = {"ok": "#1f77b4", "stopped": "#9e9e9e", "timeout": "#ff7f0e", "diverged": "#d62728", "error": "#8c1a1a",
           "crashed": "#000000"}
TOP = 200  # networks in the parallel coordinates, at most
SAMPLE = 20_000  # records drawn in search.png, workers.png and pareto.png, at most


class _Staircase:
    """The points where a running best improves along an order that the points may arrive out of: (x, fitness)
    such that no point before x has a fitness as high."""

    def __init__(self):
        self.xs: list[float] = []
        self.fitnesses: list[float] = []

    def add(self, x: float, fitness: float) -> None:
        at = bisect.bisect_left(self.xs, x)
        if at and self.fitnesses[at - 1] >= fitness:
            return  # no better than one before it
        end = at
        while end < len(self.xs) and self.fitnesses[end] <= fitness:
            end += 1  # those after it that it beats are improvements no more
        self.xs[at:end], self.fitnesses[at:end] = [x], [fitness]


@dataclass
class PlotData:
    """What the figures draw, from every record (:meth:`of`)."""

    records: list[Record] = field(default_factory=list)  # a sample: every record up to SAMPLE, else an even thinning; by id
    total: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # every record's status
    by_id: _Staircase = field(default_factory=_Staircase)  # the best ok fitness so far, against the id
    by_time: _Staircase = field(default_factory=_Staircase)  # ... against the time it finished
    top: list[Record] = field(default_factory=list)  # the best TOP ok records, best first
    start: float = math.inf  # the earliest start
    utilization: float = 0.0

    @classmethod
    def of(cls, chunks: Iterable[list[Record]], utilization: float = 0.0) -> PlotData:
        """From the records, in the order recorded, a list at a time (evolve.runfile.history.History.records)."""
        data, kept, stride, best = cls(utilization=utilization), [], 1, []
        for chunk in chunks:
            for r in chunk:
                if data.total % stride == 0:
                    kept.append((data.total, r))
                    if len(kept) > SAMPLE:
                        stride *= 2
                        kept = [(i, k) for i, k in kept if i % stride == 0]
                data.total += 1
                data.counts[r.status] = data.counts.get(r.status, 0) + 1
                data.start = min(data.start, r.started)
                if r.status == "ok" and math.isfinite(r.fitness):
                    data.by_id.add(r.id + 1, r.fitness)
                    data.by_time.add(r.finished, r.fitness)
                    entry = (tuple(-v for v in best_first(r)), r.id, r)  # a min-heap of the best TOP: the worst on top
                    if len(best) < TOP:
                        heapq.heappush(best, entry)
                    elif entry > best[0]:
                        heapq.heapreplace(best, entry)
        data.records = sorted((r for _, r in kept), key=lambda r: r.id)
        data.top = [r for *_, r in sorted(best, reverse=True)]
        return data

    @property
    def sampled(self) -> str:
        """What a title says of a sample: nothing where every record is drawn."""
        return f" (a sample of {len(self.records):,} of {self.total:,})" if len(self.records) < self.total else ""


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


def top_band(values: list[float], higher: bool) -> tuple[float, float]:
    """The y range that zooms onto the better networks: from the value that three quarters of ``values``
    beat (or match) to the best, with a margin; ``higher``: is higher better."""
    ordered = sorted(values, reverse=higher)  # best first
    best, edge = ordered[0], ordered[(3 * len(ordered)) // 4 if len(ordered) > 1 else 0]
    lo, hi = sorted((best, edge))
    margin = 0.08 * (hi - lo) or 0.01 * max(abs(best), 1e-3)
    return lo - margin, hi + margin


def plot_search(plt, data: PlotData, metric: str, rows: str = "validation"):
    """Two panels zoomed onto the better networks (against evaluations, against time) and one of the whole range."""
    records = data.records
    start = data.start
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8), layout="constrained", gridspec_kw={"width_ratios": [3, 3, 1.6]})
    scored = [r for r in records if math.isfinite(r.fitness)]
    failed = [r for r in records if not math.isfinite(r.fitness)]
    higher = metric == "accuracy"
    ok_values = [_value(metric, r.fitness) for r in scored if r.status == "ok"]
    band = top_band(ok_values or [_value(metric, r.fitness) for r in scored] or [0.0], higher)
    by_evaluation = lambda r: r.id + 1  # noqa: E731
    minutes = lambda t: (t - start) / 60  # noqa: E731
    same = lambda x: x  # noqa: E731
    # each panel: its axes, a record's x, its label, its zoom, and the best-so-far steps with their x as the panel's
    panels = ((axes[0], by_evaluation, "evaluation (in the order they were proposed)", band, data.by_id, same),
              (axes[1], lambda r: minutes(r.finished), "wall time since the first evaluation (minutes)", band, data.by_time, minutes),
              (axes[2], by_evaluation, "evaluation", None, data.by_id, same))
    failures = sorted({r.status for r in failed})
    for ax, x_of, xlabel, zoom, steps, step_x in panels:
        for status in sorted({r.status for r in scored}):
            group = [r for r in scored if r.status == status]
            ax.scatter([x_of(r) for r in group], [_value(metric, r.fitness) for r in group], s=14, alpha=0.7,
                       color=COLOURS.get(status, "#555555"), label=f"{status} ({data.counts.get(status, len(group)):,})",
                       marker="o" if status == "ok" else "x")
        if failed:  # along the bad edge (the bottom for accuracy, the top for RMSE), in axes coordinates
            ax.scatter([x_of(r) for r in failed], [0.02 if higher else 0.98] * len(failed), transform=ax.get_xaxis_transform(),
                       marker="v" if higher else "^", color="#d62728", s=20,
                       label=f"failed: {', '.join(failures)} ({sum(data.counts.get(f, 0) for f in failures):,})")
        if steps.xs:  # from every ok record, not the sample
            ax.step([step_x(x) for x in steps.xs], [_value(metric, f) for f in steps.fitnesses], where="post", color="black", linewidth=1.5, label="best so far")
        if zoom is not None:
            ax.set_ylim(*zoom)
        else:
            ax.axhspan(*band, color="#ffd54f", alpha=0.3, label="the left panels' range: the better 3/4 of the ok networks")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(_label(metric, rows))
    axes[0].set_title("Every evaluation, and the best so far (zoomed)" + data.sampled, fontsize=10)
    axes[1].set_title("The same against time", fontsize=10)
    axes[2].set_title("The whole range", fontsize=10)
    handles, labels = axes[2].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8)
    return fig


def plot_ensemble(plt, ensemble: EnsembleFacts, best: BestNetwork | None, metric: str, rows: str = "validation"):
    curve = ensemble.curve
    picks = list(range(1, len(curve.val) + 1))
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    ax.plot(picks, curve.val, "o-", label=f"ensemble, {rows}")
    ax.plot(picks, curve.test, "s-", label="ensemble, test")
    if best:
        key = "accuracy" if metric == "accuracy" else "rmse"
        ax.axhline(best.score("test", key), color="grey", linestyle="--", label=f"best single network #{best.id}, test")
    ax.axvline(ensemble.picks, color="black", linestyle=":", label=f"kept: {ensemble.picks} picks")
    ax.set_xlabel(f"members picked ({ensemble.method}; a network may be picked more than once)")
    ax.set_ylabel(f"{'accuracy (higher is better)' if metric == 'accuracy' else 'RMSE (lower is better)'}")
    ax.set_title("The ensemble as members are added")
    if len(picks) <= 20:  # bagged selection pools up to bags x size picks: let matplotlib place the ticks
        ax.set_xticks(picks)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_workers(plt, data: PlotData):
    records = data.records
    start = data.start
    workers = sorted({r.worker for r in records})
    row = {w: i for i, w in enumerate(workers)}
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.35 * len(workers)), layout="constrained")
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
    ax.set_title(f"Worker timeline: {data.total:,} trainings on {len(workers)} workers, utilization {100 * data.utilization:.0f} %"
                 + data.sampled)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside the bars, never on them
    ax.grid(axis="x", alpha=0.3)
    return fig


def plot_pareto(plt, data: PlotData, front: list[ParetoMember], key: str, metric: str, rows: str = "validation"):
    ok = [r for r in data.records if r.status == "ok" and key in r.metrics]
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    ax.scatter([r.metrics[key] for r in ok], [_value(metric, r.fitness) for r in ok], s=14, alpha=0.5, color="#9e9e9e",
               label=f"all networks ({len(ok):,}{' drawn' if data.sampled else ''})")
    pts = sorted((m.cost, _value(metric, m.fitness)) for m in front)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color="#d62728", label=f"Pareto front ({len(front)})")
    ax.set_xscale("log")
    ax.set_xlabel("trainable parameters (log scale, fewer is better)" if key == "params"
                  else "inference latency, microseconds per sample (log scale, lower is better)")
    ax.set_ylabel(_label(metric, rows))
    ax.set_title("Trade-off found by NSGA-II")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_hyperparameters(plt, data: PlotData, space: SearchSpace, metric: str, rows: str = "validation"):
    """Parallel coordinates of the best :data:`TOP` networks: an axis per gene that varies, every category
    of a choice ticked; colour by the metric over :func:`top_band` (worse ones at its end), the best drawn
    last, thickest and most opaque, so that a crowd of lines leaves the best ones readable."""
    ok = data.top
    decoded = [space.decode(r.genome) for r in ok]
    genes = [g for g in space.genes if _varies(g) and any(g.name in d for d in decoded)]  # inactive everywhere: left out
    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(genes)), 5), layout="constrained")
    values = [_value(metric, r.fitness) for r in ok]
    lo, hi = top_band(values, metric == "accuracy")
    cmap = plt.get_cmap("viridis" if metric == "accuracy" else "viridis_r")
    norm = plt.Normalize(lo, hi, clip=True)
    n = len(ok)
    for rank in reversed(range(n)):  # the worst first: the best end up on top
        fraction = 1 - rank / max(1, n - 1)  # 1 for the best, 0 for the last shown
        ys = [_position(g, decoded[rank].get(g.name)) for g in genes]
        ax.plot(range(len(genes)), ys, color=cmap(norm(values[rank])), alpha=0.15 + 0.8 * fraction ** 2,
                linewidth=0.6 + 1.9 * fraction ** 2)
    for i, g in enumerate(genes):
        gene_axis = ax.secondary_yaxis(i / max(1, len(genes) - 1))
        gene_axis.set_label(g.name)
        ticks = _ticks(g)
        gene_axis.set_yticks([p for p, _ in ticks], labels=[text for _, text in ticks])
        gene_axis.tick_params(labelsize=7, length=3)
        gene_axis.set_zorder(3)  # its labels over the lines
        for label in gene_axis.get_yticklabels():
            label.set_bbox({"facecolor": "white", "alpha": 0.75, "edgecolor": "none", "pad": 0.6})
    ax.set_xlim(0, max(1, len(genes) - 1))
    ax.set_xticks(range(len(genes)), labels=[g.name for g in genes], rotation=30, ha="right")
    ax.set_ylim(-0.04, 1.04)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"Hyperparameters of the best {n} networks (the best drawn last and thickest)")
    fig.colorbar(plt.cm.ScalarMappable(cmap=cmap, norm=norm), ax=ax, label=_label(metric, rows), extend="min" if metric == "accuracy" else "max")
    return fig


def _varies(gene) -> bool:
    domain = gene.domain
    return len(domain.options) > 1 if isinstance(domain, Choice) else domain.high > domain.low


def _position(gene, value) -> float:
    """Where ``value`` sits on the gene's axis, 0 to 1 (log ranges on a log scale; choices evenly); NaN
    (a gap in the line) where the gene is inactive for the network."""
    domain = gene.domain
    if value is None:
        return math.nan
    if isinstance(domain, Choice):
        choices = list(domain.options)
        return choices.index(value) / max(1, len(choices) - 1) if value in choices else 0.5
    low, high = domain.low, domain.high
    if high == low:
        return 0.5
    if domain.log and low > 0 and value and value > 0:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
    return (float(value) - low) / (high - low)


def _ticks(gene) -> list[tuple[float, str]]:
    """(position, label) of a gene's ticks: every option of a choice; the ends and middle of a range."""
    domain = gene.domain
    if isinstance(domain, Choice):
        return [(_position(gene, option), str(option)) for option in domain.options]
    middle = math.sqrt(domain.low * domain.high) if domain.log else (domain.low + domain.high) / 2
    middle = round(middle) if domain.integer else middle
    return [(_position(gene, v), f"{v:.3g}") for v in (domain.low, middle, domain.high)]


def write_plots(data: PlotData, summary: Summary, space: SearchSpace, folder: str, objective: str | None) -> list[str]:
    """Write the figures into ``folder`` (created if missing); returns the paths written."""
    plt = _pyplot()
    if not data.total:
        raise EvensError(f"{summary.run_dir}: no evaluations yet, nothing to plot")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise EvensError(f"{folder}: cannot create the folder ({exc.strerror or exc})") from None
    metric = summary.metric
    rows = "out-of-fold" if summary.chosen_on.folds else "validation"  # what the choices were made on
    written: list[str] = []

    def save(fig, name: str) -> None:
        fig.savefig(os.path.join(folder, name), dpi=110)
        plt.close(fig)
        written.append(os.path.join(folder, name))

    save(plot_search(plt, data, metric, rows), "search.png")
    if summary.ensemble:
        save(plot_ensemble(plt, summary.ensemble, summary.best, metric, rows), "ensemble.png")
    save(plot_workers(plt, data), "workers.png")
    if summary.pareto and objective:
        save(plot_pareto(plt, data, summary.pareto, objective, metric, rows), "pareto.png")
    if data.top:
        save(plot_hyperparameters(plt, data, space, metric, rows), "hyperparameters.png")
    return written
