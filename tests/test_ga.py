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


def test_a_brood_breeds_as_breed_child_does():
    """breed_batch (the async search's broods) against breed_child, the reference, over many children:
    who wins the tournaments, how often crossover and mutation change a child, and how far a mutation moves a gene."""
    import numpy as np

    from evolve.ga import breed_batch

    pop = population([0.3, 0.9, 0.1, 0.9, 0.5, 0.0], genes=8, seed=3)  # (a tie for the fittest)
    params = GAParams(tournament=3, crossover_prob=0.6, mutation_prob=0.25, mutation_eta=8.0)
    n = 40_000
    rng = random.Random(0)
    scalar = [breed_child(pop, rng, params, attempts=1) for _ in range(n)]
    brood = breed_batch(np.array([ind for ind in pop]), np.array([ind.value for ind in pop]), np.random.default_rng(0), params, n)
    ids = [ind.ident for ind in pop]

    def shares(values) -> np.ndarray:
        return np.bincount(np.asarray(values), minlength=len(pop)) / len(values)

    assert np.abs(shares([p[1][0] for p in scalar]) - shares([ids[m] for m in brood.mothers])).max() < 0.01
    assert np.abs(shares([p[1][1] for p in scalar]) - shares([ids[f] for f in brood.fathers])).max() < 0.01
    ops = [p[2] for p in scalar]
    for name, batch in (("crossover", brood.crossed), ("mutation", brood.mutated)):
        assert abs(sum(name in o for o in ops) / n - batch.mean()) < 0.01, name
    assert brood.genomes.min() >= 0.0 and brood.genomes.max() <= 1.0
    mothers = np.array([ind for ind in pop])[brood.mothers]
    uncrossed = ~brood.crossed
    batch_moves = np.abs(brood.genomes[uncrossed] - mothers[uncrossed])
    by_id = {ind.ident: ind for ind in pop}
    scalar_moves = np.array([np.abs(np.array(g) - np.array(by_id[p[0]])) for g, p, o in scalar if "crossover" not in o])
    for moves in (batch_moves, scalar_moves):
        assert 0.23 < (moves > 0).mean() < 0.27  # mutation_prob of the genes move ...
    moved_batch, moved_scalar = batch_moves[batch_moves > 0], scalar_moves[scalar_moves > 0]
    assert abs(moved_batch.mean() - moved_scalar.mean()) < 0.003  # ... as far (eta 9 instead of 8: 0.0065 nearer)
    assert abs(np.median(moved_batch) - np.median(moved_scalar)) < 0.003
