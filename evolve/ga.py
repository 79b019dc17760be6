"""A steady-state genetic algorithm built from DEAP's operators.

Asynchronous search needs no generations: whenever a worker is free, a child is
bred from the current population (tournament selection, uniform crossover,
bounded polynomial mutation), and whenever a result arrives it may replace the
population's worst member. Replacing only the worst, and only by something
better, is elitist: the best individual found so far is never lost.

DEAP's operators draw from the global :mod:`random` module. So that the search
is reproducible and its state can be checkpointed, every call here runs them
inside :func:`drawing_from`, which points them at the search's own
``random.Random`` and leaves the global state alone.
"""
from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

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
    """A genome (floats in [0, 1]) with a DEAP fitness and the id of its evaluation record."""

    def __init__(self, genes=(), value: float | None = None, ident: int = -1):
        super().__init__(float(g) for g in genes)
        self.fitness = Fitness()
        if value is not None:
            self.fitness.values = (float(value),)
        self.ident = ident


def pareto_individual(genes, fitness: float, cost: float, ident: int) -> Individual:
    """An individual with two objectives (see :class:`ParetoFitness`)."""
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
    the last one. ``select(population, rng)`` picks the two parents (default: DEAP's
    ``selTournament`` of ``params.tournament`` on the single fitness).
    """
    if len(population) < 2:
        raise ValueError("breeding needs a population of at least two")
    tournament = min(params.tournament, len(population))
    with drawing_from(rng):
        for _ in range(attempts):
            if select is None:
                mother, father = tools.selTournament(population, 2, tournament)
            else:
                mother, father = select(population, rng)
            child, other = list(mother), list(father)  # the operators work on any list; no fitness needed
            used = []
            if rng.random() < params.crossover_prob:
                tools.cxUniform(child, other, 0.5)
                if child != mother:
                    used.append("crossover")
            before = child[:]
            tools.mutPolynomialBounded(child, params.mutation_eta, 0.0, 1.0, params.mutation_prob)  # stays in [0, 1]
            if child != before:
                used.append("mutation")
            genome = child
            if is_new(genome):
                break
    return genome, (mother.ident, father.ident), "+".join(used) or "copy"


def admit(population: list[Individual], newcomer: Individual, capacity: int) -> Individual | None:
    """Steady-state replacement: fill up to ``capacity``, then replace the worst if the newcomer is better.

    Returns the individual that left (the replaced one, or the newcomer itself if it was
    not good enough), or None if the population simply grew.
    """
    if len(population) < capacity:
        population.append(newcomer)
        return None
    worst = min(range(len(population)), key=lambda i: (population[i].fitness, -population[i].ident))
    if newcomer.fitness > population[worst].fitness:
        leaving = population[worst]
        population[worst] = newcomer
        return leaving
    return newcomer


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
