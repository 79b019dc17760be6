"""Early stopping by the median rule, and time limits: on the worker, on the master, in the record."""
import math
import statistics
from dataclasses import asdict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import blob_splits
from simulate import landscape
from ensemble.problem import Classification
from ensemble.specs import NetworkSpec, TrainSpec
from ensemble.train import DeviceData, Watch, train_and_evaluate
from evolve.early_stop import MedianRule, RunningMedian
from evolve.ga import GAParams
from evolve.master import SearchSettings, SearchState, run_search
from evolve.protocol import InProcessTransport, Task
from evolve.records import Record
from evolve.space import parse_space
from evolve.worker import serve, trainer_for

SPACE = parse_space({}).for_sample_shape((1, 8, 8))


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=60))
def test_running_median_is_the_median(values):
    m = RunningMedian()
    for i, v in enumerate(values):
        m.add(v)
        assert m.median() == pytest.approx(statistics.median(values[: i + 1]), rel=1e-12, abs=1e-9)


def record(ident, curve):
    return Record(ident, [0.5], (-1, -1), "ok", curve[-1], {}, 1.0, len(curve), 1, 0.0, 0.0, curve=curve)


def test_bars_need_peers_and_ignore_nan():
    rule = MedianRule([record(i, [0.1 * i, 0.2 * i]) for i in range(4)], min_peers=5)
    assert all(math.isnan(b) for b in rule.bars(3))
    rule.tell(record(4, [0.4, math.nan, 0.9]))
    bars = rule.bars(3)
    assert bars[0] == pytest.approx(0.2) and math.isnan(bars[1]) and math.isnan(bars[2])  # epoch 2 has 4 finite values


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


def test_a_timeout_is_recorded_and_the_worker_goes_on():
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
    return SearchSettings(budget, GAParams(population=6), 3, 0, checkpoint_seconds=0, mode=mode, early_stopping=early, warmup=2)


def test_the_master_stops_networks_below_the_median_and_keeps_them_out():
    state = SearchState.fresh(0, candidates=3)
    run_search(state, InProcessTransport(landscape, 2), SPACE, settings(80))
    stopped = [r for r in state.records if r.status == "stopped"]
    assert stopped, "nothing was stopped"
    assert all(r.epochs_done >= 2 and len(r.curve) == r.epochs_done for r in stopped)
    assert not {r.id for r in stopped} & (set(state.population) | set(state.hall_of_fame.ids))
    baseline = SearchState.fresh(0, candidates=3)
    run_search(baseline, InProcessTransport(landscape, 2), SPACE, settings(80, early=False))
    best = lambda s: max(r.fitness for r in s.records if r.status == "ok")  # noqa: E731
    assert best(state) >= best(baseline) - 0.02  # it still finds good networks
    assert sum(r.epochs_done for r in state.records) < sum(r.epochs_done for r in baseline.records)


def test_generational_search_never_stops_early():
    seen = []

    def spy(task):
        seen.append(task.watch)
        return landscape(task)

    state = SearchState.fresh(0, candidates=3)
    run_search(state, InProcessTransport(spy, 2), SPACE, settings(40, mode="generational"))
    assert all("stop_below" not in w for w in seen) and not any(r.status == "stopped" for r in state.records)
