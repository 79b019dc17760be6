"""A steady-state genetic algorithm with DEAP's operators.

Asynchronous search needs no generations: whenever a worker is free, a child is
bred from the current population (tournament selection, uniform crossover,
bounded polynomial mutation), and whenever a result arrives it may replace the
population's worst member. Replacing only the worst, and only by something
better, is elitist: the best individual found so far is never lost.

Breeding is on the master's path for every evaluation, so :func:`breed_child`
runs DEAP's ``selTournament``, ``cxUniform`` and ``mutPolynomialBounded`` as
lean inline copies: the same arithmetic and the same draws, in the same order,
from the search's own ``random.Random`` (the tests hold them to DEAP's results,
bit for bit), without DEAP's per-call overhead or its fitness objects. An
:class:`Individual` keeps its fitness as a plain float and builds DEAP's
fitness object only when DEAP's own code asks for it (NSGA-II's sorting).

DEAP's operators draw from the global :mod:`random` module. Wherever DEAP's
own code is called, it runs inside :func:`drawing_from`, which points it at
the search's ``random.Random`` and leaves the global state alone.
"""
from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
from deap import base, tools
from deap.tools import crossover as deap_crossover
from deap.tools import emo as deap_emo
from deap.tools import mutation as deap_mutation
from deap.tools import selection as deap_selection


class Fitness(base.Fitness):
    """One objective, maximised: validation accuracy."""

    weights = (1.0,)


class ParetoFitness(base.Fitness):
    """Two objectives for NSGA-II: validation fitness, maximised, and a cost (parameters or latency), minimised."""

    weights = (1.0, -1.0)


class Individual(list):
    """A genome (floats in [0, 1]) with its fitness and the id of its evaluation record.

    ``value`` is the fitness as a float (None: not evaluated). ``fitness``, DEAP's view of it
    (a :class:`Fitness`, or a :class:`ParetoFitness` set by :func:`pareto_individual`), is
    built the first time it is asked for: the single-objective search never needs it.
    """

    __slots__ = ("value", "ident", "_fitness")

    def __init__(self, genes=(), value: float | None = None, ident: int = -1):
        super().__init__(map(float, genes))
        self.value = None if value is None else float(value)
        self.ident = ident
        self._fitness = None

    @property
    def fitness(self) -> base.Fitness:
        if self._fitness is None:
            self._fitness = Fitness() if self.value is None else Fitness((self.value,))
        return self._fitness

    @fitness.setter
    def fitness(self, fitness: base.Fitness) -> None:
        self._fitness = fitness
        self.value = fitness.values[0] if fitness.valid else None


def pareto_individual(genes, fitness: float, cost: float, ident: int) -> Individual:
    """An individual with two objectives (see :class:`ParetoFitness`); ``value`` is the first."""
    ind = Individual(genes, None, ident)
    ind.fitness = ParetoFitness((float(fitness), float(cost)))
    return ind


@dataclass(frozen=True)
class GAParams:
    population: int = 10
    tournament: int = 3
    crossover_prob: float = 0.7
    mutation_prob: float = 0.3  # per gene
    mutation_eta: float = 8.0


# The DEAP modules whose operators this search calls; each draws from the name ``random`` in its module.
# (NSGA-II's selNSGA2, sortNondominated and assignCrowdingDist in ``emo`` draw nothing; it is listed so
# that anything else called from there, such as selTournamentDCD, draws from the search's rng too.)
_DEAP_MODULES = (deap_selection, deap_crossover, deap_mutation, deap_emo)


@contextmanager
def drawing_from(rng: random.Random) -> Iterator[None]:
    """Let DEAP's operators draw from ``rng`` instead of the global ``random`` module.

    Each operator module's name ``random`` is pointed at ``rng`` for the duration, which costs
    O(1): copying the Mersenne Twister's 625-word state in and out, as a swap of the global
    state would, cost more than the breeding itself. The global ``random`` is never touched.
    """
    saved = [m.random for m in _DEAP_MODULES]
    for m in _DEAP_MODULES:
        m.random = rng
    try:
        yield
    finally:
        for m, original in zip(_DEAP_MODULES, saved):
            m.random = original


def random_genome(rng: random.Random, length: int) -> list[float]:
    return [rng.random() for _ in range(length)]


def tournament(population: list[Individual], rng: random.Random, size: int) -> Individual:
    """DEAP's ``selTournament`` for one winner: ``size`` aspirants drawn with replacement
    (``rng.choice``), the first of the fittest wins."""
    choice = rng.choice
    best = choice(population)
    for _ in range(size - 1):
        aspirant = choice(population)
        if aspirant.value > best.value:
            best = aspirant
    return best


def uniform_crossover(mother, father, rng: random.Random, swap: float = 0.5) -> list[float]:
    """The first child of DEAP's ``cxUniform(mother, father, swap)``: each gene from the father with
    probability ``swap`` (one draw per gene, in order)."""
    r = rng.random
    return [f if r() < swap else m for m, f in zip(mother, father)]


def polynomial_mutation(genome: list[float], rng: random.Random, eta: float, indpb: float) -> bool:
    """DEAP's ``mutPolynomialBounded(genome, eta, 0.0, 1.0, indpb)`` in place, the same arithmetic and
    the same draws; True if any gene changed."""
    r = rng.random
    power, mut_pow = eta + 1, 1.0 / (eta + 1.0)
    changed = False
    for i, x in enumerate(genome):
        if r() <= indpb:
            rand = r()
            if rand < 0.5:
                xy = 1.0 - x  # 1 - delta_1, with delta_1 = (x - 0) / (1 - 0) = x exactly
                val = 2.0 * rand + (1.0 - 2.0 * rand) * xy ** power
                delta_q = val ** mut_pow - 1.0
            else:
                xy = 1.0 - (1.0 - x)  # 1 - delta_2, with delta_2 = (1 - x) / (1 - 0)
                val = 2.0 * (1.0 - rand) + 2.0 * (rand - 0.5) * xy ** power
                delta_q = 1.0 - val ** mut_pow
            y = x + delta_q  # x + delta_q * (1 - 0)
            y = 0.0 if y < 0.0 else 1.0 if y > 1.0 else y  # min(max(y, 0), 1)
            if y != x:
                genome[i] = y
                changed = True
    return changed


def breed_child(
    population: list[Individual],
    rng: random.Random,
    params: GAParams,
    is_new: Callable[[list[float]], bool] = lambda genome: True,
    attempts: int = 20,
    select: Callable[[list[Individual], random.Random], tuple[Individual, Individual]] | None = None,
) -> tuple[list[float], tuple[int, int], str]:
    """A child of two tournament winners, the ids of its parents, and the operators that made it.

    The operators are "crossover", "mutation", both ("crossover+mutation"), or "copy" when
    neither changed the mother's genome. Tries up to ``attempts`` times for a child that
    ``is_new`` accepts (one that decodes to a network not trained before), then settles for
    the last one. ``select(population, rng)`` picks the two parents (default: two tournaments
    of ``params.tournament`` on the single fitness, as DEAP's ``selTournament(population, 2, size)``).
    """
    if len(population) < 2:
        raise ValueError("breeding needs a population of at least two")
    size = min(params.tournament, len(population))
    crossover_prob, eta, indpb = params.crossover_prob, params.mutation_eta, params.mutation_prob
    r = rng.random
    for _ in range(attempts):
        if select is None:
            mother = tournament(population, rng, size)
            father = tournament(population, rng, size)
        else:
            mother, father = select(population, rng)
        crossed = r() < crossover_prob
        child = uniform_crossover(mother, father, rng) if crossed else list(mother)
        crossed = crossed and child != mother
        mutated = polynomial_mutation(child, rng, eta, indpb)
        if is_new(child):
            break
    operators = "crossover+mutation" if crossed and mutated else "crossover" if crossed else "mutation" if mutated else "copy"
    return child, (mother.ident, father.ident), operators


@dataclass
class Brood:
    """Children bred at once (:func:`breed_batch`): row ``i`` of ``genomes`` is a child of population
    members ``mothers[i]`` and ``fathers[i]`` (indices), made by the operators ``crossed[i]`` and ``mutated[i]`` say."""

    genomes: np.ndarray  # (count, genes) float64 in [0, 1]
    mothers: np.ndarray  # (count,) indices into the population
    fathers: np.ndarray
    crossed: np.ndarray  # (count,) bool: the uniform crossover changed the mother's genome
    mutated: np.ndarray  # (count,) bool: the mutation changed a gene


def breed_batch(genomes: np.ndarray, fitness: np.ndarray, gen: np.random.Generator, params: GAParams, count: int) -> Brood:
    """``count`` children of one population at once, each as :func:`breed_child` makes one (two tournaments
    of ``params.tournament`` with replacement, the first of the fittest winning; uniform crossover with
    probability ``crossover_prob``; DEAP's bounded polynomial mutation of each gene with probability
    ``mutation_prob``), as whole-array operations drawing from ``gen``.

    ``genomes`` is the population as a (members, genes) array and ``fitness`` its fitness values.
    """
    members, genes = genomes.shape
    if members < 2:
        raise ValueError("breeding needs a population of at least two")
    size = min(params.tournament, members)
    # rows 2i and 2i + 1: the tournaments for child i's mother and father (the first of the fittest wins)
    aspirants = gen.integers(0, members, size=(2 * count, size))
    winners = aspirants[np.arange(2 * count), fitness[aspirants].argmax(axis=1)]
    mothers, fathers = winners[0::2], winners[1::2]
    mother = genomes[mothers]
    swap = (gen.random(count) < params.crossover_prob)[:, None] & (gen.random((count, genes)) < 0.5)
    child = np.where(swap, genomes[fathers], mother)
    crossed = (child != mother).any(axis=1)
    # DEAP's mutPolynomialBounded with bounds 0 and 1, gene by gene where hit (``at``: flat positions,
    # computed there only; flat indices cost a third of a boolean mask's)
    at = np.flatnonzero(gen.random((count, genes)) <= params.mutation_prob)
    rand = gen.random(count * genes)[at]
    x = child.ravel()[at]
    eta = params.mutation_eta
    power, mut_pow = eta + 1, 1.0 / (eta + 1.0)
    below = rand < 0.5
    one_minus = 1.0 - x
    xy_power = np.where(below, one_minus, 1.0 - one_minus) ** power
    val_pow = np.where(below, 2.0 * rand + (1.0 - 2.0 * rand) * xy_power, 2.0 * (1.0 - rand) + 2.0 * (rand - 0.5) * xy_power) ** mut_pow
    delta_q = np.where(below, val_pow - 1.0, 1.0 - val_pow)
    y = np.clip(x + delta_q, 0.0, 1.0)
    mutant = child.copy()
    mutant.ravel()[at] = y
    changed = np.zeros(count * genes, dtype=bool)
    changed[at] = y != x
    mutated = changed.reshape(count, genes).any(axis=1)
    return Brood(mutant, mothers, fathers, crossed, mutated)


def admit(population: list[Individual], newcomer: Individual, capacity: int) -> Individual | None:
    """Steady-state replacement: fill up to ``capacity``, then replace the worst if the newcomer is better.

    The worst is the lowest fitness, the latest id among equals. Returns the individual that left
    (the replaced one, or the newcomer itself if it was not good enough), or None if the population
    simply grew.
    """
    if len(population) < capacity:
        population.append(newcomer)
        return None
    lowest = min(ind.value for ind in population)
    if not newcomer.value > lowest:
        return newcomer
    worst = max((i for i, ind in enumerate(population) if ind.value == lowest), key=lambda i: population[i].ident)
    leaving = population[worst]
    population[worst] = newcomer
    return leaving


def nsga2_survivors(pool: list[Individual], k: int) -> list[Individual]:
    """NSGA-II's (mu + lambda) survival: DEAP's ``selNSGA2`` (fronts, then crowding distance) over ``pool``.

    ``selNSGA2`` draws no random numbers; its ties go to the earlier individual in ``pool``,
    so a caller that orders ``pool`` by id gets the same survivors whatever order results came in.
    """
    return tools.selNSGA2(pool, k)


def pareto_ranks(population: list[Individual]) -> dict[int, tuple[int, float]]:
    """Each individual's non-domination rank (0: not dominated) and crowding distance in its front, by id."""
    ranks: dict[int, tuple[int, float]] = {}
    for rank, front in enumerate(deap_emo.sortNondominated(population, len(population))):
        deap_emo.assignCrowdingDist(front)
        for ind in front:
            ranks[ind.ident] = (rank, ind.fitness.crowding_dist)
    return ranks


def crowded_tournament(ranks: dict[int, tuple[int, float]]) -> Callable[[list[Individual], random.Random], tuple[Individual, Individual]]:
    """NSGA-II's parent selection for :func:`breed_child`: two binary tournaments, each won by the lower
    rank, then the larger crowding distance, then a coin from the search's rng."""

    def one(population: list[Individual], rng: random.Random) -> Individual:
        a, b = rng.sample(population, 2)
        (rank_a, crowd_a), (rank_b, crowd_b) = ranks[a.ident], ranks[b.ident]
        if rank_a != rank_b:
            return a if rank_a < rank_b else b
        if crowd_a != crowd_b:
            return a if crowd_a > crowd_b else b
        return a if rng.random() < 0.5 else b

    return lambda population, rng: (one(population, rng), one(population, rng))
