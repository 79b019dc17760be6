"""Search strategies: steady-state and generational, lineage, and what survives a stop and resume."""
import numpy as np
import pytest
from fakes import PROBLEM, TEST_Y, VAL_Y, SimulatedTransport, VirtualClock, landscape, run_on, search_config

from evolve.config.schema import SearchConfig, config_from_dict
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo
from evolve.search.space import GENE_NAMES
from evolve.search.space_config import parse_space
from evolve.search.registry import Context, make_strategy
from evolve.transport.protocol import InProcessTransport

SPACE = parse_space({}).for_sample_shape((1, 8, 8))


def settings(budget, mode="generational", population=6):
    return search_config(budget, population, 3, 0, checkpoint_seconds=0, mode=mode)


def search(workers: int, budget: int, mode="generational", seed=0):
    state = SearchState.fresh(seed, candidates=3)
    return state, run_on(workers, state, SPACE, settings(budget, mode))


def trace(state):
    """What the search computed, independent of timing: every individual, by id."""
    return [(r.id, tuple(r.genome), r.parents, r.operators, r.fitness) for r in sorted(state.records, key=lambda r: r.id)]


@pytest.mark.parametrize("mode", ["generational", "nsga2"])
def test_generational_search_is_the_same_with_1_2_or_5_workers(mode):
    runs = [search(w, 40, mode) for w in (1, 2, 5)]
    traces = [trace(state) for state, _ in runs]
    assert traces[0] == traces[1] == traces[2]
    assert runs[0][0].strategy == runs[1][0].strategy == runs[2][0].strategy  # same population, same generation
    assert runs[0][0].strategy["generation"] == 40 // 6
    if mode == "nsga2":  # and the same Pareto front, from a population bred on two objectives
        assert runs[0][0].strategy["front"] and sum(r.operators != "random" for r in runs[0][0].records) >= 25


def test_generations_wait_for_each_other_and_breed_from_the_last_one():
    state, transport = search(5, 36)
    sent_at = {tid: t for t, _, tid in transport.sends}
    back_at = {tid: t for t, _, tid in transport.results}
    gens = [list(range(g * 6, g * 6 + 6)) for g in range(6)]
    for this, after in zip(gens, gens[1:]):
        assert min(sent_at[i] for i in after) >= max(back_at[i] for i in this)  # the barrier
    records = state.by_id()
    assert all(records[i].operators == "random" and records[i].parents == (-1, -1) for i in gens[0])
    for previous, this in zip(gens, gens[1:]):
        window = set().union(*gens[: gens.index(previous) + 1])
        assert all(set(records[i].parents) <= window for i in this)  # parents come from generations already complete


def test_generational_keeps_the_best_of_parents_and_children():
    state, _ = search(1, 30)
    by_fitness = sorted(state.records, key=lambda r: (-r.fitness, r.id))
    assert state.population == [r.id for r in by_fitness[:6]]  # (mu + lambda) with all of the past kept in the running


@pytest.mark.parametrize("mode", ["async", "generational", "nsga2"])
def test_lineage_is_complete(mode):
    state, _ = search(3, 40, mode)
    records = state.by_id()
    for r in state.records:
        if r.operators == "random":
            assert r.parents == (-1, -1)
        else:
            assert r.operators in ("crossover", "mutation", "crossover+mutation", "copy")
            assert all(p in records and p < r.id for p in r.parents)
    assert sum(r.operators != "random" for r in state.records) >= 25


@pytest.mark.parametrize("mode", ["async", "generational", "nsga2"])
def test_a_stop_and_resume_in_the_middle_marks_redone_individuals(tmp_path, mode):
    state = SearchState.fresh(0, candidates=3)
    clock = VirtualClock()
    stop = lambda: len(state.records) >= 9  # noqa: E731
    run_search(state, SimulatedTransport({1: 1.0, 2: 1.3, 3: 1.7}, clock=clock), SPACE, settings(30, mode), should_stop=stop, clock=clock)
    pending = {p.id for p in state.pending}
    assert pending and len(state.records) == 9
    data = {"problem": PROBLEM.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"}
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, RunInfo(config_from_dict({"search": {"evaluations": 30}, "space": {}}), list(GENE_NAMES), data, VAL_Y, TEST_Y))
    resumed, _ = checkpoint.load(path)
    assert resumed.strategy == state.strategy and [p.operators for p in resumed.pending] == [p.operators for p in state.pending]
    run_search(resumed, SimulatedTransport({1: 1.0, 2: 1.0}, clock=clock), SPACE, settings(30, mode), clock=clock)
    assert sorted(r.id for r in resumed.records) == list(range(30))
    assert all(r.operators.endswith("+redo") == (r.id in pending) for r in resumed.records)


def test_generational_resume_computes_what_an_unbroken_run_does(tmp_path):
    whole, _ = search(1, 30)
    state = SearchState.fresh(0, candidates=3)
    stop = lambda: len(state.records) >= 14  # noqa: E731, mid-generation
    transport = SimulatedTransport({1: 1.0, 2: 1.4}, clock=VirtualClock())
    run_search(state, transport, SPACE, settings(30), should_stop=stop, clock=transport.clock)
    data = {"problem": PROBLEM.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"}
    path = str(tmp_path / "c.h5")
    checkpoint.save(path, state, RunInfo(config_from_dict({"search": {"evaluations": 30}, "space": {}}), list(GENE_NAMES), data, VAL_Y, TEST_Y))
    resumed, _ = checkpoint.load(path)
    run_search(resumed, InProcessTransport(landscape, 3), SPACE, settings(30))
    strip = lambda t: [(i, g, p, o.removesuffix("+redo"), f) for i, g, p, o, f in t]  # noqa: E731
    assert strip(trace(resumed)) == strip(trace(whole))


def test_a_strategy_refuses_another_modes_state():
    with pytest.raises(ValueError, match="strategy is 'async'"):
        make_strategy("generational", Context(SPACE, SearchConfig(), np.random.default_rng(0), [], [], {"mode": "async", "population": []}))
    with pytest.raises(ValueError, match="unknown search mode"):
        make_strategy("bayes", Context(SPACE, SearchConfig(), np.random.default_rng(0), [], [], {}))


def test_async_breeds_from_the_population_as_it_stands():
    """Every child is bred from the population as it is when the child is asked for."""
    from evolve.search.strategy import SteadyState

    state = SearchState.fresh(0, candidates=3)
    changes, asked = [], []
    real_tell, real_ask = SteadyState.tell, SteadyState.ask

    def tell(self, record):
        before = [ind.ident for ind in self.population]
        real_tell(self, record)
        changes.append(before != [ind.ident for ind in self.population])

    def ask(self):
        proposal = real_ask(self)
        asked.append((len(changes), [ind.ident for ind in self.population], proposal))
        return proposal

    SteadyState.tell, SteadyState.ask = tell, ask
    try:
        run_search(state, InProcessTransport(landscape, 3), SPACE, settings(300, mode="async"))
    finally:
        SteadyState.tell, SteadyState.ask = real_tell, real_ask
    assert sum(changes) >= 5 and not all(changes)  # the population moved, then settled
    bred = [(told, pop, p) for told, pop, p in asked if p.operators != "random"]
    assert len(bred) > 250
    assert all(set(p.parents) <= set(pop) for _, pop, p in bred)  # parents from the population at the time of asking
    keys = [p.key for _, _, p in asked]
    assert len(set(keys)) >= 0.95 * len(keys)  # duplicates skipped
    assert all(p.key == SPACE.key(p.genome) for _, _, p in asked)


def test_async_search_is_fixed_by_its_seed():
    runs = [search(3, 120, "async", seed=s) for s in (4, 4, 5)]
    assert trace(runs[0][0]) == trace(runs[1][0]) != trace(runs[2][0])


@pytest.mark.parametrize("mode", ["async", "generational", "nsga2"])
def test_a_network_that_crashed_is_never_proposed_again_though_the_rng_replays_its_draw(mode):
    """A resume restores the rng of the last checkpoint, so it draws again what it drew after it: a
    network that crashed since (recorded as crashed by key) must not go out again, random or bred."""
    import random

    from evolve.search.records import Record
    from evolve.search.strategy import candidate_key

    params = settings(60, mode, population=4).search
    rng_state = random.Random(5).getstate()
    first = make_strategy(mode, Context(SPACE, params, _rng(rng_state), [], [], {}))
    drawn = [first.ask() for _ in range(4)]  # generation 0 (or the first random ones)
    crashed = Record(id=0, genome=drawn[0].genome, status="crashed", fitness=float("-inf"), message="in flight when 2 jobs ended")
    again = make_strategy(mode, Context(SPACE, params, _rng(rng_state), [crashed], [], {}))
    keys = [again.ask().key for _ in range(4)]
    assert candidate_key(SPACE, drawn[0].genome) not in keys


def _rng(state):
    import random

    rng = random.Random()
    rng.setstate(state)
    return rng


@pytest.mark.parametrize("mode", ["async", "generational"])
def test_the_ga_compares_networks_by_fitness_alone(mode):
    """Among networks of equal fitness the validation loss decides nothing in the GA (the hall of fame and the report
    break such ties by it; the GA does not, docs/benchmarks.md): the same results with other losses breed the same
    children and keep the same population."""
    import random

    from evolve.search.records import Record

    def drive(losses):
        strategy = make_strategy(mode, Context(SPACE, SearchConfig(population=4), random.Random(3), [], [], {}))
        asked, out = [], []
        while len(asked) < 30:
            proposal = strategy.ask()
            if proposal is None or len(out) >= 3:  # a generation's barrier, or a few out: results come back, oldest first
                ident, genome = out.pop(0)
                fitness = 0.9 if genome[0] < 0.5 else 0.8  # two values: ties everywhere
                strategy.tell(Record(id=ident, genome=genome, parents=(-1, -1), status="ok", fitness=fitness,
                                     metrics={"val_loss": losses[ident]}, seconds=1.0, epochs_done=1, worker=1, started=0.0,
                                     finished=0.0, operators="random"))
            if proposal is not None:
                out.append((len(asked), list(proposal.genome)))
                asked.append(tuple(proposal.genome))
        return asked, strategy.to_state()["population"]

    rng = random.Random(0)
    losses = [rng.random() for _ in range(40)]
    first, population = drive(losses)
    assert len(set(first)) == 30 and len(population) == 4
    assert drive(losses[::-1]) == (first, population)
    assert drive([0.5] * 40) == (first, population)


def _async_driven(told: int, seed: int = 3):
    """An async strategy (population 4) told ``told`` results of a two-valued landscape, and its records."""
    import random

    from evolve.search.records import Record

    strategy = make_strategy("async", Context(SPACE, SearchConfig(population=4), random.Random(seed), [], [], {}))
    records = []
    for ident in range(told):
        proposal = strategy.ask()
        record = Record(id=ident, genome=proposal.genome, parents=proposal.parents, status="ok", fitness=0.9 if proposal.genome[0] < 0.5 else 0.8,
                        seconds=1.0, epochs_done=1, worker=1, started=0.0, finished=0.0, operators=proposal.operators)
        strategy.tell(record)
        records.append(record)
    return strategy, records


def test_children_come_from_a_brood_kept_while_the_population_stands():
    """Broods are bred from the population as it stands and kept until it changes: fewer broods than children once it
    has converged, a new one (of the smallest size) after each change, and no child whose network was proposed before
    unless a whole brood's worth were."""
    from evolve.search import strategy as module

    strategy, _ = _async_driven(40)
    strategy.forget_brood()  # as after a change of the population
    bred = []
    real = module._Breeder.brood
    module._Breeder.brood = lambda self, population, count, seed=None: bred.append(count) or real(self, population, count, seed)
    try:
        children = [strategy.ask() for _ in range(60)]  # nothing told: the population stands
    finally:
        module._Breeder.brood = real
    assert bred[0] == module.MIN_BROOD and bred == sorted(bred) and sum(bred) < 20 * 60 and len(bred) < 12
    assert len({c.key for c in children}) == 60 and all(c.operators != "random" for c in children)
    before = len(bred)
    strategy.forget_brood()
    strategy.rank_key = lambda ind: (-ind.value,)  # the worst now wins every tournament
    module._Breeder.brood = lambda self, population, count, seed=None: bred.append(count) or real(self, population, count, seed)
    try:
        child = strategy.ask()
    finally:
        module._Breeder.brood = real
    assert bred[before:] == [module.MIN_BROOD]
    worst = min(strategy.population, key=lambda ind: ind.value).value
    assert any(ind.value == worst and ind.ident in child.parents for ind in strategy.population)


@pytest.mark.parametrize("history", [True, False])
def test_a_checkpoint_in_the_middle_of_a_brood_resumes_with_the_children_the_unbroken_search_takes(history):
    """The state names the kept brood (its seed, size and children taken): a strategy made from it, with the records or
    from its memory alone, hands out the unbroken strategy's next children."""
    import json
    import random

    from evolve.search.records import Pending

    strategy, records = _async_driven(30)
    out = [strategy.ask() for _ in range(5)]  # into a brood; out when the checkpoint is taken
    pending = [Pending(id=30 + k, genome=p.genome, parents=p.parents, operators=p.operators) for k, p in enumerate(out)]
    state = json.loads(json.dumps(strategy.to_state()))
    assert "brood" in state
    copy = random.Random()
    copy.setstate(strategy.rng.getstate())
    if history:
        context = Context(SPACE, SearchConfig(population=4), copy, records, pending, state)
    else:
        memory = {name: np.asarray(array) for name, array in strategy.memory().items()}
        context = Context(SPACE, SearchConfig(population=4), copy, [], pending, state, memory=memory)
    resumed = make_strategy("async", context)
    assert [resumed.ask().genome for _ in range(40)] == [strategy.ask().genome for _ in range(40)]


def test_a_brood_bred_for_the_surrogate_leaves_the_kept_brood_as_the_state_names_it():
    """Model breeding's broods (ranked by the surrogate) are bred apart: the state still names the kept brood, and a
    strategy made from it holds the very same children."""
    import json
    import random

    strategy, records = _async_driven(30)
    strategy.ask()  # a brood kept
    kept = strategy._brood.genomes.copy()
    strategy.brood(strategy.population, 16)  # as ranked_children breeds
    state = json.loads(json.dumps(strategy.to_state()))
    resumed = make_strategy("async", Context(SPACE, SearchConfig(population=4), random.Random(0), records, [], state))
    assert np.array_equal(resumed._brood.genomes, kept) and resumed._taken == strategy._taken


@pytest.mark.parametrize("named", [["12", 10**9, 0], ["x", 8, 0], [5, 8, 9], [5], "brood", [-1, 8, 0]])
def test_a_brood_the_state_names_wrongly_is_bred_anew(named):
    import random

    strategy, records = _async_driven(30)
    state = {**strategy.to_state(), "brood": named}
    resumed = make_strategy("async", Context(SPACE, SearchConfig(population=4), random.Random(0), records, [], state))
    assert resumed._brood is None and resumed.ask().operators != "random"


def test_a_kept_brood_s_children_keep_their_own_parents_and_keys_whatever_the_population_becomes():
    """A child taken from a brood is its brood's: its parents are the members it was bred from and its key is what its
    genome decodes to, even where the population changed since without the brood being dropped (a safety net: the
    strategies drop it on every change)."""
    from evolve.search.ga import Individual

    strategy, _ = _async_driven(30)
    strategy.forget_brood()
    strategy._brood_size = 128  # one brood for every child below
    strategy.ask()
    brood = strategy._brood
    bred_from = {ind.ident for ind in strategy.population}
    for k, ind in enumerate(list(strategy.population)):  # every member replaced behind the brood's back
        strategy.population[k] = Individual.evaluated([1.0 - g for g in ind], ind.value, 1000 + k)
    children = [strategy.ask() for _ in range(6)]
    assert strategy._brood is brood
    assert all(c.key == SPACE.key(c.genome) for c in children)
    assert all(set(c.parents) <= bred_from for c in children)
