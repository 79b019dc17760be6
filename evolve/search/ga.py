"""A genetic algorithm with DEAP's operators, bred in broods with numpy.

Genomes are lists of floats in [0, 1] (decoded by :mod:`evolve.search.space`), so DEAP's
real-valued operators act on every gene alike: a tournament (``selTournament``) picks the parents,
a uniform crossover (``cxUniform``) crosses them, a polynomial mutation bounded to [0, 1]
(``mutPolynomialBounded``) mutates the child. Replacing only the worst member of the population, and
only by something better (:func:`admit`), is elitist: the best individual found so far is never lost.
NSGA-II's survival is DEAP's ``selNSGA2``.

:func:`breed` makes many children of one population at once, as whole-array operations drawing from a
numpy generator that the search's ``random.Random`` reseeds (:func:`reseed`): the master breeds a child for
every result, several candidates a child where the population has converged (a child that decodes to a
network trained before is bred again), and the three operators written for one child at a time in Python
were a third of the master's CPU. The polynomial mutation is DEAP's arithmetic, term for term
(tests/test_ga.py holds it to ``mutPolynomialBounded``); the tournaments and the crossover draw as DEAP's do,
in another order.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
from deap import base, tools
from deap.tools import emo as deap_emo


class Fitness(base.Fitness):
    """One objective, maximised: validation accuracy (or -RMSE). The GA compares networks by it alone: among equal
    values the first drawn wins a tournament and the latest id leaves the population first. The hall of fame, the
    report and promotion break such ties by validation log-loss (ensemble.hall_of_fame.standing); in the GA that
    tie-break changed the searches without a measurable gain (docs/benchmarks.md, "The GA's loss tie-break"), and the
    simpler rule stays."""

    weights = (1.0,)


class RungFitness(base.Fitness):
    """With successive halving (search.promotion): the rung a network reached first, then :class:`Fitness`'s value,
    so that fitness is compared within a rung and a network further on beats one stopped below it."""

    weights = (1.0, 1.0)


class ParetoFitness(base.Fitness):
    """Two objectives for NSGA-II: validation fitness, maximised, and a cost (parameters or latency), minimised."""

    weights = (1.0, -1.0)


class Individual(list):
    """A genome (floats in [0, 1]) with DEAP's fitness and the id of its evaluation record."""

    __slots__ = ("fitness", "ident")

    def __init__(self, genes=(), fitness: base.Fitness | None = None, ident: int = -1):
        super().__init__(map(float, genes))
        self.fitness = Fitness() if fitness is None else fitness
        self.ident = ident

    @classmethod
    def evaluated(cls, genes, value: float, ident: int, rung: int | None = None) -> Individual:
        """An individual with one objective, ``value``; with ``rung`` (successive halving), ranked by the rung it
        reached first."""
        if rung is None:
            return cls(genes, Fitness((float(value),)), ident)
        return cls(genes, RungFitness((float(rung), float(value))), ident)

    @property
    def value(self) -> float:
        """The objective (the validation fitness; the first of a Pareto pair)."""
        return self.fitness.values[1] if isinstance(self.fitness, RungFitness) else self.fitness.values[0]

    @property
    def standing(self) -> tuple[float, ...]:
        """Lower is better: fitness (the rung first with successive halving), then the id."""
        return (*(-w for w in self.fitness.wvalues), self.ident)


def fitness_wvalues(value: float) -> tuple[float]:
    """The ``wvalues`` of :meth:`Individual.evaluated`'s fitness (one objective, no rung), as DEAP computes them (the
    value times :class:`Fitness`'s weight), without making the individual: what :func:`admit` compares."""
    return (float(value) * Fitness.weights[0],)


def pareto_individual(genes, fitness: float, cost: float, ident: int) -> Individual:
    """An individual with two objectives (see :class:`ParetoFitness`)."""
    return Individual(genes, ParetoFitness((float(fitness), float(cost))), ident)


class GAParams(Protocol):
    """What the GA reads of the search's settings (``evolve.config.schema.SearchConfig`` has them all)."""

    population: int  # the individuals children are bred from
    tournament: int  # aspirants per tournament
    crossover_prob: float  # chance that a child is bred by crossover
    mutation_prob: float  # chance that each gene is mutated
    mutation_eta: float  # polynomial mutation's crowding degree: larger is more local
    breeding: str  # "blind", or "model": children ranked by a surrogate (strategy.py, surrogate.py)
    brood: int  # model breeding: candidates bred per child sent


@dataclass(slots=True)
class Brood:
    """Children bred together from one population by :func:`breed`: row ``i`` of each array is child ``i``."""

    genomes: np.ndarray  # (children, genes), in [0, 1]
    mothers: np.ndarray  # (children,): the mother's index in the population
    fathers: np.ndarray  # (children,): the father's
    from_father: np.ndarray  # (children, genes) bool: the gene is the father's (uniform crossover), and differs from the mother's
    mutated: np.ndarray  # (children, genes) bool: mutation changed the gene

    def __len__(self) -> int:
        return len(self.genomes)

    def operators(self) -> list[str]:
        """What made each child: "crossover", "mutation", both ("crossover+mutation"), or "copy" (its mother's genome)."""
        names = ("copy", "crossover", "mutation", "crossover+mutation")
        return [names[i] for i in (self.from_father.any(axis=1) + 2 * self.mutated.any(axis=1)).tolist()]


def breed(genomes: np.ndarray, standing: np.ndarray, gen: np.random.Generator, params: GAParams, count: int,
          tournament: int | None = None, distinct: bool = False) -> Brood:
    """``count`` children of one population (``genomes``, one row a member), bred with whole-array operations drawing
    from ``gen``: each parent the winner of a tournament of ``tournament`` aspirants (``params.tournament``; drawn
    with replacement, or ``distinct``), the one of highest ``standing`` (a value a member, or several compared as
    tuples: evolve.search.population.Population.standing, :func:`ranks`), the first drawn among equals;
    with probability ``params.crossover_prob`` a uniform crossover (each gene the father's with probability 1/2),
    else the mother's genome; then DEAP's bounded polynomial mutation (:func:`polynomial_mutation`) of each gene with
    probability ``params.mutation_prob``. The operators of DEAP's ``selTournament``, ``cxUniform`` and
    ``mutPolynomialBounded``, in another order of draws."""
    members, genes = genomes.shape
    if members < 2:
        raise ValueError("breeding needs a population of at least two")
    size = tournament or params.tournament
    # rows 2i and 2i + 1: the tournaments for child i's mother and father
    if distinct:
        first = gen.integers(0, members, size=2 * count)
        second = gen.integers(0, members - 1, size=2 * count)
        aspirants = np.stack([first, second + (second >= first)], axis=1)
    else:
        aspirants = gen.integers(0, members, size=(2 * count, size))
    winners = aspirants[np.arange(2 * count), _winners(aspirants, standing)]
    mothers, fathers = winners[0::2], winners[1::2]
    mother, father = genomes[mothers], genomes[fathers]
    from_father = (gen.random(count) < params.crossover_prob)[:, None] & (gen.random((count, genes)) < 0.5) & (father != mother)
    child = np.where(from_father, father, mother)
    at = np.flatnonzero(gen.random((count, genes)) <= params.mutation_prob)  # flat positions of the genes mutated
    x = child.ravel()[at]
    y = polynomial_mutation(x, gen.random(at.size), params.mutation_eta)
    child.ravel()[at] = y
    mutated = np.zeros(count * genes, dtype=bool)
    mutated[at] = y != x
    return Brood(child, mothers, fathers, from_father, mutated.reshape(count, genes))


def _winners(aspirants: np.ndarray, standing: np.ndarray) -> np.ndarray:
    """Each tournament's winner (its column in ``aspirants``): the highest standing, the first drawn among equals. A
    standing of several columns (one a member) is compared as tuples are, the first column first."""
    if standing.ndim == 1:
        return standing[aspirants].argmax(axis=1)
    level = np.ones(aspirants.shape, dtype=bool)  # the aspirants still level with the best
    for column in standing.T:
        values = np.where(level, column[aspirants], -np.inf)
        level &= values == values.max(axis=1, keepdims=True)
    return level.argmax(axis=1)


def polynomial_mutation(x: np.ndarray, rand: np.ndarray, eta: float) -> np.ndarray:
    """DEAP's ``mutPolynomialBounded`` with bounds 0 and 1 of the genes ``x``, each with its draw ``rand``: DEAP's
    arithmetic, term for term (tests/test_ga.py holds it to DEAP's own: equal but for the last bit of a power)."""
    power, exponent = 1.0 / (eta + 1.0), eta + 1
    below = rand < 0.5
    with np.errstate(invalid="ignore"):  # each branch is computed for every gene, and kept only where it applies
        lower = (2.0 * rand + (1.0 - 2.0 * rand) * (1.0 - x) ** exponent) ** power - 1.0
        upper = 1.0 - (2.0 * (1.0 - rand) + 2.0 * (rand - 0.5) * (1.0 - (1.0 - x)) ** exponent) ** power
    return np.clip(x + np.where(below, lower, upper), 0.0, 1.0)


def ranks(keys: list) -> np.ndarray:
    """Each key's rank among ``keys`` (0 the lowest; equal keys, equal ranks): what :func:`breed`'s tournaments compare
    where members are ordered by other keys than their fitness (values to the ensemble, Pareto ranks)."""
    rank = {key: i for i, key in enumerate(sorted(set(keys)))}
    return np.fromiter((rank[key] for key in keys), dtype=np.int64, count=len(keys))


def reseed(gen: np.random.Generator, seed: int) -> np.random.Generator:
    """``gen`` (a PCG64 generator) set to the state ``seed`` (128 bits, drawn from the search's rng): a brood's draws
    follow from the search's rng, which checkpoints keep, and from that one number."""
    gen.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": seed, "inc": _PCG_STREAM}, "has_uint32": 0, "uinteger": 0}
    return gen


SEED_BITS = 128
_PCG_STREAM = 0xDA3E39CB94B95BDB  # PCG64's increment (odd): one fixed stream, its position the seed


def random_genome(rng: random.Random, length: int) -> list[float]:
    return [rng.random() for _ in range(length)]


def admit(population, newcomer: Individual, capacity: int) -> Individual | None:
    """Steady-state replacement in ``population`` (an evolve.search.population.Population): fill up to ``capacity``,
    then replace the worst if the newcomer is better.

    The worst is the lowest fitness, then the latest id (the order of :attr:`Individual.standing`). Returns the
    individual that left (the replaced one, or the newcomer itself if it was not good enough), or None if the
    population simply grew.
    """
    if len(population) < capacity:
        population.append(newcomer)
        return None
    worst = population.worst()
    if not newcomer.fitness.wvalues > population[worst].fitness.wvalues:
        return newcomer
    leaving = population[worst]
    population[worst] = newcomer
    return leaving


def admit_by_value(population, newcomer: Individual, capacity: int, value: Callable[[list[int]], list[float]]) -> None:
    """Steady-state replacement by ``value`` (ids to values, higher better) instead of fitness: fill up to
    ``capacity``, then the lowest-valued of the population and the newcomer leaves (among equal values, as
    those outside the hall of fame all are, the lower fitness, then the latest id)."""
    if len(population) < capacity:
        population.append(newcomer)
        return
    pool = [*population, newcomer]
    values = value([ind.ident for ind in pool])
    leaving = min(range(len(pool)), key=lambda i: (values[i], pool[i].value, -pool[i].ident))
    if leaving < len(population):
        population[leaving] = newcomer


def nsga2_survivors(pool: list[Individual], k: int) -> list[Individual]:
    """NSGA-II's (mu + lambda) survival: DEAP's ``selNSGA2`` (fronts, then crowding distance) over ``pool``, its fronts
    by DEAP's O(N log N) sort (``nd="log"``, Fortin et al. 2013): the same fronts as the standard O(M N^2) sort, which
    takes seconds a generation at a population of thousands (docs/benchmarks.md).

    It draws no random numbers and depends only on the order of ``pool`` (ties of crowding distance go to the
    earlier in the front), so a caller that orders ``pool`` by id gets the same survivors whatever order results came in.
    """
    return tools.selNSGA2(pool, k, nd="log") if pool else []  # (DEAP's log sort indexes the first individual)


def pareto_ranks(population: list[Individual]) -> dict[int, tuple[int, float]]:
    """Each individual's non-domination rank (0: not dominated) and crowding distance in its front, by id."""
    ranks: dict[int, tuple[int, float]] = {}
    for rank, front in enumerate(deap_emo.sortLogNondominated(population, len(population)) if population else []):
        deap_emo.assignCrowdingDist(front)
        for ind in front:
            ranks[ind.ident] = (rank, ind.fitness.crowding_dist)
    return ranks
