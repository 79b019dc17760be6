"""Model-based breeding: the surrogate, children chosen by it, determinism, and what a resume rebuilds."""
import random

import numpy as np
import pytest
from fakes import PROBLEM, TEST_Y, VAL_Y, SimulatedTransport, VirtualClock, landscape, run_on, search_config, trace

from evolve.config.schema import SearchConfig, config_from_dict
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.errors import ConfigError
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo
from evolve.search.records import Record
from evolve.search.space import GENE_NAMES
from evolve.search.space_config import parse_space
from evolve.search.registry import Context, make_strategy
from evolve.search.surrogate import Surrogate
from evolve.transport.protocol import InProcessTransport

SPACE = parse_space({}).for_sample_shape((1, 8, 8))
MODEL = SearchConfig(population=6, breeding="model", brood=4)


def smooth(genome) -> float:
    return float(genome[0] + 0.5 * genome[3] - (genome[5] - 0.3) ** 2)


def told(surrogate: Surrogate, n: int, rng: random.Random, first_id: int = 0) -> list[Record]:
    records = []
    for i in range(first_id, first_id + n):
        genome = [rng.random() for _ in range(len(SPACE))]
        records.append(Record(id=i, genome=genome, status="ok", fitness=smooth(genome)))
        surrogate.tell(records[-1])
    return records


def spearman(a, b) -> float:
    ranks = lambda v: np.argsort(np.argsort(v))  # noqa: E731
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def test_the_surrogate_ranks_networks_it_has_not_seen():
    rng = random.Random(0)
    surrogate = Surrogate(rng)
    told(surrogate, 300, rng)
    assert surrogate.due() and surrogate.refit_if_due() and not surrogate.due()
    fresh = [[rng.random() for _ in range(len(SPACE))] for _ in range(300)]
    assert spearman(surrogate.score(fresh), [smooth(g) for g in fresh]) > 0.8


def test_failed_trainings_teach_nothing_and_fits_come_as_results_grow():
    surrogate = Surrogate(random.Random(0))
    surrogate.tell(Record(id=0, genome=[0.5] * len(SPACE), status="error", fitness=float("-inf")))
    surrogate.tell(Record(id=1, genome=[0.5] * len(SPACE), status="stopped", fitness=0.2))  # stopped early: what it reached
    assert len(surrogate) == 1 and not surrogate.due()
    told(surrogate, 9, random.Random(1), first_id=2)
    assert surrogate.refit_if_due() and surrogate.to_state()["rows"] == 10
    told(surrogate, 2, random.Random(2), first_id=11)
    assert not surrogate.refit_if_due()  # 12 < 1.25 x 10
    told(surrogate, 1, random.Random(3), first_id=13)
    assert surrogate.refit_if_due()


def test_each_child_is_the_most_promising_new_one_of_its_brood():
    rng = random.Random(3)
    records = told(Surrogate(rng), 40, rng)
    strategy = make_strategy("async", Context(SPACE, MODEL, random.Random(7), [], [], {}))
    for record in records:
        strategy.tell(record)
    strategy.surrogate.fit()
    population = strategy.population
    saved = strategy.rng.getstate()
    bred = strategy.brood(population, 3 * MODEL.brood)
    strategy.rng.setstate(saved)
    children = strategy.ranked_children(population, 3)
    scores = strategy.surrogate.score(bred.genomes)
    for child, start in zip(children, range(0, len(bred), MODEL.brood)):
        best = max(range(start, start + MODEL.brood), key=lambda i: (scores[i], -i))
        parents = (population[bred.mothers[best]].ident, population[bred.fathers[best]].ident)
        assert child.genome == bred.genomes[best].tolist() and child.parents == parents
    # with blind breeding the same population gives the operators' first draws instead
    assert [c.genome for c in children] != bred.genomes[:3].tolist()


def run(workers: int, budget: int, mode: str, seed: int = 0, **search):
    state = SearchState.fresh(seed, candidates=3)
    run_on(workers, state, SPACE, search_config(budget, 6, 3, seed, checkpoint_seconds=0, mode=mode, **{"breeding": "model", "brood": 4, **search}))
    return state


def test_generational_model_breeding_is_the_same_with_1_2_or_5_workers():
    runs = [run(w, 42, "generational") for w in (1, 2, 5)]
    assert trace(runs[0]) == trace(runs[1]) == trace(runs[2])
    assert runs[0].strategy["surrogate"]["rows"] >= 24  # fitted at the barriers, from every result by then
    assert trace(runs[0]) != trace(run(1, 42, "generational", breeding="blind"))


def save_and_load(state, path):
    data = {"problem": PROBLEM.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"}
    config = config_from_dict({"search": {"evaluations": 30, "breeding": "model"}, "space": {}})
    checkpoint.save(path, state, RunInfo(config, list(GENE_NAMES), data, VAL_Y, TEST_Y))
    return checkpoint.load(path)[0]


def test_generational_resume_with_model_breeding_computes_what_an_unbroken_run_does(tmp_path):
    whole = run(1, 36, "generational")
    state = SearchState.fresh(0, candidates=3)
    stop = lambda: len(state.records) >= 20  # noqa: E731, mid-generation
    transport = SimulatedTransport({1: 1.0, 2: 1.4}, clock=VirtualClock())
    config = search_config(36, 6, 3, 0, checkpoint_seconds=0, mode="generational", breeding="model", brood=4)
    run_search(state, transport, SPACE, config, should_stop=stop, clock=transport.clock)
    resumed = save_and_load(state, str(tmp_path / "c.h5"))
    assert resumed.strategy["surrogate"] == state.strategy["surrogate"] and resumed.strategy["surrogate"]["rows"] > 0
    run_search(resumed, InProcessTransport(landscape, 3), SPACE, config)
    assert trace(resumed) == trace(whole)


def test_a_resume_fits_the_same_surrogate_from_the_records(tmp_path):
    state = run(3, 40, "async")
    rows = state.strategy["surrogate"]["rows"]
    assert 8 <= rows <= len(state.records)
    resumed = save_and_load(state, str(tmp_path / "c.h5"))
    rebuilt = make_strategy("async", Context(SPACE, MODEL, resumed.rng, resumed.records, resumed.pending, resumed.strategy)).surrogate
    again = make_strategy("async", Context(SPACE, MODEL, random.Random(99), state.records, [], state.strategy)).surrogate
    probe = [[random.Random(i).random() for _ in range(len(SPACE))] for i in range(20)]
    assert np.array_equal(rebuilt.score(probe), again.score(probe))
    assert rebuilt.to_state() == state.strategy["surrogate"]
    with pytest.raises(ValueError, match="fitted on"):
        make_strategy("async", Context(SPACE, MODEL, random.Random(0), state.records[:5], [], state.strategy))


def test_model_breeding_is_a_choice_of_async_and_generational():
    with pytest.raises(ConfigError, match="nsga2"):
        config_from_dict({"search": {"mode": "nsga2", "breeding": "model"}})
    with pytest.raises(ConfigError, match="search.breeding must be one of blind, model"):
        config_from_dict({"search": {"breeding": "bayes"}})
    with pytest.raises(ConfigError, match="search.brood must be between 1 and 256"):
        config_from_dict({"search": {"breeding": "model", "brood": 0}})


def test_a_resume_fits_the_model_the_search_had_though_results_came_out_of_order():
    """Results told out of id order (9 still out when the model was fitted): the rebuilt model is the original."""
    rng = random.Random(5)
    records = told(Surrogate(random.Random(0)), 12, rng)
    arrival = records[:9] + records[10:] + [records[9]]
    original = Surrogate(random.Random(11))
    for record in arrival[:11]:
        original.tell(record)
    original.fit()
    original.tell(arrival[11])  # arrives after the fit
    rebuilt = Surrogate.from_state(random.Random(0), arrival, original.to_state())
    probe = [[random.Random(i).random() for _ in range(len(SPACE))] for i in range(30)]
    assert rebuilt.to_state() == original.to_state() and np.array_equal(rebuilt.score(probe), original.score(probe))


@pytest.mark.parametrize("rungs", [False, True])
def test_it_keeps_only_the_latest_results_and_its_memory_makes_the_same_model(monkeypatch, rungs):
    """A fit learns from the latest ROWS results by id, so no more are kept (results told out of order too); the
    memory (the last fit's rows and the latest results) makes the model again, and both go on alike."""
    import evolve.search.surrogate as surrogate_module

    monkeypatch.setattr(surrogate_module, "ROWS", 10)
    rng = random.Random(3)
    records = told(Surrogate(random.Random(0)), 40, rng)
    for r in records:
        r.rung = r.id % 3
    order = records[:20] + records[25:33] + records[20:25] + records[33:]  # 20-24 arrive late
    original = Surrogate(random.Random(7), rungs)
    for record in order[:30]:
        original.tell(record)
    original.fit()
    for record in order[30:36]:
        original.tell(record)
    assert len(original) == 36 and len(original.rows) == 10
    assert sorted(i for i, _, _ in original.rows) == sorted(r.id for r in order[:36])[-10:]
    assert [i for i, _, _ in original.learned] == sorted(r.id for r in order[:30])[-10:]
    memory = {k: v.copy() for k, v in original.memory().items()}
    restored = Surrogate.restored(random.Random(7), memory, original.to_state(), rungs)
    rebuilt = Surrogate.from_state(random.Random(7), order[:36], original.to_state(), rungs)
    probe = [[random.Random(i).random() for _ in range(len(SPACE))] for i in range(30)]
    for other in (restored, rebuilt):
        assert other.to_state() == original.to_state() and len(other) == 36 and other.top == original.top
        assert np.array_equal(other.score(probe), original.score(probe))
    for model in (original, restored, rebuilt):  # the next fit learns from the same rows
        for record in order[36:]:
            model.tell(record)
        model.fit(seed=5)
    assert np.array_equal(restored.score(probe), original.score(probe)) and np.array_equal(rebuilt.score(probe), original.score(probe))
