"""Successive halving in the search (search.promotion): stages to rungs, promotions that carry a network's training on,
and the networks that finish being the unbroken trainings bit for bit, through a stop and resume too.

The searches run in one process with evens' own trainer on a small made-up table, so what the worker does with a
paused training (keep it, carry it on, or train again from the start when it has none) is the real thing."""

import numpy as np
import pytest
from fakes import SimulatedTransport, search_config

from ensemble.problem import Classification
from ensemble.train import DeviceData, train_and_evaluate
from evolve.config.schema import config_from_dict
from evolve.engine.evaluations import FoldPlan
from evolve.engine.loop import run_search, task_seed
from evolve.engine.promotion import rung_epochs
from evolve.engine.state import SearchState
from evolve.errors import ConfigError
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo
from evolve.search.records import network_of
from evolve.search.space import GENE_NAMES
from evolve.search.space_config import parse_space
from evolve.transport.protocol import InProcessTransport
from evolve.transport.worker import trainer_for

PROBLEM = Classification(3)
TABLE = {"family": ["mlp"], "depth": {"low": 1, "high": 2}, "width": [8, 16], "activation": ["relu", "tanh"], "dropout": 0.0,
         "learning_rate": {"low": 1e-3, "high": 3e-2, "log": True}, "batch_size": [16, 32], "epochs": {"low": 9, "high": 18},
         "optimizer": ["adam", "sgd"], "weight_decay": 1e-5}
SPACE = parse_space(TABLE).for_sample_shape((6,))


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, 6)) * 1.2
    arrays = {}
    for split, n in (("train", 60), ("val", 30), ("test", 30)):
        y = rng.integers(0, 3, n)
        arrays[f"{split}/x"] = (centres[y] + rng.normal(size=(n, 6))).astype(np.float32)
        arrays[f"{split}/y"] = y
    return DeviceData.from_arrays(arrays, PROBLEM)


DATA = make_data()


def config(budget, **search):
    """A search of ``budget`` networks with successive halving (eta 3, rungs at a ninth and a third), async unless
    ``search`` says another mode."""
    return search_config(budget, **{"population": 4, "candidates": 8, "mode": "async", "checkpoint_seconds": 0, "promotion": True,
                                    "eta": 3, "min_budget": 1 / 9, "space": SPACE, **search})


def run(budget, state=None, **kwargs):
    state = state or SearchState.fresh(0, candidates=8)
    run_search(state, InProcessTransport(trainer_for(DATA), 1), SPACE, config(budget), validation=(PROBLEM, DATA.y["val"]), **kwargs)
    return state


def test_networks_train_in_stages_and_the_best_third_of_each_rung_go_on():
    state = run(18)
    first = [r for r in state.records if r.network < 0]
    stages = [r for r in state.records if r.network >= 0]
    assert len(first) == 18 and stages  # the budget counts networks; promotions come on top
    assert all(r.operators == "promotion" and r.parents[0] in state.by_id() for r in stages)
    for r in stages:  # a promotion carries on its network's stage before it: one rung further, the same genome
        before = state.by_id()[r.parents[0]]
        assert r.rung == before.rung + 1 and r.genome == before.genome and network_of(before) == r.network
        assert before.status == "paused"
    at = {rung: [r for r in state.records if r.rung == rung] for rung in range(3)}
    for r in stages:  # ASHA's rule when it was promoted (one worker: every record with a lower id was back by then)
        known = [k for k in at[r.rung - 1] if k.id < r.id]
        best = sorted(known, key=lambda k: (-k.fitness, k.metrics["val_loss"], network_of(k)))[: len(known) // 3]
        assert r.network in {network_of(k) for k in best}
    assert len(at[1]) < len(at[0]) and len(at[2]) < len(at[1])
    assert all(r.status == "paused" for r in at[0] + at[1])
    assert all(r.status == "ok" for r in at[2]) and at[2]
    epochs = {r.id: SPACE.candidate(r.genome)[1].epochs for r in state.records}
    for r in state.records:  # a stage trains from where its network paused to its rung's epochs
        done = rung_epochs(epochs[r.id], 3, 1 / 9)
        assert r.epochs_done == done[r.rung] - (done[r.rung - 1] if r.rung else 0)
    for r in stages:
        assert r.metrics["carried_on_from"] == rung_epochs(epochs[r.id], 3, 1 / 9)[r.rung - 1]  # one worker: it always holds it
    assert {m.id for m in state.hall_of_fame.members} <= {r.id for r in at[2]}  # only whole trainings are candidates


def _unbroken(record, search_seed=0):
    """The network of ``record``'s genome trained in one go with its network's seed."""
    network, training = SPACE.candidate(record.genome)
    return train_and_evaluate(network, training, DATA, task_seed(search_seed, network_of(record)), keep=lambda f, l: True)


def test_a_network_that_finishes_is_its_unbroken_training_bit_for_bit():
    state = run(12)
    finished = [r for r in state.records if r.rung == 2]
    assert finished
    members = {m.id: m for m in state.hall_of_fame.members}
    for r in finished:
        whole = _unbroken(r)
        assert r.fitness == whole.fitness and r.metrics["val_loss"] == whole.metrics["val_loss"]
        if r.id in members:
            assert np.array_equal(members[r.id].test_pred, whole.test_pred)
            for name, w in whole.weights.items():
                assert np.array_equal(members[r.id].weights[name], w)


def test_a_resume_rebuilds_the_rungs_and_trains_promotions_again_from_the_start_to_the_same_networks(tmp_path):
    whole = run(15)
    state = SearchState.fresh(0, candidates=8)
    stop = lambda: len(state.records) >= 11  # noqa: E731, just before network 10, paused, is promoted
    run(15, state, should_stop=stop)
    data = {"problem": PROBLEM.to_dict(), "sample_shape": [6], "x_dtype": "float32"}
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, RunInfo(config_from_dict({"search": {"evaluations": 15, "promotion": True}, "space": {}}),
                                         list(GENE_NAMES), data, DATA.y["val"], DATA.y["test"]))
    resumed, _ = checkpoint.load(path)
    assert [(r.rung, r.network) for r in resumed.records] == [(r.rung, r.network) for r in state.records]
    run(15, resumed)
    assert len([r for r in resumed.records if r.network < 0]) == 15
    gone = [r for r in resumed.records if r.id >= len(state.records) and r.network >= 0 and r.parents[0] < len(state.records)]
    assert gone and all(r.metrics["carried_on_from"] == 0 for r in gone)  # paused before the stop: gone, so trained again
    # the same search as the unbroken one: one worker, so the same networks, stages and results in the same order
    strip = lambda rs: [(r.id, tuple(r.genome), r.rung, r.network, r.status, r.fitness) for r in rs]  # noqa: E731
    assert strip(sorted(resumed.records, key=lambda r: r.id)) == strip(sorted(whole.records, key=lambda r: r.id))


@pytest.mark.parametrize("folds", [0, 3])
def test_a_promotion_goes_to_the_worker_that_holds_its_paused_training(folds):
    """Four workers of uneven speeds (on a virtual clock), each a trainer of its own with its own paused trainings: a
    promotion is sent to the worker that paused it and carries on there, while the budget still starts new networks
    elsewhere; only a promotion left when a worker has nothing else to do goes to another worker (which trains it again
    from the start, or from an earlier stage of that network it paused itself). With folds, each fold of a promotion goes to the worker that holds that fold. (Sent to whichever
    worker is free, about three in four would train again.)"""
    state = SearchState.fresh(0, candidates=8)
    plan = FoldPlan.of(folds, DATA.y["train"], DATA.y["test"], PROBLEM, seed=0) if folds else None
    transport = SimulatedTransport({1: 1.0, 2: 1.7, 3: 2.9, 4: 4.3}, evaluate={w: trainer_for(DATA) for w in range(1, 5)})
    run_search(state, transport, SPACE, config(30), validation=(PROBLEM, DATA.y["val"]), folds=plan, clock=transport.clock)
    stages = [r for r in state.records if r.network >= 0]
    carried = [r for r in stages if r.metrics["carried_on_from"] > 0]
    again = [r for r in stages if r.metrics["carried_on_from"] == 0]
    assert len(stages) >= 8 and len(again) <= 3, [(r.id, r.worker, r.metrics["carried_on_from"]) for r in stages]
    if not folds:  # each carried on from where a stage of its network stopped on the same worker (mostly the stage before; a
        reached = {}  # promotion that another worker trained again can come back to one that holds an earlier pause)
        for r in sorted(state.records, key=lambda r: r.finished):
            network = r.network if r.network >= 0 else r.id
            if r.network >= 0 and r.metrics["carried_on_from"] > 0:
                assert r.metrics["carried_on_from"] in reached.get((network, r.worker), ()), (r.id, r.worker, r.metrics)
            start = r.metrics["carried_on_from"] if r.network >= 0 else 0
            reached.setdefault((network, r.worker), set()).add(start + r.epochs_done)
        assert sum(r.worker == state.by_id()[r.parents[0]].worker for r in carried) >= 0.8 * len(carried)


def test_promotion_needs_a_strategy_that_supports_it(monkeypatch):
    from evolve.search import registry

    monkeypatch.setattr(registry, "_STRATEGIES", dict(registry._loaded()))

    @registry.register
    class Unstaged:  # a strategy that cannot promote
        name = mode = "unstaged-test"
        capabilities = registry.Capabilities()
        create = classmethod(lambda cls, context: cls())

    problem = registry.check("unstaged-test", config_from_dict({"search": {"promotion": True}}).search)
    assert problem == 'search.promotion works with search.mode async, generational, nsga2, optuna, not "unstaged-test"'
    for mode in ("async", "generational", "nsga2", "optuna"):
        assert config_from_dict({"search": {"mode": mode, "promotion": True}}).search.promotion
    with pytest.raises(ConfigError, match="ensemble.refit"):
        config_from_dict({"search": {"promotion": True}, "data": {"folds": 5}, "ensemble": {"refit": True}})
    assert config_from_dict({"search": {"promotion": True, "mode": "optuna"}}).search.promotion


def test_the_report_counts_networks_and_says_what_each_rung_did():
    from evolve.app.presentation.report import halving_facts
    from evolve.app.presentation.report_text import format_halving
    from evolve.search.records import networks
    from evolve.search.tally import Tally

    state = run(18)
    tally = Tally(3)
    for r in state.records:
        tally.tell(r)
    facts = halving_facts(tally, config(18).search)
    assert networks(state.records) == 18 and facts.stages == len(state.records) > 18
    rungs = facts.rungs
    assert [r.stages for r in rungs] == [sum(r.rung == i for r in state.records) for i in range(3)]
    assert [r.promoted for r in rungs[:2]] == [rungs[1].stages, rungs[2].stages]
    assert facts.carried_on == rungs[1].stages + rungs[2].stages and facts.trained_again == 0  # one worker holds them all
    line = format_halving(facts)
    assert line.startswith(f"successive halving (eta 3): rung 0: 18, {rungs[0].promoted} promoted; rung 1: {rungs[1].stages},")
    assert f"rung 2: {rungs[2].stages} whole trainings" in line


def test_model_breeding_learns_the_rung_of_each_result_and_scores_children_at_the_highest():
    from evolve.search.surrogate import Surrogate

    state = SearchState.fresh(0, candidates=8)
    run_search(state, InProcessTransport(trainer_for(DATA), 1), SPACE, config(24, breeding="model"), validation=(PROBLEM, DATA.y["val"]))
    surrogate = Surrogate.from_state(state.rng, state.records, state.strategy["surrogate"], rungs=True)
    assert state.strategy["surrogate"]["rows"] > 0 and surrogate.ready
    learned = [r for r in state.records if r.status in ("ok", "paused")]
    assert len(surrogate) == len(learned) and {row[1][-1] for row in surrogate.rows} == {float(r.rung) for r in learned}
    assert surrogate.top == max(r.rung for r in learned[: surrogate.fitted_rows])


@pytest.mark.e2e
@pytest.mark.slow
def test_a_job_killed_with_paused_trainings_and_resumed_on_other_worker_counts_finishes_with_the_same_networks(tmp_path, small_config):
    """SIGKILL to the whole job (every worker dies with the trainings it held paused), a resume on another number of
    workers: the budget of networks is spent, every promotion carries on a paused stage of its own network, and every
    network that finished is its unbroken training bit for bit, whether its promotions found their paused training
    or trained it again from the start."""
    import h5py
    from test_elastic import _kill_after, _start

    from conftest import launch, evens_cmd, ROOT

    out = str(tmp_path / "run")
    budget = 24
    settings = ["search.promotion=true", f"search.evaluations={budget}", "space.family=['mlp']", "space.width=[4, 8]",
                "space.depth={low = 1, high = 2}", "space.epochs={low = 9, high = 12}", "search.population=4", "train.threads=1",
                "ensemble.candidates=32"]
    args = [a for s in settings for a in ("--set", s)]
    first = _start(4, ["run", small_config, "--out", out, *args])
    killed = _kill_after(first, out, 8)
    assert len(killed.records) < budget + 6
    last = launch(3, evens_cmd() + ["run", "--resume", out], timeout=240, cwd=ROOT)
    assert last.returncode == 0, last.stderr
    final, info = checkpoint.load(f"{out}/checkpoint.h5")
    records = final.by_id()
    assert sum(r.network < 0 for r in final.records) == budget and final.pending == []
    assert all(records[r.id] == r for r in killed.records)  # what was recorded stays as it was
    for r in final.records:
        if r.network >= 0:
            before = records[r.parents[0]]
            assert before.status == "paused" and network_of(before) == r.network and before.rung == r.rung - 1 and before.genome == r.genome
    finished = [r for r in final.records if r.status == "ok"]
    assert finished and all(r.rung == 2 for r in finished)
    with h5py.File(info.config.data.path) as f:
        arrays = {f"{s}/{k}": f[f"{s}/{k}"][()] for s in ("train", "val", "test") for k in ("x", "y")}
    data = DeviceData.from_arrays(arrays, PROBLEM)
    space = info.space()
    for r in finished:
        network, training = space.candidate(r.genome)
        whole = train_and_evaluate(network, training, data, task_seed(0, network_of(r)))
        assert (r.fitness, r.metrics["val_loss"]) == (whole.fitness, whole.metrics["val_loss"]), r.id


def test_status_counts_networks_and_lists_the_rungs(tmp_path):
    from evolve.app.commands.status import format_status, status

    state = run(15)
    config = config_from_dict({"search": {"evaluations": 15, "promotion": True, "eta": 3, "min_budget": 1 / 9}, "space": TABLE})
    info = RunInfo(config, list(SPACE.names), {"problem": PROBLEM.to_dict(), "sample_shape": [6], "x_dtype": "float32",
                                              "sizes": {"train": 60, "val": 30, "test": 30}}, DATA.y["val"], DATA.y["test"])
    checkpoint.save(str(tmp_path / "checkpoint.h5"), state, info)
    facts = status(str(tmp_path))
    text = format_status(facts)
    assert facts["evaluations"] == 15 and "evaluations: 15 of 15 (100 %); finished" in text
    assert "successive halving (eta 3): rung 0: 15," in text and "paused" not in text.split("not ok:")[1]


def test_the_csv_has_each_stages_rung_network_and_budget():
    import csv
    import io

    from evolve.app.presentation.csv_table import to_csv

    state = run(12)
    rows = list(csv.DictReader(io.StringIO(to_csv(state, SPACE))))
    assert len(rows) == len(state.records)
    for row, r in zip(rows, state.records):
        epochs = SPACE.candidate(r.genome)[1].epochs
        assert (int(row["rung"]), int(row["network"])) == (r.rung, r.network)
        assert int(row["budget"]) == rung_epochs(epochs, 3, 1 / 9)[r.rung]  # the epochs trained when the stage ended


def _generations(records):
    """The records in id order cut into generations (a barrier strategy: its children, then its promotions rung by rung),
    each a dict rung -> the stages recorded at that rung."""
    out, seen_promotion = [], True
    for r in sorted(records, key=lambda r: r.id):
        if r.network < 0 and seen_promotion:
            out.append({})
        seen_promotion = r.network >= 0
        out[-1].setdefault(r.rung, []).append(r)
    return out


def _staged_search(mode, workers, budget=12, **search):
    state = SearchState.fresh(0, candidates=8)
    cfg = config(budget, mode=mode, **search)
    if workers == 1:
        transport, clock = InProcessTransport(trainer_for(DATA), 1), {}
    else:
        transport = SimulatedTransport({w: 1.0 + 0.7 * w for w in range(1, workers + 1)}, evaluate={w: trainer_for(DATA) for w in range(1, workers + 1)})
        clock = {"clock": transport.clock}
    run_search(state, transport, SPACE, cfg, validation=(PROBLEM, DATA.y["val"]), **clock)
    return state


@pytest.mark.parametrize("mode", ["generational", "nsga2"])
def test_a_barrier_strategy_promotes_the_best_of_each_generations_rung_and_the_same_on_any_number_of_workers(mode):
    """Successive halving within each generation: once a generation's stages at a rung are all in, the best
    max(1, n // eta) of them go on (by fitness; by Pareto rank, then crowding, in nsga2), and nothing else is promoted.
    The barrier decides, so one worker and four of uneven speeds train the same stages to the same results."""
    from evolve.search.ga import nsga2_survivors, pareto_individual
    from evolve.search.records import best_first

    state = _staged_search(mode, 1, second_objective="params")
    generations = _generations(state.records)
    assert len(generations) == 3 and [len(g[0]) for g in generations] == [4, 4, 4]
    for g in generations:
        for rung in (1, 2):
            below = [r for r in g.get(rung - 1, []) if r.status == "paused"]
            promoted = {r.parents[0] for r in g.get(rung, [])}
            if not below:
                assert not promoted
                continue
            k = max(1, len(below) // 3)
            if mode == "nsga2":
                inds = [pareto_individual(r.genome, r.fitness, r.metrics["params"], r.id) for r in sorted(below, key=lambda r: r.id)]
                best = {ind.ident for ind in nsga2_survivors(inds, k)}
            else:
                best = {r.id for r in sorted(below, key=best_first)[:k]}
            assert promoted == best
    assert any(r.rung == 2 and r.status == "ok" for r in state.records)
    if mode == "nsga2":  # the front holds whole trainings only
        by_id = state.by_id()
        assert state.strategy["front"] and all(by_id[i].status == "ok" for i in state.strategy["front"])
    many = _staged_search(mode, 4, second_objective="params")
    strip = lambda rs: [(r.id, tuple(r.genome), r.rung, r.network, r.status, r.fitness) for r in sorted(rs, key=lambda r: r.id)]  # noqa: E731
    assert strip(many.records) == strip(state.records)
    carried = [r for r in many.records if r.network >= 0]
    assert sum(r.metrics["carried_on_from"] > 0 for r in carried) >= len(carried) // 2  # most go to the worker holding them


@pytest.mark.parametrize("mode, stop_at", [("generational", 5), ("generational", 6), ("nsga2", 9)])
def test_a_barrier_strategy_with_promotion_resumes_to_the_search_it_would_have_been(tmp_path, mode, stop_at):
    """Stopped with a generation's promotions decided (5: the first rung's barrier passed; 6: a promotion out) or its
    next rung under way, saved and resumed: the same stages and results as the unbroken search."""
    whole = _staged_search(mode, 1, second_objective="params")
    state = SearchState.fresh(0, candidates=8)
    cfg = config(12, mode=mode, second_objective="params")
    run_search(state, InProcessTransport(trainer_for(DATA), 1), SPACE, cfg, validation=(PROBLEM, DATA.y["val"]),
               should_stop=lambda: len(state.records) >= stop_at)
    data = {"problem": PROBLEM.to_dict(), "sample_shape": [6], "x_dtype": "float32"}
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, RunInfo(config_from_dict({"search": {"evaluations": 12, "promotion": True, "mode": mode}, "space": {}}),
                                         list(GENE_NAMES), data, DATA.y["val"], DATA.y["test"]))
    resumed, _ = checkpoint.load(path)
    run_search(resumed, InProcessTransport(trainer_for(DATA), 1), SPACE, cfg, validation=(PROBLEM, DATA.y["val"]))
    strip = lambda rs: [(r.id, tuple(r.genome), r.rung, r.network, r.status, r.fitness) for r in sorted(rs, key=lambda r: r.id)]  # noqa: E731
    assert strip(resumed.records) == strip(whole.records)
