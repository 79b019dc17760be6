"""A steady-state genetic algorithm built from DEAP's operators.

Asynchronous search needs no generations: whenever a worker is free, a child is
bred from the current population (tournament selection, uniform crossover,
bounded polynomial mutation), and whenever a result arrives it may replace the
population's worst member. Replacing only the worst, and only by something
better, is elitist: the best individual found so far is never lost.

DEAP's operators draw from the global :mod:`random` module. So that the search
is reproducible and its state can be checkpointed, every call here runs them
inside :func:`drawing_from`, which lends them the search's own
``random.Random`` and puts the global state back afterwards.
"""
from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from deap import base, tools


class Fitness(base.Fitness):
    """One objective, maximised: validation accuracy."""

    weights = (1.0,)


class Individual(list):
    """A genome (floats in [0, 1]) with a DEAP fitness and the id of its evaluation record."""

    def __init__(self, genes=(), value: float | None = None, ident: int = -1):
        super().__init__(float(g) for g in genes)
        self.fitness = Fitness()
        if value is not None:
            self.fitness.values = (float(value),)
        self.ident = ident


@dataclass(frozen=True)
class GAParams:
    population: int = 10
    tournament: int = 3
    crossover_prob: float = 0.7
    mutation_prob: float = 0.3  # per gene
    mutation_eta: float = 8.0


@contextmanager
def drawing_from(rng: random.Random) -> Iterator[None]:
    """Let code that uses the global ``random`` module draw from ``rng`` instead."""
    saved = random.getstate()
    random.setstate(rng.getstate())
    try:
        yield
    finally:
        rng.setstate(random.getstate())
        random.setstate(saved)


def random_genome(rng: random.Random, length: int) -> list[float]:
    return [rng.random() for _ in range(length)]


def breed_child(
    population: list[Individual],
    rng: random.Random,
    params: GAParams,
    is_new: Callable[[list[float]], bool] = lambda genome: True,
    attempts: int = 20,
) -> tuple[list[float], tuple[int, int], str]:
    """A child of two tournament winners, the ids of its parents, and the operators that made it.

    The operators are "crossover", "mutation", both ("crossover+mutation"), or "copy" when
    neither changed the mother's genome. Tries up to ``attempts`` times for a child that
    ``is_new`` accepts (one that decodes to a network not trained before), then settles for
    the last one.
    """
    if len(population) < 2:
        raise ValueError("breeding needs a population of at least two")
    tournament = min(params.tournament, len(population))
    with drawing_from(rng):
        for _ in range(attempts):
            mother, father = tools.selTournament(population, 2, tournament)
            child, other = Individual(mother), Individual(father)
            used = []
            if random.random() < params.crossover_prob:
                tools.cxUniform(child, other, 0.5)
                if list(child) != list(mother):
                    used.append("crossover")
            before = list(child)
            tools.mutPolynomialBounded(child, params.mutation_eta, 0.0, 1.0, params.mutation_prob)
            if list(child) != before:
                used.append("mutation")
            genome = [min(max(g, 0.0), 1.0) for g in child]
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
