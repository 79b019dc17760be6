import random

from hypothesis import given, settings
from hypothesis import strategies as st

from evolve.ga import GAParams, Individual, admit, breed_child, drawing_from, random_genome


def population(values, genes=4, seed=0):
    rng = random.Random(seed)
    return [Individual(random_genome(rng, genes), v, i) for i, v in enumerate(values)]


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
    a = breed_child(pop, random.Random(1), GAParams())
    b = breed_child(pop, random.Random(1), GAParams())
    assert a == b
    genome, parents, operators = a
    assert all(0.0 <= g <= 1.0 for g in genome)
    assert set(parents) <= {ind.ident for ind in pop}
    assert operators in ("crossover", "mutation", "crossover+mutation", "copy")


def test_tournament_prefers_fitter_parents():
    pop = population([0.0] * 9 + [1.0], seed=2)
    rng = random.Random(0)
    parents = [p for _ in range(300) for p in breed_child(pop, rng, GAParams(tournament=3))[1]]
    assert parents.count(9) / len(parents) > 0.2  # uniform choice would give 0.1


def test_breeding_avoids_children_already_seen():
    pop = population([0.2, 0.4, 0.6])
    seen = set()
    rng = random.Random(3)
    coarse = lambda g: tuple(int(x * 3) for x in g)  # noqa: E731  - a small discrete space
    for _ in range(10):
        genome, _, _ = breed_child(pop, rng, GAParams(mutation_prob=0.5), is_new=lambda g: coarse(g) not in seen)
        seen.add(coarse(genome))
    assert len(seen) >= 8


@settings(max_examples=50)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40), st.integers(2, 6))
def test_admit_is_elitist_and_bounded(values, capacity):
    pop = []
    for i, v in enumerate(values):
        admit(pop, Individual([0.5], v, i), capacity)
        assert len(pop) == min(i + 1, capacity)
        assert max(ind.fitness.values[0] for ind in pop) == max(values[: i + 1])
    kept = sorted(ind.fitness.values[0] for ind in pop)
    assert kept == sorted(values)[-len(kept):]


def test_operators_name_what_changed_the_child():
    pop = population([0.2, 0.4, 0.6, 0.8], genes=6)
    rng = random.Random(0)
    only_mutation = {breed_child(pop, rng, GAParams(crossover_prob=0.0, mutation_prob=1.0))[2] for _ in range(20)}
    assert only_mutation == {"mutation"}
    only_crossover = {breed_child(pop, rng, GAParams(crossover_prob=1.0, mutation_prob=0.0), attempts=1)[2] for _ in range(20)}
    assert only_crossover <= {"crossover", "copy"} and "crossover" in only_crossover
    assert {breed_child(pop, rng, GAParams(crossover_prob=0.0, mutation_prob=0.0), attempts=1)[2] for _ in range(5)} == {"copy"}


@settings(max_examples=60)
@given(st.integers(0, 2**32 - 1), st.integers(1, 24), st.integers(2, 12), st.sampled_from([0.0, 0.3, 1.0]), st.sampled_from([1.5, 8.0, 20]))
def test_the_inline_operators_draw_and_compute_exactly_what_deaps_do(seed, genes, size, indpb, eta):
    """breed_child's tournament, uniform crossover and bounded polynomial mutation against DEAP's own, bit for bit."""
    from deap import tools

    from evolve.ga import polynomial_mutation, tournament, uniform_crossover

    values = [0.5, 0.5] + [random.Random(seed + i).choice([0.1, 0.5, 0.9, random.Random(i).random()]) for i in range(size - 2)]
    pop = population(values, genes=genes, seed=seed)
    mine, deaps = random.Random(seed), random.Random(seed)
    with drawing_from(deaps):
        for t in (1, 2, 3, size):
            assert [tournament(pop, mine, t).ident for _ in range(2)] == [ind.ident for ind in tools.selTournament(pop, 2, t)]
        child = uniform_crossover(pop[0], pop[1], mine)
        a, b = list(pop[0]), list(pop[1])
        tools.cxUniform(a, b, 0.5)
        assert child == a
        changed = polynomial_mutation(child, mine, eta, indpb)
        before = a[:]
        tools.mutPolynomialBounded(a, eta, 0.0, 1.0, indpb)
        assert child == a and changed == (a != before)
    assert mine.getstate() == deaps.getstate()  # the same number of draws
