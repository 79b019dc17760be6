"""Early stopping by the median rule (Vizier's: best so far against the median of running averages), and time
limits: on the worker, on the master, in the record."""
import math
import statistics

import numpy as np
import pytest
from conftest import blob_splits
from fakes import TEST_SHAPE, VAL_SHAPE, landscape, search_config
from hypothesis import given
from hypothesis import strategies as st

from ensemble.hall_of_fame import clears
from ensemble.problem import Classification
from ensemble.results import Evaluation
from ensemble.specs import NetworkSpec, TrainSpec
from ensemble.train import DeviceData, Watch, train_and_evaluate
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.search.early_stop import MedianRule, RunningMedian
from evolve.search.records import Record
from evolve.search.space_config import parse_space
from evolve.transport.protocol import InProcessTransport, Task
from evolve.transport.worker import serve, trainer_for

SPACE = parse_space({}).for_sample_shape((1, 8, 8))


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=60))
def test_running_median_is_the_median(values):
    m = RunningMedian()
    for i, v in enumerate(values):
        m.add(v)
        assert m.median() == pytest.approx(statistics.median(values[: i + 1]), rel=1e-12, abs=1e-9)


@given(st.lists(st.lists(st.floats(-1e6, 1e6), max_size=40), min_size=1, max_size=12))
def test_running_median_is_exact_when_values_come_in_batches_between_asks(batches):
    m, seen = RunningMedian(), []
    for batch in batches:  # as the master adds: many values, then one ask when the bars are rebuilt
        for v in batch:
            m.add(v)
        seen += batch
        assert len(m) == len(seen)
        assert (m.median() == statistics.median(seen)) if seen else math.isnan(m.median())


@pytest.mark.parametrize("drift", [0.0, 1.0])
def test_a_running_median_past_its_cap_keeps_at_most_cap_values_and_stays_near_the_middle(drift):
    """Past ``cap`` kept values a median thins them (and samples what comes after): bounded memory at millions of
    results, and a median whose rank among all the values stays near the middle, for a search whose values drift
    upward as it goes too. (Measured worst with this cap: 0.23 %; the default cap is 16 times larger.)"""
    rng = np.random.default_rng(0)
    m, every = RunningMedian(cap=4000), []
    for batch in range(300):  # 300,000 values, asked for between batches as the master does
        values = rng.normal(drift * batch / 300, 1.0, size=1000)
        for v in values:
            m.add(float(v))
        every.append(values)
        got = m.median()
        if batch % 10 == 9:
            seen = np.sort(np.concatenate(every))
            assert len(m) == seen.size and m._sorted.size <= 4000
            assert abs(np.searchsorted(seen, got) / seen.size - 0.5) < 0.005, batch
    assert m.weight >= 64


def record(ident, curve):
    return Record(id=ident, genome=[0.5], parents=(-1, -1), status="ok", fitness=curve[-1], metrics={}, seconds=1.0, epochs_done=len(curve), worker=1, started=0.0, finished=0.0, curve=curve)


def test_bars_need_peers_and_ignore_nan():
    rule = MedianRule([record(i, [0.1 * i, 0.2 * i]) for i in range(4)], min_peers=5)
    assert all(math.isnan(b) for b in rule.bars(3))
    rule.tell(record(4, [0.4, math.nan, 0.9]))
    bars = rule.bars(3)
    assert bars[0] == pytest.approx(0.2) and math.isnan(bars[1]) and math.isnan(bars[2])  # epoch 2 has 4 finite values


def test_a_curve_counts_up_to_its_first_non_finite_value():
    """The bars are medians of running averages (0.2, 0.3, 0.5 for this curve), and a curve stops
    counting at its first NaN or infinity: a diverged network never moves a median."""
    rule = MedianRule([record(i, [0.2, 0.4, 0.9]) for i in range(5)], min_peers=5, planned_fraction=0.0)
    assert rule.bars(3) == pytest.approx((0.2, 0.3, 0.5))
    curves = [[0.2, -math.inf, 0.9]] * 24 + [[0.2, 0.4, math.inf]] * 12 + [[math.nan, 0.5]] * 3
    for i, curve in enumerate(curves):
        rule.tell(record(5 + i, curve))
    # counted, the infinities would be the medians after epochs 2 and 3: only finite averages joined (0.2, 0.3)
    assert rule.bars(3) == pytest.approx((0.2, 0.3, 0.5))


@given(st.lists(st.lists(st.floats(0, 1), min_size=1, max_size=8), min_size=5, max_size=30))
def test_a_bar_is_the_median_of_the_running_averages_of_the_networks_that_reached_the_epoch(curves):
    rule = MedianRule([record(i, c) for i, c in enumerate(curves)], min_peers=5, planned_fraction=0.0)
    for epoch, bar in enumerate(rule.bars(8)):
        reached = [statistics.mean(c[: epoch + 1]) for c in curves if len(c) > epoch]
        if len(reached) < 5:
            assert math.isnan(bar)
        else:
            assert bar == pytest.approx(statistics.median(reached), abs=1e-12)


values = st.one_of(st.floats(-1e308, 1e308), st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 0.0, -0.0]))


@given(st.lists(st.lists(values, max_size=12), min_size=1, max_size=20))
def test_tell_adds_what_the_epoch_by_epoch_loop_adds(curves):
    """A curve told at once (in C) adds to each epoch exactly what a loop over its values adds: the running
    averages up to the first non-finite value, the sums taken left to right (overflowing as they overflow)."""
    rule = MedianRule()
    for i, curve in enumerate(curves):
        rule.tell(Record(id=i, genome=[0.5], parents=(-1, -1), status="ok", fitness=0.5, metrics={}, seconds=1.0, epochs_done=len(curve), worker=1, started=0.0, finished=0.0, curve=curve))
    expected: list[list[float]] = []
    for curve in curves:
        total = 0.0
        for epoch, fitness in enumerate(curve):
            if not math.isfinite(fitness):
                break
            total += fitness
            if epoch == len(expected):
                expected.append([])
            expected[epoch].append(total / (epoch + 1))
    assert len(rule._by_epoch) == len(expected)
    assert [median._new for median in rule._by_epoch] == expected  # (no NaN: a sum that overflowed stays infinite)


def test_no_bar_in_the_first_third_of_the_planned_epochs():
    rule = MedianRule([record(i, [0.5] * 12) for i in range(6)])
    assert [math.isnan(b) for b in rule.bars(12)] == [True] * 3 + [False] * 9  # judged from epoch 4 of 12
    assert [math.isnan(b) for b in rule.bars(6)] == [True] + [False] * 5  # from epoch 2 of 6
    assert not any(math.isnan(b) for b in rule.bars(3))  # from epoch 1 (the worker's warm-up still applies)
    unguarded = MedianRule([record(i, [0.5] * 12) for i in range(6)], planned_fraction=0.0)
    assert not any(math.isnan(b) for b in unguarded.bars(12))


def first_stop(curve, bars, warmup=2):
    """Where a worker stops a training with this validation curve (ensemble.train's on_epoch), or None."""
    for epoch in range(1, len(curve)):  # after epoch `epoch`, all but the last
        bar = bars[epoch - 1]
        if epoch >= warmup and math.isfinite(bar) and max(curve[:epoch]) < bar:
            return epoch
    return None


def test_a_slow_starter_that_ends_best_runs_on_and_a_poor_network_stops():
    # Ten fast networks that level off at 0.88, then one planned for 12 epochs (a large batch: few optimiser
    # steps per epoch) that starts low and ends best, and one that never gets anywhere.
    fast = [0.80, 0.85, 0.87, 0.88] + [0.88] * 8
    slow = [0.30, 0.50, 0.70, 0.86, 0.90, 0.93, 0.95, 0.96, 0.97, 0.97, 0.98, 0.98]
    poor = [0.30, 0.40, 0.45, 0.50, 0.52, 0.53, 0.54, 0.55, 0.55, 0.55, 0.56, 0.56]
    rule = MedianRule([record(i, fast) for i in range(10)])
    bars = rule.bars(12)
    assert first_stop(slow, bars) is None and first_stop(poor, bars) == 4
    # The bar the rule replaced (the earlier networks' fitness after epoch e, from epoch 2) stops the slow one at once.
    assert first_stop(slow, fast) == 2
    # Noise: a dip below the bar does not stop a network whose best so far clears it.
    noisy = [0.84, 0.90, 0.80, 0.83, 0.90] + [0.9] * 7
    assert first_stop(noisy, bars) is None and min(noisy[3:]) < bars[3]


def test_stopped_networks_count_up_to_where_they_stopped():
    rule = MedianRule([record(i, [0.9, 0.9, 0.9, 0.9]) for i in range(3)] + [record(3 + i, [0.1, 0.1]) for i in range(3)],
                      min_peers=5, planned_fraction=0.0)
    bars = rule.bars(4)
    assert bars[0] == pytest.approx(0.5) and bars[1] == pytest.approx(0.5)  # six networks reached epochs 1 and 2
    assert math.isnan(bars[2]) and math.isnan(bars[3])  # only three reached epoch 3


def data():
    splits = blob_splits((10,), (200, 60, 60))
    return DeviceData.from_arrays({f"{s}/{k}": v for s, xy in splits.items() for k, v in zip("xy", xy)}, Classification(3))


def test_a_training_below_the_bar_stops_after_the_warmup():
    d = data()
    spec, training = NetworkSpec("mlp", 1, 8), TrainSpec(1e-3, 32, 10)
    ev = train_and_evaluate(spec, training, d, 0, watch=Watch(stop_below=(2.0,) * 10, warmup=3))  # above any accuracy
    assert ev.status == "stopped" and ev.epochs_done == 3 and len(ev.curve) == 3
    assert ev.fitness == ev.curve[-1] == ev.metrics["val_accuracy"] and not ev.has_payload
    assert "after 3 of 10 epochs" in ev.message
    full = train_and_evaluate(spec, training, d, 0, watch=Watch(stop_below=(-1.0,) * 10, warmup=3))  # below any
    assert full.status == "ok" and full.epochs_done == 10 and len(full.curve) == 10 and full.curve[-1] == full.fitness
    assert full.curve[:3] == ev.curve  # the same training, up to where the first one stopped
    plain = train_and_evaluate(spec, training, d, 0)
    assert plain.curve == [] and plain.fitness == full.fitness  # watching does not change the training


@pytest.mark.timing
def test_a_timeout_is_recorded_and_the_worker_goes_on():
    """Wall-clock timing: a 0.05 s time limit stops a training of 500 epochs (100,000 steps at batch 1)
    before its end, and it reports under 5 s (one epoch takes a fraction of a second, even loaded)."""
    d = data()
    tasks = [Task.build(0, NetworkSpec("mlp", 2, 64), TrainSpec(1e-3, 1, 500), 0, watch={"time_limit": 0.05}),
             Task.build(1, NetworkSpec("mlp", 1, 8), TrainSpec(1e-2, 32, 2), 1, watch={"time_limit": 60.0})]

    class Channel:
        def __init__(self):
            self.results = []

        def next_task(self):
            return tasks.pop(0) if tasks else None

        def send_result(self, result):
            self.results.append(result)

    channel = Channel()
    assert serve(channel, trainer_for(d)) == 2
    timed_out, fine = (r.evaluation for r in channel.results)
    assert timed_out.status == "timeout" and timed_out.epochs_done < 500 and timed_out.seconds < 5
    assert "time limit of 0.05 s" in timed_out.message and fine.status == "ok"


def settings(budget, mode="async", early=True):
    return search_config(budget, 6, 3, 0, checkpoint_seconds=0, mode=mode, early_stopping=early, early_stopping_warmup=2)


def spread(task: Task) -> Evaluation:
    """A worker over a landscape with poor networks in it: landscape's score stretched over 0.05-1, a curve
    that rises towards it, and the rule applied as ensemble.train's worker applies it (best so far below the bar)."""
    base = landscape(Task(task.id, task.network, task.training, task.seed, task.entry_bar, {}))
    final = min(max((base.fitness - 0.45) * 3, 0.05), 1.0)
    epochs = task.training["epochs"]
    curve = [final * (1 - 0.6 ** (e + 1)) for e in range(epochs)]
    bars = task.watch.get("stop_below", ())
    stop = first_stop(curve, list(bars) + [math.nan] * epochs, task.watch.get("warmup", 0)) if bars else None
    if stop is not None:
        return Evaluation(status="stopped", fitness=curve[stop - 1], metrics={"val_accuracy": curve[stop - 1]}, seconds=1.0, epochs_done=stop, curve=curve[:stop])
    ev = Evaluation(status="ok", fitness=final, metrics={"val_accuracy": final, "test_accuracy": final}, seconds=1.0, epochs_done=epochs, curve=curve if bars else [])
    if clears(final, ev.loss, task.id, task.entry_bar):
        rng = np.random.default_rng(task.id)
        ev.val_pred = rng.dirichlet(np.ones(2), VAL_SHAPE[0]).astype(np.float32)
        ev.test_pred = rng.dirichlet(np.ones(2), TEST_SHAPE[0]).astype(np.float32)
        ev.weights = {"0.weight": rng.normal(size=(3, 2)).astype(np.float32)}
    return ev


def test_the_master_stops_networks_below_the_median_and_keeps_them_out():
    seen = []

    def spy(task):
        seen.append(task)
        return spread(task)

    state = SearchState.fresh(0, candidates=3)
    run_search(state, InProcessTransport(spy, 2), SPACE, settings(80))
    stopped = [r for r in state.records if r.status == "stopped"]
    assert stopped, "nothing was stopped"
    assert all(r.epochs_done >= 2 and len(r.curve) == r.epochs_done for r in stopped)
    planned = {t.id: t.training["epochs"] for t in seen}
    assert all(3 * r.epochs_done >= planned[r.id] for r in stopped)  # never in the first third of its epochs
    assert not {r.id for r in stopped} & (set(state.population) | set(state.hall_of_fame.ids))
    baseline = SearchState.fresh(0, candidates=3)
    run_search(baseline, InProcessTransport(spread, 2), SPACE, settings(80, early=False))
    best = lambda s: max(r.fitness for r in s.records if r.status == "ok")  # noqa: E731
    assert best(state) >= best(baseline) - 0.02  # it still finds good networks
    assert sum(r.epochs_done for r in state.records) < sum(r.epochs_done for r in baseline.records)
    # What was stopped was poor: below the median of the finished networks' final fitness.
    finals = statistics.median(r.fitness for r in state.records if r.status == "ok")
    assert all(max(r.curve) < finals for r in stopped)


def test_generational_search_never_stops_early():
    seen = []

    def spy(task):
        seen.append(task.watch)
        return landscape(task)

    state = SearchState.fresh(0, candidates=3)
    run_search(state, InProcessTransport(spy, 2), SPACE, settings(40, mode="generational"))
    assert all("stop_below" not in w for w in seen) and not any(r.status == "stopped" for r in state.records)


def test_a_network_told_in_stages_counts_once_at_every_epoch_as_if_told_whole():
    """Successive halving brings a network's curve back stage by stage, each record the whole curve so far: the rule
    takes in only what each stage added, so the medians are those of the unbroken curves."""
    curves = {0: [0.2, 0.4, 0.5, 0.6, 0.65, 0.7], 1: [0.3, 0.35, 0.4, 0.42, 0.43, 0.44], 2: [0.1, 0.5, 0.6, 0.7, 0.8, 0.9]}
    whole = MedianRule(min_peers=1, planned_fraction=0)
    for ident, curve in curves.items():
        whole.tell(Record(id=ident, genome=[0.5], status="ok", fitness=curve[-1], curve=curve))
    staged, next_id = MedianRule(min_peers=1, planned_fraction=0), 3
    for ident, curve in curves.items():
        staged.tell(Record(id=ident, genome=[0.5], status="paused", fitness=curve[1], curve=curve[:2]))
    for ident, curve in curves.items():  # promotions: each a later record of its network, the curve so far
        staged.tell(Record(id=next_id, genome=[0.5], status="paused", fitness=curve[3], curve=curve[:4], rung=1, network=ident))
        next_id += 1
    for ident, curve in curves.items():
        staged.tell(Record(id=next_id, genome=[0.5], status="ok", fitness=curve[5], curve=curve, rung=2, network=ident))
        next_id += 1
    assert [len(m) for m in staged._by_epoch] == [len(m) for m in whole._by_epoch] == [3] * 6
    assert staged.bars(6) == whole.bars(6)


def test_with_stage_early_stopping_the_median_rule_stops_stages_and_promotion_goes_on():
    """Over eight small searches (whether one search's stages fall below the median depends on what its GA breeds;
    first rungs at a third of the epochs give the rule epochs to look at)."""
    from test_halving import DATA, PROBLEM, SPACE, config

    stopped = 0
    for seed in range(8):
        state = SearchState.fresh(seed, candidates=8)
        cfg = config(30, early_stopping=True, stage_early_stopping=True, early_stopping_warmup=1, seed=seed, min_budget=1 / 3)
        run_search(state, InProcessTransport(trainer_for(DATA), 1), SPACE, cfg, validation=(PROBLEM, DATA.y["val"]))
        stopped += sum(r.status == "stopped" for r in state.records)
        assert all(r.curve for r in state.records if r.status in ("ok", "paused", "stopped"))
        assert any(r.status == "ok" and r.network >= 0 for r in state.records)  # promotions still reach the whole training
    assert stopped
    rule = MedianRule(state.records)  # rebuilt as a resume does: each network once at every epoch it reached
    reached = {}
    for r in state.records:
        network = r.network if r.network >= 0 else r.id
        reached[network] = max(reached.get(network, 0), len(r.curve))
    assert [len(m) for m in rule._by_epoch] == [sum(n > e for n in reached.values()) for e in range(max(reached.values()))]
