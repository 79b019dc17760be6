"""A genetic algorithm with DEAP's operators, drawing from the search's own ``random.Random``.

Genomes are lists of floats in [0, 1] (decoded by :mod:`evolve.search.space`), so DEAP's
real-valued operators act on every gene alike: a tournament (``selTournament``) picks the parents,
a uniform crossover (``cxUniform``) crosses them, a polynomial mutation bounded to [0, 1]
(``mutPolynomialBounded``) mutates the child (:class:`Operators`). Replacing only the worst member
of the population, and only by something better (:func:`admit`), is elitist: the best individual
found so far is never lost. NSGA-II's survival is DEAP's ``selNSGA2``.

:class:`Operators` are those three of DEAP's written out for this search (genes in [0, 1], the
search's rng): the same draws from the rng, in the same order, and the same children as DEAP's
(tests/test_ga.py checks them against DEAP's own). They are on the master's path for every child
bred, several times a child where the population has converged (a child that decodes to a network
trained before is bred again), and DEAP's general versions (bounds by gene, the global ``random``
module, which had to be pointed at the search's rng around each call) cost about 2.5 times as much.
"""
from __future__ import annotations

import random
from typing import Callable, Protocol

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


class Operators:
    """DEAP's ``selTournament``, ``cxUniform`` (each gene from either parent with probability 1/2) and
    ``mutPolynomialBounded`` (bounds 0 and 1) with the search's parameters, drawing from ``rng``: the same draws
    and results as DEAP's (see the module's note). ``select`` may be replaced by another ``select(population, k)``
    (:func:`value_tournament`, :func:`crowded_tournament`)."""

    def __init__(self, params: GAParams, rng: random.Random):
        self.rng = rng
        self.tournament = params.tournament
        self.indpb = params.mutation_prob
        self.eta = params.mutation_eta
        self.select: Callable[[list[Individual], int], list[Individual]] = self.tournaments

    def tournaments(self, population: list[Individual], k: int) -> list[Individual]:
        """``selTournament(population, k, tournament)``: each of the ``k`` the fittest of ``tournament`` aspirants drawn
        with replacement, the first drawn among equals (fitnesses compared as DEAP does, by ``wvalues``). An aspirant is
        drawn as ``rng.choice`` draws it (``random.Random._randbelow``: ``getrandbits`` of the population's bit length
        until one falls below its size), written out: the same draws, without two calls an aspirant."""
        getrandbits, size, n = self.rng.getrandbits, self.tournament, len(population)
        if not n:
            raise IndexError("Cannot choose from an empty sequence")
        bits, chosen = n.bit_length(), []
        for _ in range(k):
            best = best_w = None
            for _ in range(size):
                r = getrandbits(bits)
                while r >= n:
                    r = getrandbits(bits)
                aspirant = population[r]
                if best_w is None or aspirant.fitness.wvalues > best_w:
                    best, best_w = aspirant, aspirant.fitness.wvalues
            chosen.append(best)
        return chosen

    def mate(self, mother: list[float], father: list[float]) -> list[float]:
        """``cxUniform(child, father, 0.5)`` on a copy of ``mother``: the child (a coin per gene, heads: the father's)."""
        draw = self.rng.random
        return [f if draw() < 0.5 else m for m, f in zip(mother, father)]

    def mutate(self, child: list[float]) -> bool:
        """``mutPolynomialBounded(child, eta, 0, 1, indpb)``, in place (DEAP's arithmetic with bounds 0 and 1, term
        for term, so the same floats); True if a gene changed."""
        draw, indpb = self.rng.random, self.indpb
        power, exponent = 1.0 / (self.eta + 1.0), self.eta + 1
        changed = False
        for i, x in enumerate(child):
            if draw() <= indpb:
                rand = draw()
                if rand < 0.5:
                    delta_q = (2.0 * rand + (1.0 - 2.0 * rand) * (1.0 - x) ** exponent) ** power - 1.0
                else:
                    delta_q = 1.0 - (2.0 * (1.0 - rand) + 2.0 * (rand - 0.5) * (1.0 - (1.0 - x)) ** exponent) ** power
                mutated = min(max(x + delta_q, 0.0), 1.0)
                changed = changed or mutated != x
                child[i] = mutated
        return changed


def random_genome(rng: random.Random, length: int) -> list[float]:
    return [rng.random() for _ in range(length)]


def breed_child(
    population: list[Individual],
    ops: Operators,
    crossover_prob: float,
    is_new: Callable[[list[float], Individual, Individual], bool] = lambda genome, mother, father: True,
    attempts: int = 20,
) -> tuple[list[float], tuple[int, int], str]:
    """A child of two parents that ``ops.select`` picks, the ids of its parents, and the operators that made it.

    With probability ``crossover_prob`` the child is ``ops.mate``'s uniform crossover of the two,
    else a copy of the first; then ``ops.mutate`` mutates it. The operators are "crossover",
    "mutation", both ("crossover+mutation"), or "copy" when neither changed the first parent's genome.
    Tries up to ``attempts`` times for a child that ``is_new(child, mother, father)`` accepts (one that
    decodes to a network not trained before), then settles for the last one.
    """
    if len(population) < 2:
        raise ValueError("breeding needs a population of at least two")
    coin = ops.rng.random
    for _ in range(attempts):
        mother, father = ops.select(population, 2)
        crossed = coin() < crossover_prob
        if crossed:
            child = ops.mate(mother, father)
            crossed = child != mother
        else:
            child = list(mother)
        mutated = ops.mutate(child)
        if is_new(child, mother, father):
            break
    operators = "crossover+mutation" if crossed and mutated else "crossover" if crossed else "mutation" if mutated else "copy"
    return child, (mother.ident, father.ident), operators


def admit(population: list[Individual], newcomer: Individual, capacity: int) -> Individual | None:
    """Steady-state replacement: fill up to ``capacity``, then replace the worst if the newcomer is better.

    The worst is the lowest fitness, then the latest id (the order of :attr:`Individual.standing`). Returns the
    individual that left (the replaced one, or the newcomer itself if it was not good enough), or None if the
    population simply grew.
    """
    if len(population) < capacity:
        population.append(newcomer)
        return None
    worst = min(range(len(population)), key=lambda i: (population[i].fitness.wvalues, -population[i].ident))  # the highest standing
    if not newcomer.fitness.wvalues > population[worst].fitness.wvalues:
        return newcomer
    leaving = population[worst]
    population[worst] = newcomer
    return leaving


def admit_by_value(population: list[Individual], newcomer: Individual, capacity: int, value: Callable[[list[int]], list[float]]) -> None:
    """Steady-state replacement by ``value`` (ids to values, higher better) instead of fitness: fill up to
    ``capacity``, then the lowest-valued of the population and the newcomer leaves (among equal values, as
    those outside the hall of fame all are, the lower fitness, then the latest id)."""
    if len(population) < capacity:
        population.append(newcomer)
        return
    pool = population + [newcomer]
    values = value([ind.ident for ind in pool])
    leaving = min(range(len(pool)), key=lambda i: (values[i], pool[i].value, -pool[i].ident))
    if leaving < len(population):
        population[leaving] = newcomer


def value_tournament(values: dict[int, float], rng: random.Random, size: int) -> Callable[[list[Individual], int], list[Individual]]:
    """Tournament selection on ``values`` (by id, higher better), as the operators' ``select(population, k)``: each
    winner is the best of ``size`` aspirants drawn from ``rng`` with replacement (among equal values the fitter,
    then the first drawn)."""

    def one(population: list[Individual]) -> Individual:
        return max((rng.choice(population) for _ in range(size)), key=lambda ind: (values[ind.ident], ind.value))

    return lambda population, k: [one(population) for _ in range(k)]


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


def crowded_tournament(ranks: dict[int, tuple[int, float]], rng: random.Random) -> Callable[[list[Individual], int], list[Individual]]:
    """NSGA-II's parent selection, as the operators' ``select(population, k)``: binary tournaments, each won by
    the lower rank, then the larger crowding distance, then a coin from ``rng``."""

    def one(population: list[Individual]) -> Individual:
        a, b = rng.sample(population, 2)
        (rank_a, crowd_a), (rank_b, crowd_b) = ranks[a.ident], ranks[b.ident]
        if rank_a != rank_b:
            return a if rank_a < rank_b else b
        if crowd_a != crowd_b:
            return a if crowd_a > crowd_b else b
        return a if rng.random() < 0.5 else b

    return lambda population, k: [one(population) for _ in range(k)]
