"""Search strategies: what to train next. A strategy is asked for proposals and told every result.

:func:`~evolve.master.run_search` keeps dispatch, ids, bookkeeping and checkpoint
timing; the policy lives here, behind two verbs:

* ``ask()``: the next :class:`Proposal` (a genome, its parents and the operators
  that made it), or None when the strategy must see results first (a barrier);
* ``tell(record)``: a finished evaluation, successful or not.

``to_state()`` gives everything the strategy needs to go on after a resume as
plain JSON values; :func:`make_strategy` rebuilds it from that and the records.

* ``async`` (:class:`SteadyState`): no generations. The first ``population``
  proposals are random; after that every proposal is a child of two tournament
  winners from the population as it stands, and each result replaces the
  population's worst member if it is better (elitist). No worker ever waits.
* ``generational`` (:class:`Generational`): a barrier per generation. A generation's
  children are all bred at once, when the previous generation is complete, and the
  next population is the best ``population`` of parents and children ((mu + lambda),
  ties to the earlier id). What a run computes depends on the seed alone, not on
  how many workers there are or in which order their results arrive.
* ``nsga2`` (:class:`NSGA2`): generational too (the same barrier and the same
  determinism), with two objectives: the validation fitness, maximised, and a cost,
  minimised: the network's trainable parameters (``params``) or its measured inference
  latency (``latency``, microseconds per sample). Parents are binary tournament winners on
  Pareto rank, then crowding distance; the next population is DEAP's ``selNSGA2`` over
  parents and children. The Pareto front over every successful evaluation so far is kept
  as it grows (:class:`ParetoFront`) and stored with the strategy's state.
"""
from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass
from typing import Iterable, Protocol

import numpy as np
import numpy.random  # noqa: F401 (numpy imports it on first use: 24 ms inside a search's start)

from .ga import (GAParams, Individual, admit, breed_batch, breed_child, crowded_tournament, nsga2_survivors, pareto_individual, pareto_ranks,
                 random_genome)
from .batch_keys import BatchKeys
from .records import Pending, Record
from .space import SearchSpace

MODES = ("async", "generational", "nsga2")
# NSGA-II's second objective (minimised) -> the evaluation metric that holds it (ensemble.train.train_and_evaluate).
OBJECTIVES = {"params": "params", "latency": "latency_us"}


@dataclass(slots=True)
class Proposal:
    genome: list[float]
    parents: tuple[int, int]
    operators: str  # "random", "crossover", "mutation", "crossover+mutation" or "copy"
    key: tuple  # what the genome decodes to (SearchSpace.key, computed once, when proposed)

    def to_json(self) -> list:
        return [list(self.genome), list(self.parents), self.operators]

    @classmethod
    def from_json(cls, item: list, space: SearchSpace) -> Proposal:
        genome, parents, operators = item
        genome = [float(g) for g in genome]
        return cls(genome, (int(parents[0]), int(parents[1])), str(operators), candidate_key(space, genome))


class Strategy(Protocol):
    mode: str

    def ask(self) -> Proposal | None:
        """The next individual to evaluate, or None until more results are told."""

    def tell(self, record: Record) -> None:
        """A finished evaluation (any status)."""

    def to_state(self) -> dict:
        """Plain JSON values: what a resume needs (see :func:`make_strategy`)."""


def candidate_key(space: SearchSpace, genome) -> tuple:
    """What a genome decodes to: two genomes with the same key train the same network."""
    return space.key(genome)


class _Breeder:
    """What both strategies share: the search's rng, the space, and the networks already proposed."""

    def __init__(self, space: SearchSpace, params: GAParams, rng: random.Random, known: Iterable[list[float]]):
        self.space, self.params, self.rng = space, params, rng
        self.seen = {candidate_key(space, g) for g in known}

    def _proposal(self, genome: list[float], parents: tuple[int, int], operators: str, key: tuple) -> Proposal:
        self.seen.add(key)
        return Proposal(genome, parents, operators, key)

    def random(self) -> Proposal:
        genome = random_genome(self.rng, len(self.space))
        return self._proposal(genome, (-1, -1), "random", candidate_key(self.space, genome))

    def child(self, population: list[Individual], select=None) -> Proposal:
        decoded = {}

        def is_new(genome) -> bool:
            decoded["last"] = candidate_key(self.space, genome)  # breed_child returns the genome it last asked about
            return decoded["last"] not in self.seen

        genome, parents, operators = breed_child(population, self.rng, self.params, is_new=is_new, select=select)
        return self._proposal(genome, parents, operators, decoded["last"])


def _individual(record: Record) -> Individual:
    return Individual(record.genome, record.fitness, record.id)


class SteadyState(_Breeder):
    """``async``: breed from the population as it stands; each result may replace the worst member.

    Children are bred ahead in broods (:func:`~evolve.ga.breed_batch`, whole-array operations, their
    keys decoded together by :class:`BatchKeys`) from the population as it stands, and a brood is
    dropped the moment the population changes: every child is still bred from the population at the
    time it is asked for. After a change the first :attr:`SINGLES` children are bred one at a time
    (:func:`~evolve.ga.breed_child`, from the search's rng): early in a search the population
    changes after nearly every result, and a brood then serves one child at some ten times the cost
    of breeding that child alone. Then a brood's size doubles (up to :attr:`MAX_BROOD`) each time
    one is used up, starting at :attr:`MIN_BROOD`, so little is bred in vain while the population
    moves and most work is shared once it settles. (Up to 512: bench_master's search of 24,608
    evaluations, alternated in one process, cost 43.3 us an evaluation with broods of up to 512,
    45.3 up to 256 and 41.4 up to 1,024, medians of 6, but the evaluations after the 20,000th cost
    39.7, 40.6 and 42.9: a brood's fixed cost, some 140 us, makes small ones dear while the population
    moves, and a brood of 1,024 children, its genomes and keys as Python objects, no longer fits in a
    core's cache once it holds still.) Each brood draws from a numpy generator seeded
    from the search's rng, so a search is still fixed by its seed. Children that decode to a
    network already proposed are skipped, up to ``ATTEMPTS`` in a row (as
    :func:`~evolve.ga.breed_child` retries).
    """

    mode = "async"
    MIN_BROOD, MAX_BROOD, ATTEMPTS, SINGLES = 8, 512, 20, 2

    def __init__(self, space, params, rng, records: dict[int, Record], known, state: dict):
        super().__init__(space, params, rng, known)
        self.population = [_individual(records[i]) for i in state.get("population", [])]
        self._keys = BatchKeys(space)
        self._bits = np.random.PCG64(0)
        self._gen = np.random.Generator(self._bits)
        self._brood_size = self.MIN_BROOD
        self._singles = 0  # children bred one at a time since the population last changed
        self._drop_brood()
        self._lowest = min((ind.value for ind in self.population), default=-math.inf)  # the worst member's fitness

    def _drop_brood(self) -> None:
        self._brood, self._brood_keys, self._genomes, self._next = None, [], [], 0

    def _breed_brood(self) -> None:
        if self._brood is not None:
            self._brood_size = min(2 * self._brood_size, self.MAX_BROOD)  # the last one was used up
        # a fresh stream for each brood, from the search's rng (checkpointed with the search)
        self._bits.state = {"bit_generator": "PCG64", "state": {"state": self.rng.getrandbits(128), "inc": _PCG_INC},
                            "has_uint32": 0, "uinteger": 0}
        genomes = np.array(self.population, dtype=np.float64)
        fitness = np.array([ind.value for ind in self.population], dtype=np.float64)
        brood = self._brood = breed_batch(genomes, fitness, self._gen, self.params, self._brood_size)
        self._brood_keys = self._keys.keys(brood.genomes)
        self._genomes = brood.genomes.tolist()
        # parents and operators are looked up for the children asked for only (a brood may be dropped early)
        self._ids = [ind.ident for ind in self.population]
        self._made = (brood.mothers.tolist(), brood.fathers.tolist(), brood.crossed.tolist(), brood.mutated.tolist())
        self._next = 0

    def ask(self) -> Proposal:
        if len(self.population) < self.params.population:
            return self.random()
        if self._singles < self.SINGLES:
            self._singles += 1
            return self.child(self.population)
        seen = self.seen
        for attempt in range(self.ATTEMPTS):
            if self._next >= len(self._genomes):
                self._breed_brood()
            i = self._next
            self._next += 1
            key = self._brood_keys[i]
            known = len(seen)
            seen.add(key)  # (one hash of the key, not two: a key is a tuple of every gene's value)
            if len(seen) > known or attempt == self.ATTEMPTS - 1:
                mothers, fathers, crossed, mutated = self._made
                ids = self._ids
                return Proposal(self._genomes[i], (ids[mothers[i]], ids[fathers[i]]), _OPERATORS[crossed[i], mutated[i]], key)

    def tell(self, record: Record) -> None:
        if record.status != "ok":
            return
        if len(self.population) >= self.params.population and not record.fitness > self._lowest:
            return  # not better than the worst member: admit() would turn it away
        newcomer = _individual(record)
        if admit(self.population, newcomer, self.params.population) is not newcomer:  # the population changed
            self._drop_brood()
            self._brood_size, self._singles = self.MIN_BROOD, 0
            self._lowest = min(ind.value for ind in self.population)

    def to_state(self) -> dict:
        return {"mode": self.mode, "population": [ind.ident for ind in self.population]}


_OPERATORS = {(c, m): "crossover+mutation" if c and m else "crossover" if c else "mutation" if m else "copy"
              for c in (False, True) for m in (False, True)}  # (crossed, mutated) -> what made the child
_PCG_INC = 0xDA3E39CB94B95BDB  # any odd constant: PCG64's stream; its state comes from the search's rng


class Generational(_Breeder):
    """``generational``: breed a whole generation at once; wait for all of it; keep the best of parents and children."""

    mode = "generational"

    def __init__(self, space, params, rng, records: dict[int, Record], known, state: dict):
        super().__init__(space, params, rng, known)
        self.population = [self._member(records[i]) for i in state.get("population", [])]
        self.generation = int(state.get("generation", 0))
        self.queue = [Proposal.from_json(item, space) for item in state.get("queue", [])]
        self.seen.update(p.key for p in self.queue)  # proposed, as before the stop
        self.outstanding = int(state.get("outstanding", 0))  # handed out, not yet told
        self.told = [self._member(records[i]) for i in state.get("told", []) if self._eligible(records[i])]
        if not state:  # a new search: generation 0 is random
            self.queue = [self.random() for _ in range(params.population)]

    def ask(self) -> Proposal | None:
        if not self.queue:
            return None  # the barrier: the generation's children are all out
        self.outstanding += 1
        return self.queue.pop(0)

    def tell(self, record: Record) -> None:
        self.outstanding -= 1
        if self._eligible(record):
            self.told.append(self._member(record))
        if not self.queue and self.outstanding <= 0:
            self._next_generation()

    def _eligible(self, record: Record) -> bool:
        """May this result enter the population?"""
        return record.status == "ok"

    def _member(self, record: Record) -> Individual:
        return _individual(record)

    def _survivors(self, pool: list[Individual]) -> list[Individual]:
        """The next population: the best ``population`` of parents and children, ties to the earlier id."""
        return sorted(pool, key=lambda ind: (-ind.value, ind.ident))[: self.params.population]

    def _breed(self) -> list[Proposal]:
        return [self.child(self.population) for _ in range(self.params.population)]

    def _next_generation(self) -> None:
        self.population = self._survivors(self.population + self.told)
        self.told, self.outstanding = [], 0
        self.generation += 1
        if len(self.population) >= 2:
            self.queue = self._breed()
        else:  # too few networks have trained successfully to breed: start again at random
            self.queue = [self.random() for _ in range(self.params.population)]

    def to_state(self) -> dict:
        return {
            "mode": self.mode,
            "population": [ind.ident for ind in self.population],
            "generation": self.generation,
            "queue": [p.to_json() for p in self.queue],
            "outstanding": self.outstanding,
            "told": sorted(ind.ident for ind in self.told),  # by id, not arrival: the state is the same on any number of workers
        }


def objective_value(record: Record, objective: str) -> float | None:
    """The second objective's value of a successful evaluation (see :data:`OBJECTIVES`); None if it has none."""
    value = record.metrics.get(OBJECTIVES[objective]) if record.status == "ok" else None
    return value if value is not None and math.isfinite(value) and math.isfinite(record.fitness) else None


class ParetoFront:
    """The non-dominated points so far on (fitness, maximised; cost, minimised), kept as they arrive.

    The members are kept sorted by cost; along a non-dominated set the fitness then rises strictly
    with the cost, so a newcomer is placed by bisection (O(log n)) and displaces a contiguous run
    of members. Nothing is ever rescanned. Of two points with the same fitness and cost the one
    with the lower id is kept, so the front does not depend on the order in which results arrive.
    """

    def __init__(self) -> None:
        self._costs: list[float] = []
        self._members: list[tuple[float, float, int]] = []  # (cost, fitness, id), by cost

    def __len__(self) -> int:
        return len(self._members)

    def add(self, ident: int, fitness: float, cost: float) -> bool:
        """Offer a point; True if it joined the front (displacing the members it dominates)."""
        at = bisect.bisect_right(self._costs, cost)
        if at > 0:  # the member of the largest cost <= ``cost`` is the only one that may dominate the newcomer
            c, f, other = self._members[at - 1]
            if f >= fitness:
                if (c, f) == (cost, fitness) and ident < other:
                    self._members[at - 1] = (cost, fitness, ident)  # the same point, reached first by id
                    return True
                return False
        low = bisect.bisect_left(self._costs, cost)
        high = low
        while high < len(self._members) and self._members[high][1] <= fitness:
            high += 1  # costs at least as high, fitness no better: dominated by the newcomer
        self._members[low:high] = [(cost, fitness, ident)]
        self._costs[low:high] = [cost]
        return True

    def ids(self) -> list[int]:
        """The members' ids, by cost (so by fitness too)."""
        return [ident for _, _, ident in self._members]

    def points(self) -> list[tuple[int, float, float]]:
        """(id, fitness, cost) of each member, by cost."""
        return [(ident, f, c) for c, f, ident in self._members]


class NSGA2(Generational):
    """``nsga2``: generational NSGA-II on (validation fitness, maximised; ``objective``, minimised).

    Generation 0 is random; each later generation's children are bred from the population by
    binary tournaments on Pareto rank, then crowding distance (uniform crossover and bounded
    polynomial mutation as in the other modes), and the next population is DEAP's ``selNSGA2``
    over parents and children ((mu + lambda)), fed in id order so that ties never depend on
    arrival. Only successful evaluations that report the objective enter the population or
    the front. The barrier, the queue and the determinism are :class:`Generational`'s.
    """

    mode = "nsga2"

    def __init__(self, space, params, rng, records: dict[int, Record], known, state: dict, objective: str = "params"):
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown second objective {objective!r} (known: {', '.join(OBJECTIVES)})")
        if state and state.get("objective", objective) != objective:
            raise ValueError(f"the run's second objective is {state.get('objective')!r}, not {objective!r}")
        self.objective = objective
        super().__init__(space, params, rng, records, known, state)
        self.front = ParetoFront()
        for i in state.get("front", []):
            self.front.add(i, records[i].fitness, objective_value(records[i], objective))

    def tell(self, record: Record) -> None:
        cost = objective_value(record, self.objective)
        if cost is not None:
            self.front.add(record.id, record.fitness, cost)
        super().tell(record)

    def _eligible(self, record: Record) -> bool:
        return objective_value(record, self.objective) is not None

    def _member(self, record: Record) -> Individual:
        return pareto_individual(record.genome, record.fitness, objective_value(record, self.objective), record.id)

    def _survivors(self, pool: list[Individual]) -> list[Individual]:
        return nsga2_survivors(sorted(pool, key=lambda ind: ind.ident), self.params.population)

    def _breed(self) -> list[Proposal]:
        select = crowded_tournament(pareto_ranks(self.population))
        return [self.child(self.population, select) for _ in range(self.params.population)]

    def to_state(self) -> dict:
        return {**super().to_state(), "objective": self.objective, "front": self.front.ids()}


def make_strategy(mode: str, space: SearchSpace, params: GAParams, rng: random.Random, records: list[Record],
                  pending: list[Pending], state: dict, objective: str = "params") -> Strategy:
    """The strategy ``mode`` names, carrying on from ``state`` (empty for a new search).

    ``objective`` is NSGA-II's second objective (a key of :data:`OBJECTIVES`); the other modes ignore it.
    """
    if state and state.get("mode") != mode:
        raise ValueError(f"the run's strategy is {state.get('mode')!r}, not {mode!r}")
    by_id = {r.id: r for r in records}
    known = [r.genome for r in records] + [p.genome for p in pending]
    if mode == "async":
        return SteadyState(space, params, rng, by_id, known, state)
    if mode == "generational":
        return Generational(space, params, rng, by_id, known, state)
    if mode == "nsga2":
        return NSGA2(space, params, rng, by_id, known, state, objective)
    raise ValueError(f"unknown search mode {mode!r} (known: {', '.join(MODES)})")
