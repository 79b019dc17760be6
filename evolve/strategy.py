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
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Protocol

from ensemble.specs import NetworkSpec, TrainSpec

from .ga import GAParams, Individual, admit, breed_child, random_genome
from .records import Pending, Record
from .space import SearchSpace

MODES = ("async", "generational")


@dataclass(frozen=True)
class Proposal:
    genome: list[float]
    parents: tuple[int, int]
    operators: str  # "random", "crossover", "mutation", "crossover+mutation" or "copy"
    candidate: tuple[NetworkSpec, TrainSpec]  # what the genome decodes to (decoded once, when proposed)

    def to_json(self) -> list:
        return [list(self.genome), list(self.parents), self.operators]

    @classmethod
    def from_json(cls, item: list, space: SearchSpace) -> Proposal:
        genome, parents, operators = item
        genome = [float(g) for g in genome]
        return cls(genome, (int(parents[0]), int(parents[1])), str(operators), space.candidate(genome))


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
        return Proposal(genome, parents, operators, self.space.specs(key))

    def random(self) -> Proposal:
        genome = random_genome(self.rng, len(self.space))
        return self._proposal(genome, (-1, -1), "random", candidate_key(self.space, genome))

    def child(self, population: list[Individual]) -> Proposal:
        decoded = {}

        def is_new(genome) -> bool:
            decoded["last"] = candidate_key(self.space, genome)  # breed_child returns the genome it last asked about
            return decoded["last"] not in self.seen

        genome, parents, operators = breed_child(population, self.rng, self.params, is_new=is_new)
        return self._proposal(genome, parents, operators, decoded["last"])


def _individual(record: Record) -> Individual:
    return Individual(record.genome, record.fitness, record.id)


class SteadyState(_Breeder):
    """``async``: breed from the population as it stands; each result may replace the worst member."""

    mode = "async"

    def __init__(self, space, params, rng, records: dict[int, Record], known, state: dict):
        super().__init__(space, params, rng, known)
        self.population = [_individual(records[i]) for i in state.get("population", [])]

    def ask(self) -> Proposal:
        if len(self.population) < self.params.population:
            return self.random()
        return self.child(self.population)

    def tell(self, record: Record) -> None:
        if record.status == "ok":
            admit(self.population, _individual(record), self.params.population)

    def to_state(self) -> dict:
        return {"mode": self.mode, "population": [ind.ident for ind in self.population]}


class Generational(_Breeder):
    """``generational``: breed a whole generation at once; wait for all of it; keep the best of parents and children."""

    mode = "generational"

    def __init__(self, space, params, rng, records: dict[int, Record], known, state: dict):
        super().__init__(space, params, rng, known)
        self.population = [_individual(records[i]) for i in state.get("population", [])]
        self.generation = int(state.get("generation", 0))
        self.queue = [Proposal.from_json(item, space) for item in state.get("queue", [])]
        self.outstanding = int(state.get("outstanding", 0))  # handed out, not yet told
        self.told = [_individual(records[i]) for i in state.get("told", []) if records[i].status == "ok"]
        if not state:  # a new search: generation 0 is random
            self.queue = [self.random() for _ in range(params.population)]

    def ask(self) -> Proposal | None:
        if not self.queue:
            return None  # the barrier: the generation's children are all out
        self.outstanding += 1
        return self.queue.pop(0)

    def tell(self, record: Record) -> None:
        self.outstanding -= 1
        if record.status == "ok":
            self.told.append(_individual(record))
        if not self.queue and self.outstanding <= 0:
            self._next_generation()

    def _next_generation(self) -> None:
        pool = sorted(self.population + self.told, key=lambda ind: (-ind.fitness.values[0], ind.ident))
        self.population = pool[: self.params.population]
        self.told, self.outstanding = [], 0
        self.generation += 1
        if len(self.population) >= 2:
            self.queue = [self.child(self.population) for _ in range(self.params.population)]
        else:  # too few networks have trained successfully to breed: start again at random
            self.queue = [self.random() for _ in range(self.params.population)]

    def to_state(self) -> dict:
        return {
            "mode": self.mode,
            "population": [ind.ident for ind in self.population],
            "generation": self.generation,
            "queue": [p.to_json() for p in self.queue],
            "outstanding": self.outstanding,
            "told": [ind.ident for ind in self.told],
        }


def make_strategy(mode: str, space: SearchSpace, params: GAParams, rng: random.Random, records: list[Record],
                  pending: list[Pending], state: dict) -> Strategy:
    """The strategy ``mode`` names, carrying on from ``state`` (empty for a new search)."""
    if state and state.get("mode") != mode:
        raise ValueError(f"the run's strategy is {state.get('mode')!r}, not {mode!r}")
    by_id = {r.id: r for r in records}
    known = [r.genome for r in records] + [p.genome for p in pending]
    if mode == "async":
        return SteadyState(space, params, rng, by_id, known, state)
    if mode == "generational":
        return Generational(space, params, rng, by_id, known, state)
    raise ValueError(f"unknown search mode {mode!r} (known: {', '.join(MODES)})")
