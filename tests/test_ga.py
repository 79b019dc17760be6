import random

from hypothesis import given, settings
from hypothesis import strategies as st

from evolve.config.schema import SearchConfig
from evolve.search.ga import Individual, Operators, admit, breed_child, fitness_wvalues, random_genome


def population(values, genes=4, seed=0):
    rng = random.Random(seed)
    return [Individual.evaluated(random_genome(rng, genes), v, i) for i, v in enumerate(values)]


def breed(pop, rng, attempts=20, is_new=lambda genome: True, **params):
    """breed_child with the operators set up from search settings (the config's defaults, but ``params``)."""
    config = SearchConfig(**params)
    return breed_child(pop, Operators(config, rng), config.crossover_prob, is_new=lambda child, m, f: is_new(child), attempts=attempts)


def test_breeding_leaves_the_global_random_stream_alone():
    pop = population([0.1, 0.5, 0.9, 0.3])
    random.seed(123)
    expected_global = random.random()
    random.seed(123)
    breed(pop, random.Random(7), mutation_prob=0.5)
    assert random.random() == expected_global


def test_breeding_is_reproducible_and_bounded():
    pop = population([0.1, 0.5, 0.9, 0.3])
    a = breed(pop, random.Random(1))
    b = breed(pop, random.Random(1))
    assert a == b
    genome, parents, operators = a
    assert all(0.0 <= g <= 1.0 for g in genome)
    assert set(parents) <= {ind.ident for ind in pop}
    assert operators in ("crossover", "mutation", "crossover+mutation", "copy")


def test_tournament_prefers_fitter_parents():
    pop = population([0.0] * 9 + [1.0], seed=2)
    rng = random.Random(0)
    parents = [p for _ in range(300) for p in breed(pop, rng, tournament=3)[1]]
    assert parents.count(9) / len(parents) > 0.2  # uniform choice would give 0.1


def test_breeding_avoids_children_already_seen():
    pop = population([0.2, 0.4, 0.6])
    seen = set()
    rng = random.Random(3)
    coarse = lambda g: tuple(int(x * 3) for x in g)  # noqa: E731  - a small discrete space
    for _ in range(10):
        genome, _, _ = breed(pop, rng, mutation_prob=0.5, is_new=lambda g: coarse(g) not in seen)
        seen.add(coarse(genome))
    assert len(seen) >= 8


@settings(max_examples=50)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40), st.integers(2, 6))
def test_admit_is_elitist_and_bounded(values, capacity):
    pop = []
    for i, v in enumerate(values):
        admit(pop, Individual.evaluated([0.5], v, i), capacity)
        assert len(pop) == min(i + 1, capacity)
        assert max(ind.fitness.values[0] for ind in pop) == max(values[: i + 1])
    kept = sorted(ind.fitness.values[0] for ind in pop)
    assert kept == sorted(values)[-len(kept):]


def test_operators_name_what_changed_the_child():
    pop = population([0.2, 0.4, 0.6, 0.8], genes=6)
    rng = random.Random(0)
    only_mutation = {breed(pop, rng, crossover_prob=0.0, mutation_prob=1.0)[2] for _ in range(20)}
    assert only_mutation == {"mutation"}
    only_crossover = {breed(pop, rng, attempts=1, crossover_prob=1.0, mutation_prob=0.0)[2] for _ in range(20)}
    assert only_crossover <= {"crossover", "copy"} and "crossover" in only_crossover
    assert {breed(pop, rng, attempts=1, crossover_prob=0.0, mutation_prob=0.0)[2] for _ in range(5)} == {"copy"}


def deap_draws(rng):
    """DEAP's operators drawing from ``rng`` (they draw from their modules' name ``random``), the global stream untouched."""
    from deap.tools import crossover, mutation, selection

    class Pointed:
        def __enter__(self):
            self.saved = [m.random for m in (selection, crossover, mutation)]
            for m in (selection, crossover, mutation):
                m.random = rng

        def __exit__(self, *exc):
            for m, saved in zip((selection, crossover, mutation), self.saved):
                m.random = saved

    return Pointed()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 12), st.integers(1, 24), st.integers(1, 5), st.floats(0.0, 1.0), st.floats(0.0, 40.0),
       st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=12, max_size=12))
def test_the_operators_draw_and_breed_exactly_as_deaps(seed, size, genes, tournament, indpb, eta, values):
    """Operators are DEAP's selTournament, cxUniform (0.5) and mutPolynomialBounded (0, 1) written out: from the same rng
    state, the same parents, the same child (float for float, genes at the bounds included) and the rng left where DEAP leaves it."""
    from deap import tools

    rng = random.Random(seed)
    pop = [Individual.evaluated([rng.choice([0.0, 1.0, rng.random()]) for _ in range(genes)], values[i % 12], i) for i in range(size)]
    config = SearchConfig(tournament=tournament, mutation_prob=indpb, mutation_eta=eta)
    ours, theirs = random.Random(seed + 1), random.Random(seed + 1)
    ops = Operators(config, ours)
    mother, father = ops.select(pop, 2)
    child = ops.mate(mother, father)
    before = child[:]
    changed = ops.mutate(child)
    with deap_draws(theirs):
        deap_mother, deap_father = tools.selTournament(pop, 2, tournament)
        expected = list(deap_mother)
        tools.cxUniform(expected, list(deap_father), 0.5)
        after_crossover = expected[:]
        tools.mutPolynomialBounded(expected, eta, 0.0, 1.0, indpb)
    assert (mother, father) == (deap_mother, deap_father) and mother is deap_mother and father is deap_father
    assert before == after_crossover and child == expected and changed == (expected != after_crossover)
    assert ours.getstate() == theirs.getstate()


def test_a_child_is_what_the_operators_make_from_the_searchs_rng():
    pop = population([0.3, 0.9, 0.1, 0.5], genes=6, seed=4)
    config = SearchConfig(tournament=2, crossover_prob=1.0, mutation_prob=0.5, mutation_eta=8.0)
    child, parents, _ = breed(pop, random.Random(11), attempts=1, tournament=2, crossover_prob=1.0, mutation_prob=0.5)
    rng = random.Random(11)
    ops = Operators(config, rng)
    mother, father = ops.select(pop, 2)
    rng.random()  # the crossover's coin
    expected = ops.mate(mother, father)
    ops.mutate(expected)
    assert child == expected and parents == (mother.ident, father.ident)


@given(st.floats(allow_nan=False))
def test_fitness_wvalues_are_what_an_individual_holds(value):
    """The steady state turns a result away without making it an individual: on the same values admit compares."""
    assert fitness_wvalues(value) == Individual.evaluated([0.5], value, 0).fitness.wvalues
