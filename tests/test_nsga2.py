"""search.mode = "nsga2": two objectives (fitness up, parameters or latency down), the Pareto front, and
what a worker measures for it."""
import json
import math
import os
import random

import numpy as np
import pytest
from conftest import ROOT, evens_cmd, launch, tiny_search, write_blobs
from fakes import PROBLEM, TEST_Y, VAL_Y, SimulatedTransport, VirtualClock, landscape, search_config

from evolve.app.presentation.report import summarize
from evolve.app.presentation.report_text import format_summary
from evolve.app.run.reselect import select_for_run
from evolve.config.schema import ConfigError, SearchConfig, config_from_dict, load_config
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo
from evolve.search.pareto import ParetoFront
from evolve.search.records import Pending, Record
from evolve.search.registry import Context, make_strategy
from evolve.search.space_config import parse_space
from evolve.transport.protocol import InProcessTransport

SPACE = parse_space({}).for_sample_shape((1, 8, 8))
GENES = 5  # ZDT1 on the genome's first five genes (floats in [0, 1])


def zdt1(genome):
    """ZDT1 as (fitness to maximise, cost to minimise): fitness 1 - f1, cost f2. Its front: cost = 1 - sqrt(1 - fitness)."""
    x = genome[:GENES]
    g = 1 + 9 * sum(x[1:]) / (GENES - 1)
    return 1 - x[0], g * (1 - math.sqrt(x[0] / g))


def make_record(ident, genome, fitness, cost, parents=(-1, -1), operators="random", status="ok"):
    ok = status == "ok"
    return Record(id=ident, genome=list(genome), parents=tuple(parents), status=status, fitness=fitness if ok else -math.inf, metrics={"params": cost} if ok else {}, seconds=1.0, epochs_done=1, worker=1, started=0.0, finished=0.0, operators=operators)


def drive(strategy, budget, evaluate=zdt1, shuffle=None, fail_every=0, records=None):
    """Ask until the strategy waits (or the budget is spent), evaluate, tell (in a shuffled order if given)."""
    records = [] if records is None else records
    while len(records) < budget:
        batch = []
        while len(records) + len(batch) < budget and (p := strategy.ask()) is not None:
            batch.append((len(records) + len(batch), p))
        assert batch, "the strategy waits with nothing out"
        if shuffle is not None:
            shuffle.shuffle(batch)
        for ident, p in batch:
            status = "error" if fail_every and ident % fail_every == 0 else "ok"
            record = make_record(ident, p.genome, *evaluate(p.genome), p.parents, p.operators, status)
            strategy.tell(record)
            records.append(record)
    return records


def hypervolume(points, ref=(1.0, 1.0)):
    """Area dominated by ``points`` (both coordinates minimised) up to ``ref``."""
    area, best = 0.0, ref[1]
    for a, b in sorted(p for p in points if p[0] < ref[0] and p[1] < ref[1]):
        if b < best:
            area += (ref[0] - a) * (best - b)
            best = b
    return area


def as_minimised(strategy):
    return [(1 - f, c) for _, f, c in strategy.front.points()]


ZDT1_HV = 2 / 3  # the true front's hypervolume up to (1, 1)


def nsga2(seed=0, population=20):
    return make_strategy("nsga2", Context(SPACE, SearchConfig(population=population), random.Random(seed), [], [], {}))


def test_nsga2_finds_the_zdt1_front_and_beats_random_proposals():
    strategy = nsga2()
    drive(strategy, 1000)
    front = as_minimised(strategy)
    assert hypervolume(front) >= 0.9 * ZDT1_HV  # 0.97 to 0.98 of it over seeds 0-5
    grid = np.linspace(0, 1, 4001)
    true = np.stack([grid, 1 - np.sqrt(grid)], axis=1)
    # Inside the reference box (the extreme point of highest fitness may sit above it, non-dominated but far):
    distance = [float(np.min(np.hypot(*(true - p).T))) for p in front if p[1] <= 1.0]
    assert len(distance) >= 0.9 * len(front)
    assert np.mean(distance) < 0.02 and max(distance) < 0.15  # generational distance (0.002 to 0.009 over seeds 0-7), worst point

    rng = random.Random(0)  # the same budget of random proposals
    best_random = ParetoFront()
    for i in range(1000):
        best_random.add(i, *zdt1([rng.random() for _ in range(GENES)]))
    random_hv = hypervolume([(1 - f, c) for _, f, c in best_random.points()])
    assert hypervolume(front) > 5 * random_hv  # random proposals reach 0.08 to 0.1 of the optimum here


def test_the_front_is_the_non_dominated_set_of_every_ok_record():
    strategy = nsga2(population=8)
    records = drive(strategy, 120, fail_every=7)
    ok = [r for r in records if r.status == "ok"]
    dominated = lambda r, s: s.fitness >= r.fitness and s.metrics["params"] <= r.metrics["params"] and (  # noqa: E731
        s.fitness, s.metrics["params"]) != (r.fitness, r.metrics["params"])
    same = lambda r, s: (s.fitness, s.metrics["params"]) == (r.fitness, r.metrics["params"])  # noqa: E731
    brute = sorted(r.id for r in ok if not any(dominated(r, s) or (same(r, s) and s.id < r.id) for s in ok))  # equal points: the first
    assert sorted(strategy.to_state()["front"]) == brute
    assert all(r.status == "ok" for r in records if r.id in set(strategy.to_state()["population"]))  # failures never enter


def test_pareto_front_is_incremental_and_does_not_depend_on_arrival_order():
    rng = random.Random(3)
    points = [(i, rng.choice([0.1, 0.2, 0.3, 0.5]), rng.choice([1.0, 2.0, 3.0, 5.0])) for i in range(60)]  # many ties
    fronts = []
    for order in range(5):
        shuffled = list(points)
        random.Random(order).shuffle(shuffled)
        front = ParetoFront()
        for p in shuffled:
            front.add(*p)
        fronts.append(front.points())
    assert all(f == fronts[0] for f in fronts)
    ids = {i for i, _, _ in fronts[0]}
    for i, f, c in points:  # every point is on the front, or dominated (weakly, by an earlier id) by a member
        assert i in ids or any((g >= f and d <= c) and ((g, d) != (f, c) or j < i) for j, g, d in fronts[0])
    costs = [c for _, _, c in fronts[0]]
    fitnesses = [f for _, f, _ in fronts[0]]
    assert costs == sorted(set(costs)) and fitnesses == sorted(set(fitnesses))  # both strictly rising


def test_nsga2_proposals_do_not_depend_on_the_order_results_arrive_in():
    runs = []
    for order in (None, random.Random(1), random.Random(2)):
        strategy = nsga2(population=10)
        records = drive(strategy, 95, shuffle=order)  # ends mid-generation
        runs.append((sorted((r.id, tuple(r.genome), r.parents, r.operators) for r in records), strategy.to_state()))
    assert runs[0] == runs[1] == runs[2]


def test_to_state_and_make_strategy_carry_on_with_the_same_proposals():
    params = SearchConfig(population=10)
    rng = random.Random(5)
    strategy = make_strategy("nsga2", Context(SPACE, params, rng, [], [], {}))
    records = drive(strategy, 30)
    out = [(len(records) + k, strategy.ask()) for k in range(4)]  # handed out, not yet back: a resume redoes them
    state = json.loads(json.dumps(strategy.to_state()))  # plain JSON, as the checkpoint stores it
    copy = random.Random()
    copy.setstate(rng.getstate())
    pending = [Pending(id=i, genome=p.genome, parents=p.parents, operators=p.operators) for i, p in out]
    resumed = make_strategy("nsga2", Context(SPACE, params, copy, records, pending, state))
    assert resumed.front.points() == strategy.front.points() and resumed.to_state() == strategy.to_state()
    traces = []
    for s, recs in ((strategy, list(records)), (resumed, list(records))):
        for i, p in out:
            r = make_record(i, p.genome, *zdt1(p.genome), p.parents, p.operators)
            s.tell(r)
            recs.append(r)
        drive(s, 80, records=recs)
        traces.append(([(r.id, tuple(r.genome), r.parents, r.operators) for r in recs], s.to_state()))
    assert traces[0] == traces[1]
    with pytest.raises(ValueError, match="second objective is 'params', not 'latency'"):
        make_strategy("nsga2", Context(SPACE, params, random.Random(0), records, [], state, "latency"))


def search(workers, budget, seed=0, objective="params", evaluate=landscape, stop_after=None):
    state = SearchState.fresh(seed, candidates=3)
    stop = (lambda: len(state.records) >= stop_after) if stop_after else None
    settings = search_config(budget, 6, 3, seed, checkpoint_seconds=0, mode="nsga2", second_objective=objective)
    clock = VirtualClock()
    transport = SimulatedTransport({w: 1.0 + 0.37 * (w % 3) + 0.11 * w for w in range(1, workers + 1)}, evaluate, clock)
    run_search(state, transport, SPACE, settings, clock=clock, should_stop=stop or (lambda: False))
    return state, settings


def run_info(budget, objective="params"):
    config = config_from_dict({"search": {"evaluations": budget, "mode": "nsga2", "second_objective": objective},
                               "ensemble": {"size": 2, "candidates": 3}, "space": {}})
    data = {"problem": PROBLEM.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32", "sizes": {"train": 10, "val": 4, "test": 6}}
    return RunInfo(config, list(SPACE.names), data, VAL_Y, TEST_Y, wall_seconds=1.0, sessions=1)


def test_a_resumed_run_has_the_same_front_and_computes_what_an_unbroken_run_does(tmp_path):
    whole, settings = search(3, 36)
    state, _ = search(3, 36, stop_after=15)  # mid-generation
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, run_info(36))
    resumed, _ = checkpoint.load(path)
    assert resumed.strategy == state.strategy and resumed.strategy["front"]
    assert [r.metrics for r in resumed.records] == [r.metrics for r in state.records]  # params came through the segments
    run_search(resumed, InProcessTransport(landscape, 2), SPACE, settings)
    strip = lambda s: sorted((r.id, tuple(r.genome), r.parents, r.operators.removesuffix("+redo")) for r in s.records)  # noqa: E731
    assert strip(resumed) == strip(whole) and resumed.strategy == whole.strategy


def test_latency_is_asked_for_only_when_it_is_the_objective():
    watches = {}

    def evaluate(task):
        watches.setdefault(task.watch.get("measure_latency", False), 0)
        watches[task.watch.get("measure_latency", False)] += 1
        ev = landscape(task)
        ev.metrics["latency_us"] = ev.metrics.pop("params") / 1e4
        return ev

    state, _ = search(2, 18, objective="latency", evaluate=evaluate)
    assert watches == {True: 18}
    assert state.strategy["objective"] == "latency" and state.strategy["front"]
    watches.clear()
    search(2, 6, objective="params", evaluate=evaluate)
    assert watches == {False: 6}


def test_report_lists_the_front_sorted_by_fitness():
    state, _ = search(2, 30)
    info = run_info(30)
    state.selection = select_for_run(state.hall_of_fame, info)
    summary = summarize(state, info, "runs/x")
    front = summary.to_dict()["pareto"]  # as the JSON holds it
    assert [m["fitness"] for m in front] == sorted((m["fitness"] for m in front), reverse=True)
    assert {m["id"] for m in front} == set(state.strategy["front"])
    for m in front:
        assert set(m) == {"id", "fitness", "params", "network", "genome"} and " depth " in m["network"]
        assert not any(o["fitness"] >= m["fitness"] and o["params"] <= m["params"] and o is not m for o in front)
    json.dumps(summary.to_dict())  # plain JSON
    text = format_summary(summary)
    assert f"pareto front ({len(front)} networks: val accuracy against parameters)" in text
    assert f"#{front[0]['id']}" in text.split("pareto front")[1]
    other = summarize(*finished_async_run())
    assert other.pareto is None and "pareto" not in other.to_dict()  # other modes have no front


def finished_async_run():
    state = SearchState.fresh(0, 3)
    run_search(state, InProcessTransport(landscape, 2), SPACE, search_config(8, 4, 3, 0))
    info = run_info(8)
    info.config = info.config.with_overrides(["search.mode='async'"])
    return state, info


def test_config_takes_nsga2_and_refuses_an_unknown_second_objective():
    cfg = load_config(None, ["search.mode=nsga2", "search.second_objective=latency"])
    assert (cfg.search.mode, cfg.search.second_objective) == ("nsga2", "latency")
    assert config_from_dict({}).search.second_objective == "params"
    with pytest.raises(ConfigError, match="search.second_objective must be one of params, latency, got 'flops'"):
        load_config(None, ["search.second_objective=flops"])
    with pytest.raises(ConfigError, match="search.second_objective must be a string"):
        config_from_dict({"search": {"second_objective": 3}})


@pytest.mark.timing
def test_a_worker_reports_parameters_and_on_request_latency():
    """Wall-clock timing: the measured latency (the median of 5 timed forward passes) is positive and under
    0.1 s a sample (under a microsecond here)."""
    torch = pytest.importorskip("torch")
    from test_models_train import data_for

    from ensemble.models import build_network
    from ensemble.specs import NetworkSpec, TrainSpec
    from ensemble.train import Watch, train_and_evaluate

    data = data_for((10,))
    spec = NetworkSpec("mlp", 2, 16)
    plain = train_and_evaluate(spec, TrainSpec(1e-2, 32, 1), data, seed=0)
    expected = sum(p.numel() for p in build_network(spec, (10,), 3).parameters() if p.requires_grad)
    assert plain.metrics["params"] == float(expected) and "latency_us" not in plain.metrics
    timed = train_and_evaluate(spec, TrainSpec(1e-2, 32, 1), data, seed=0, watch=Watch(measure_latency=True))
    assert 0 < timed.metrics["latency_us"] < 1e5 and timed.metrics["params"] == float(expected)
    assert timed.fitness == plain.fitness  # timing changes nothing it scores
    assert isinstance(torch.get_num_threads(), int)


@pytest.mark.e2e
def test_nsga2_run_end_to_end(tmp_path):
    data = write_blobs(tmp_path / "data.h5", sample_shape=(1, 6, 6), n=(90, 30, 30), classes=3)
    cfg = tmp_path / "small.toml"
    cfg.write_text(f'[data]\npath = "{data}"\n[search]\nevaluations = 10\ncheckpoint_seconds = 0.0\n')
    out = str(tmp_path / "run")
    proc = launch(2, evens_cmd() + ["run", str(cfg), "--out", out, *tiny_search(), "--set", "search.mode=nsga2",
                                    "--set", "search.second_objective=latency", "--set", "ensemble.size=3"], timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "pareto front (" in proc.stdout and "us/sample" in proc.stdout
    with open(os.path.join(out, "summary.json")) as f:
        front = json.load(f)["pareto"]
    assert front and all(m["latency_us"] > 0 and 0 <= m["fitness"] <= 1 for m in front)
    for m in front:
        assert not any(o["fitness"] >= m["fitness"] and o["latency_us"] <= m["latency_us"] and o is not m for o in front)
    again = launch(2, evens_cmd() + ["run", "--resume", out, "--set", "search.second_objective=params", "--set", "search.evaluations=12"],
                   timeout=60, cwd=ROOT)
    assert again.returncode != 0 and "search.second_objective is 'params', but the run's is 'latency'" in again.stderr
    assert "Traceback" not in again.stderr
