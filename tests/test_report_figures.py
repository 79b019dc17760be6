"""evens report's figures read well (issue 25, defect 5), checked on what can be measured: search.png's
main axis is zoomed onto the better networks (in the metric's direction), the parallel coordinates tick
every category of a choice, and the worker timeline's legend stays off the bars. And what they draw is read with
bounded memory (issue 34): a sample of the records past plots.SAMPLE, with the counts, the best-so-far steps and the
best networks taken from every record."""
import math
import random
from dataclasses import replace

import pytest
from test_checkpoint_report import finished_run
from test_live_ensemble import regression_info, regression_search

from evolve.app.presentation import plots
from evolve.search.space import Choice

plt = pytest.importorskip("matplotlib.pyplot")


@pytest.fixture(scope="module")
def run():
    state, info = finished_run(budget=40, k=3, fail_every=9)
    return state, info.space()


@pytest.fixture(autouse=True)
def closed():
    yield
    plt.close("all")


def ok_values(state, metric):
    return [plots._value(metric, r.fitness) for r in state.records if r.status == "ok"]


@pytest.mark.parametrize("metric", ["accuracy", "rmse"])
def test_the_search_figure_zooms_onto_the_better_networks_and_keeps_a_panel_of_the_whole_range(run, metric):
    if metric == "accuracy":
        state = run[0]
    else:  # a regression's RMSE: lower is better
        state = regression_search(regression_info(30, candidates=6))
    values = ok_values(state, metric)
    best, worst = (max(values), min(values)) if metric == "accuracy" else (min(values), max(values))
    fig = plots.plot_search(plt, plots.PlotData.of([state.records]), metric)
    lo, hi = fig.axes[0].get_ylim()
    assert lo < best < hi and abs(hi - lo) < 0.5 * abs(best - worst)  # zoomed: the worst is far outside
    assert not lo < worst < hi
    assert sum(lo <= v <= hi for v in values) >= 0.75 * len(values)  # the better three quarters are in view
    edge = hi if metric == "accuracy" else lo  # the best sits near the good edge, with a margin
    assert 0 < abs(edge - best) < 0.2 * (hi - lo)
    whole = fig.axes[2].get_ylim()
    assert whole[0] <= min(values) and max(values) <= whole[1]


def test_the_parallel_coordinates_tick_every_category_and_draw_the_best_last_and_thickest(run):
    state, space = run
    fig = plots.plot_hyperparameters(plt, plots.PlotData.of([state.records]), space, "accuracy")
    ax = fig.axes[0]
    fig.canvas.draw()
    axes = {a.get_label(): a for a in ax.child_axes}
    choices = [g for g in space.genes if isinstance(g.domain, Choice) and g.name in axes]
    assert len(choices) >= 3  # family, activation, optimizer, ... in the classic space
    for gene in choices:
        ticks = [t.get_text() for t in axes[gene.name].get_yticklabels()]
        assert ticks == [str(option) for option in gene.domain.options], gene.name
    widths = [line.get_linewidth() for line in ax.lines]
    assert widths[-1] == max(widths) > min(widths)  # the best network, drawn last


def test_the_worker_timelines_legend_leaves_the_bars_alone(run):
    state, _ = run
    fig = plots.plot_workers(plt, plots.PlotData.of([state.records], state.utilization))
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert not legend.overlaps(ax.get_window_extent())
    assert fig.bbox.x0 <= legend.x0 and legend.x1 <= fig.bbox.x1 and legend.y1 <= fig.bbox.y1  # and within the figure


def best_steps(records, x_of):
    """The best-so-far steps as search.png drew them from every record (before PlotData)."""
    best, steps = -math.inf, []
    for r in sorted((r for r in records if r.status == "ok"), key=x_of):
        if r.fitness > best:
            best = r.fitness
            steps.append((x_of(r), r.fitness))
    return steps


def test_what_the_figures_draw_is_the_whole_historys_and_a_sample_of_its_records(run, monkeypatch):
    base = run[0].records
    rng = random.Random(3)
    records = []  # many records, in an order of arrival that is not the ids', with ties and failures
    for i in range(900):
        r = base[i % len(base)]
        records.append(replace(r, id=i, fitness=round(rng.random(), 2) if r.status == "ok" else r.fitness, finished=1000 + rng.random() * 50))
    rng.shuffle(records)
    monkeypatch.setattr(plots, "SAMPLE", 100)
    data = plots.PlotData.of([records[:250], records[250:]], 0.5)
    assert data.total == 900 and 50 <= len(data.records) <= 100 and data.sampled.startswith(" (a sample of")
    assert [r.id for r in data.records] == sorted(r.id for r in data.records)
    assert data.counts == {s: sum(r.status == s for r in records) for s in {r.status for r in records}}
    assert list(zip(data.by_id.xs, data.by_id.fitnesses)) == best_steps(records, lambda r: r.id + 1)
    assert list(zip(data.by_time.xs, data.by_time.fitnesses)) == best_steps(records, lambda r: r.finished)
    ranked = sorted((r for r in records if r.status == "ok"), key=plots.best_first)
    assert [r.id for r in data.top] == [r.id for r in ranked[:plots.TOP]]
    assert data.start == min(r.started for r in records)
    monkeypatch.setattr(plots, "SAMPLE", 1000)
    whole = plots.PlotData.of([records])  # under the cap: every record drawn
    assert [r.id for r in whole.records] == list(range(900)) and whole.sampled == ""
    monkeypatch.setattr(plots, "SAMPLE", 100)
    fig = plots.plot_search(plt, data, "accuracy")
    assert "a sample of" in fig.axes[0].get_title()
    labels = fig.legends[0].get_texts()
    assert any(t.get_text() == f"ok ({data.counts['ok']:,})" for t in labels)  # the counts of every record, not the sample's
