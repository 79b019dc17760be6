"""evens report's figures read well (issue 25, defect 5), checked on what can be measured: search.png's
main axis is zoomed onto the better networks (in the metric's direction), the parallel coordinates tick
every category of a choice, and the worker timeline's legend stays off the bars."""
import pytest
from test_checkpoint_report import finished_run
from test_live_ensemble import regression_info, regression_search

from evolve.app import plots
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
    fig = plots.plot_search(plt, state, metric)
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
    fig = plots.plot_hyperparameters(plt, state, space, "accuracy")
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
    fig = plots.plot_workers(plt, state)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert not legend.overlaps(ax.get_window_extent())
    assert fig.bbox.x0 <= legend.x0 and legend.x1 <= fig.bbox.x1 and legend.y1 <= fig.bbox.y1  # and within the figure
