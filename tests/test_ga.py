import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evolve.config.schema import SearchConfig
from evolve.search import ga
from evolve.search.ga import Individual, RungFitness, admit, fitness_wvalues, random_genome
from evolve.search.population import Population


def population(values, genes=4, seed=0):
    rng = random.Random(seed)
    return [Individual.evaluated(random_genome(rng, genes), v, i) for i, v in enumerate(values)]


def brood(pop, count, seed=0, tournament=None, distinct=False, **params):
    """``count`` children of ``pop`` (ga.breed, by fitness) with the config's search settings but ``params``."""
    genomes = np.asarray(pop, dtype=np.float64)
    standing = ga.ranks([ind.fitness.wvalues for ind in pop])
    gen = ga.reseed(np.random.Generator(np.random.PCG64(0)), seed)
    return ga.breed(genomes, standing, gen, SearchConfig(**params), count, tournament, distinct)


def test_a_brood_follows_from_its_seed_and_leaves_the_global_random_stream_alone():
    pop = population([0.1, 0.5, 0.9, 0.3])
    random.seed(123)
    expected_global = random.random()
    random.seed(123)
    a, b, c = brood(pop, 50, seed=7), brood(pop, 50, seed=7), brood(pop, 50, seed=8)
    assert random.random() == expected_global
    assert np.array_equal(a.genomes, b.genomes) and np.array_equal(a.mothers, b.mothers) and not np.array_equal(a.genomes, c.genomes)
    assert ((0.0 <= a.genomes) & (a.genomes <= 1.0)).all() and set(a.mothers.tolist() + a.fathers.tolist()) <= set(range(4))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**128 - 1), st.integers(2, 12), st.integers(1, 24), st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 40.0))
def test_a_child_is_its_parents_genes_crossed_and_mutated_as_the_brood_says(seed, size, genes, cxpb, indpb, eta):
    rng = random.Random(seed)
    pop = [Individual.evaluated([rng.choice([0.0, 1.0, 0.5, rng.random()]) for _ in range(genes)], rng.random(), i) for i in range(size)]
    bred = brood(pop, 16, seed, crossover_prob=cxpb, mutation_prob=indpb, mutation_eta=eta)
    genomes = np.asarray(pop)
    mother, father = genomes[bred.mothers], genomes[bred.fathers]
    crossed = np.where(bred.from_father, father, mother)
    assert not (bred.from_father & (father == mother)).any()  # "the father's" only where it differs from the mother's
    assert np.array_equal(bred.genomes[~bred.mutated], crossed[~bred.mutated]) and (bred.genomes[bred.mutated] != crossed[bred.mutated]).all()
    names = ["crossover+mutation" if c and m else "crossover" if c else "mutation" if m else "copy"
             for c, m in zip(bred.from_father.any(axis=1), bred.mutated.any(axis=1))]
    assert bred.operators() == names


def deap_draws(draws):
    """DEAP's mutation drawing ``draws`` in order (it draws from its module's name ``random``)."""
    from deap.tools import mutation

    class Pointed:
        def __enter__(self):
            self.saved = mutation.random
            mutation.random = type("Draws", (), {"random": staticmethod(iter(draws).__next__)})

        def __exit__(self, *exc):
            mutation.random = self.saved

    return Pointed()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([0.0, 1.0, 0.5]), st.floats(0.0, 1.0)), min_size=1, max_size=30),
       st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=30, max_size=30), st.floats(0.0, 40.0))
def test_the_polynomial_mutation_is_deaps(x, rand, eta):
    """Each gene mutated with its draw ``rand`` gives what DEAP's mutPolynomialBounded (bounds 0 and 1) gives, to the
    last bits (numpy's power and C's may part by an ulp, so a value an ulp from a bound may land on it), in [0, 1]."""
    from deap import tools

    rand = rand[: len(x)]
    expected = list(x)
    with deap_draws([d for r in rand for d in (0.0, r)]):  # each gene: DEAP's "is it mutated" draw (always), then its own
        tools.mutPolynomialBounded(expected, eta, 0.0, 1.0, 1.0)
    ours = ga.polynomial_mutation(np.asarray(x), np.asarray(rand), eta)
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=1e-15)  # an ulp of a power, after cancellation
    assert ((0.0 <= ours) & (ours <= 1.0)).all()


def test_tournaments_crossover_and_mutation_draw_at_deaps_rates():
    """40,000 children of ten members with distinct fitness, parents that differ in every gene: the frequencies of
    selTournament's winners (the k-th of 10 wins a tournament of 3 with probability ((k+1)^3 - k^3) / 1000), of
    cxUniform's coin per gene and of mutPolynomialBounded's per gene, each within 5 standard errors."""
    n, genes = 40_000, 6
    pop = [Individual.evaluated([float(i % 2)] * genes, v, i) for i, v in enumerate([0.3, 0.1, 0.7, 0.2, 0.9, 0.5, 0.0, 0.8, 0.4, 0.6])]
    bred = brood(pop, n, seed=3, tournament=3, crossover_prob=0.7, mutation_prob=0.1, mutation_eta=8.0)
    order = np.argsort([ind.value for ind in pop])  # lowest first
    wins = np.bincount(np.concatenate([bred.mothers, bred.fathers]), minlength=10)[order] / (2 * n)
    expected = np.array([((k + 1) ** 3 - k ** 3) / 1000 for k in range(10)])
    assert (np.abs(wins - expected) <= 5 * np.sqrt(expected * (1 - expected) / (2 * n))).all()

    def near(observed, p, trials):
        return abs(observed - p) <= 5 * np.sqrt(p * (1 - p) / trials)

    unlike = np.asarray(pop)[bred.mothers] != np.asarray(pop)[bred.fathers]  # a crossover's coin shows only where they differ
    assert near(bred.from_father[unlike].mean(), 0.7 * 0.5, unlike.sum())
    mutated = bred.mutated.mean()  # a gene at a bound mutated toward it stays: the change shows a little below the rate
    assert 0.1 * 0.45 <= mutated <= 0.1 + 5 * np.sqrt(0.1 * 0.9 / bred.mutated.size)
    assert near(bred.mutated[:, 0].mean(), bred.mutated[:, -1].mean(), n)  # every gene alike


def test_ties_go_to_the_first_drawn_and_a_distinct_binary_tournament_always_takes_the_better_of_two():
    pop = population([0.5, 0.5, 0.5, 0.5])
    bred = brood(pop, 20_000, seed=1, tournament=3)
    shares = np.bincount(np.concatenate([bred.mothers, bred.fathers]), minlength=4) / 40_000
    assert np.abs(shares - 0.25).max() < 0.02  # among equals the first drawn: each as likely
    two = population([0.2, 0.9])
    assert (brood(two, 500, seed=2, tournament=2, distinct=True).mothers == 1).all()
    assert (brood(two, 500, seed=2, tournament=2).mothers == 0).any()  # with replacement the worse one can meet itself


def test_ranks_order_members_and_share_ties():
    assert ga.ranks([(0.5,), (0.1,), (0.5,), (0.9,)]).tolist() == [1, 0, 1, 2]
    assert ga.ranks([(1.0, 0.2), (0.0, 0.9), (1.0, 0.1)]).tolist() == [2, 0, 1]  # a rung first, then fitness


def test_a_population_of_one_cannot_breed():
    with pytest.raises(ValueError, match="at least two"):
        brood(population([0.5]), 4)


@settings(max_examples=50)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40), st.integers(2, 6))
def test_admit_is_elitist_and_bounded(values, capacity):
    pop = Population(genes=1)
    for i, v in enumerate(values):
        admit(pop, Individual.evaluated([0.5], v, i), capacity)
        assert len(pop) == min(i + 1, capacity)
        assert max(ind.fitness.values[0] for ind in pop) == max(values[: i + 1])
    kept = sorted(ind.fitness.values[0] for ind in pop)
    assert kept == sorted(values)[-len(kept):]


@given(st.floats(allow_nan=False))
def test_fitness_wvalues_are_what_an_individual_holds(value):
    """The steady state turns a result away without making it an individual: on the same values admit compares."""
    assert fitness_wvalues(value) == Individual.evaluated([0.5], value, 0).fitness.wvalues


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0.1, 0.5, 0.9, float("-inf")]), st.integers(0, 7)), min_size=1, max_size=60),
       st.booleans())
def test_a_population_s_arrays_follow_its_members(changes, rungs):
    """Appends and replacements in any order: the genome rows, the standing (equal for equal fitness, higher for
    better, as DEAP compares wvalues) and the worst member (lowest fitness, latest id) are those of the members."""
    pop, ident = Population(genes=3), 0
    for rung, value, at in changes:
        ind = Individual.evaluated([value if value > 0 else 0.0, rung / 2, at / 7], value, ident, rung if rungs else None)
        ident += 1
        if at < len(pop) and at % 2:
            pop[at] = ind
        else:
            pop.append(ind)
        members = list(pop)
        assert pop.genomes.tolist() == [list(m) for m in members]
        standing = pop.standing()
        assert [tuple(np.atleast_1d(row)) for row in standing] == [m.fitness.wvalues for m in members]
        assert members[pop.worst()] is min(members, key=lambda m: (m.fitness.wvalues, -m.ident))
        assert all(pop.index_of(m.ident) == k for k, m in enumerate(members)) and pop.index_of(-5) is None
        assert len({pop.index_of(i) for i in range(ident)} - {None}) == len(members)  # the replaced are gone


def test_a_population_refuses_members_of_another_shape():
    pop = Population([Individual.evaluated([0.5, 0.5], 0.5, 0), Individual.evaluated([0.1, 0.2], 0.7, 1)])
    with pytest.raises(ValueError, match="2 genes and 1 objectives"):
        pop.append(Individual.evaluated([0.5, 0.5, 0.5], 0.5, 2))
    with pytest.raises(ValueError, match="objectives"):
        pop[0] = Individual([0.5, 0.5], RungFitness((1.0, 0.5)), 3)
    with pytest.raises(IndexError):
        pop[2] = Individual.evaluated([0.5, 0.5], 0.5, 4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0.1, 0.5, float("-inf")])), min_size=2, max_size=8), st.data())
def test_a_tournament_of_several_objectives_compares_them_as_tuples_and_the_first_drawn_wins_ties(members, data):
    standing = np.asarray(members, dtype=np.float64)
    aspirants = np.asarray(data.draw(st.lists(st.lists(st.integers(0, len(members) - 1), min_size=3, max_size=3), min_size=1, max_size=6)))
    won = ga._winners(aspirants, standing)
    for row, column in zip(aspirants.tolist(), won.tolist()):
        best = max(members[k] for k in row)
        assert members[row[column]] == best and all(members[k] != best for k in row[:column])
    flat = standing[:, 0] * 10 + np.where(np.isinf(standing[:, 1]), -5, standing[:, 1])  # the same order as one column
    assert (ga._winners(aspirants, flat) == won).all()
