import random

from hypothesis import given, settings
from hypothesis import strategies as st

from evolve.config.schema import SearchConfig
from evolve.search.ga import Individual, admit, breed_child, drawing_from, make_toolbox, random_genome


def population(values, genes=4, seed=0):
    rng = random.Random(seed)
    return [Individual.evaluated(random_genome(rng, genes), v, i) for i, v in enumerate(values)]


def breed(pop, rng, attempts=20, is_new=lambda genome: True, **params):
    """breed_child with DEAP's operators set up from search settings (the config's defaults, but ``params``)."""
    config = SearchConfig(**params)
    return breed_child(pop, make_toolbox(config), rng, config.crossover_prob, is_new=is_new, attempts=attempts)


def test_drawing_from_makes_deap_draw_from_the_given_rng_and_leaves_global_random_alone():
    from deap import tools

    pop = population([0.1, 0.5, 0.9, 0.3])
    random.seed(123)
    expected_global = random.random()
    random.seed(123)
    with drawing_from(random.Random(7)):
        picked = [ind.ident for ind in tools.selRandom(pop, 5)]
    mirror = random.Random(7)
    assert picked == [mirror.choice(pop).ident for _ in range(5)]
    assert random.random() == expected_global  # the global stream did not move
    assert tools.selection.random is random  # and DEAP draws from it again afterwards


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


def test_a_child_is_what_deaps_operators_make_from_the_searchs_rng():
    """breed_child runs DEAP's selTournament, cxUniform and mutPolynomialBounded, drawing from the rng it is given."""
    from deap import tools

    pop = population([0.3, 0.9, 0.1, 0.5], genes=6, seed=4)
    config = SearchConfig(tournament=2, crossover_prob=1.0, mutation_prob=0.5, mutation_eta=8.0)
    child, parents, _ = breed(pop, random.Random(11), attempts=1, tournament=2, crossover_prob=1.0, mutation_prob=0.5)
    rng = random.Random(11)
    with drawing_from(rng):
        mother, father = tools.selTournament(pop, 2, 2)
        rng.random()  # the crossover's coin
        expected = list(mother)
        tools.cxUniform(expected, list(father), 0.5)
        tools.mutPolynomialBounded(expected, config.mutation_eta, 0.0, 1.0, config.mutation_prob)
    assert child == expected and parents == (mother.ident, father.ident)
