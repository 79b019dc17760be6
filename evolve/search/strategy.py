"""The evolutionary search strategies (DEAP's operators): what to train next. A strategy is asked for proposals
and told every result; each registers itself under its ``search.mode`` name (:mod:`.registry`).

:func:`~evolve.engine.loop.run_search` keeps dispatch, ids, bookkeeping and checkpoint
timing; the policy lives here, behind two verbs:

* ``ask()``: the next :class:`Proposal` (a genome, its parents and the operators
  that made it), or None when the strategy must see results first (a barrier);
* ``tell(record)``: a finished evaluation, successful or not.

``to_state()`` gives everything the strategy needs to go on after a resume as
plain JSON values; its ``create(context)`` rebuilds it from that and the records.

* ``async`` (:class:`SteadyState`): no generations. The first ``population``
  proposals are random; after that every proposal is a child of two tournament
  winners from the population as it stands, and each result replaces the
  population's worst member if it is better (elitist). No worker ever waits.
* ``generational`` (:class:`evolve.search.generational.Generational`, in its own module): a barrier per generation. A generation's
  children are all bred at once, when the previous generation is complete, and the
  next population is the best ``population`` of parents and children ((mu + lambda),
  ties to the earlier id). What a run computes depends on the seed alone, not on
  how many workers there are or in which order their results arrive.
* ``nsga2`` (:class:`evolve.search.nsga2.NSGA2`, in its own module): generational too, with two objectives.

Selection (``search.selection``) is by ``fitness``, or in the async and generational modes by
``ensemble``: parents (tournaments) and survivors (replacement) are chosen by what an individual
adds to the run's current ensemble (``value``, from :mod:`ensemble.contribution`, given by the engine).

With successive halving (``search.promotion``) a network trains in stages to rungs (evolve.engine.promotion).
The async strategy's promotions are made by the engine, asynchronously (ASHA). A strategy with a barrier promotes at
its barrier instead, within the generation (synchronous successive halving, as each bracket of Hyperband): once the
generation's stages at a rung are all in, the best ``max(1, n // eta)`` of those ``n`` go on to the next rung (by
fitness; by Pareto rank, then crowding distance, in ``nsga2``), handed out by ``promote()``, and the generation is
complete when no stage of it is paused. The networks that stopped at a lower rung join the pool too, ranked below
every one that went further (their rung first, then fitness, or Pareto rank within the rung): parents come from the
highest rungs. The choices depend on the seed alone, as the barrier's always do.

Breeding (``search.breeding``) is ``blind`` (each child is the operators' draw) or, in the
async and generational modes, ``model``: a surrogate of the fitness (:mod:`.surrogate`) ranks
``search.brood`` bred candidates per child sent, and the best are sent.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, ClassVar, Iterable, Protocol

import numpy as np

from . import ga
from .ga import GAParams, Individual, admit, admit_by_value, fitness_wvalues, random_genome
from .keyset import KeySet
from .population import Population
from .records import Record
from .registry import Capabilities, Context, Value, register
from .space import SearchSpace
from .surrogate import Surrogate

POOL_MAX = 32  # async, model breeding: children ranked at once at most (see SteadyState.ask)


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
        return cls(genome=genome, parents=(int(parents[0]), int(parents[1])), operators=str(operators), key=candidate_key(space, genome))


class Strategy(Protocol):
    name: ClassVar[str]  # its search.mode
    capabilities: ClassVar[Capabilities]

    @classmethod
    def create(cls, context: Context) -> Strategy:
        """New (``context.state`` empty), or carrying on from the state ``to_state`` gave and the records."""

    def ask(self) -> Proposal | None:
        """The next individual to evaluate, or None until more results are told."""

    def tell(self, record: Record) -> None:
        """A finished evaluation (any status)."""

    def to_state(self) -> dict:
        """Plain JSON values, with the strategy's name under ``"mode"``: what a resume needs."""


def candidate_key(space: SearchSpace, genome) -> tuple:
    """What a genome decodes to: two genomes with the same key train the same network."""
    return space.key(genome)


RANDOM_TRIES = 20  # draws for a random genome new to the search, before one seen is taken (a space of few networks)
CRASH_FREE_TRIES = 1000  # ... and for one that is at least not a network that crashed
CHILD_TRIES = 20  # candidates for a child new to the search, before the last is taken
MIN_BROOD, MAX_BROOD = 8, 128  # children bred at once: the first brood after the population changed, and at most


class _Breeder:
    """What the strategies share: the search's rng, the space, the networks already proposed, and the
    surrogate that ranks bred children (None: blind breeding).

    Children come from broods (:func:`ga.breed`) bred from the population as it stands and kept while it stands
    (:meth:`forget_brood`): the first brood after a change holds :data:`MIN_BROOD` children, and each one used up
    is followed by one twice as large, up to :data:`MAX_BROOD` (a converged population changes seldom, and most of
    its children decode to networks proposed before)."""

    def __init__(self, space: SearchSpace, params: GAParams, rng: random.Random, known: Iterable[list[float]],
                 surrogate: Surrogate | None = None, value: Value | None = None):
        self.space, self.params, self.rng = space, params, rng
        self.seen = KeySet((candidate_key(space, g) for g in known), space.key_hash)  # every network proposed, by hash: 8 bytes each
        self.crashed = KeySet(hasher=space.key_hash)  # networks that crashed (see note_outcome): never proposed again
        self.surrogate = surrogate
        self.value = value  # None: selection by fitness
        self.rank_key: Callable[[Individual], tuple] | None = None  # what the tournaments compare, if not fitness (select_by_value, NSGA-II)
        self.tournament, self.distinct = params.tournament, False  # aspirants a tournament; drawn without replacement
        self._gen = np.random.Generator(np.random.PCG64(0))  # reseeded from rng for each brood (ga.reseed)
        self._decoded: dict[int, list] = {}  # see _parents_values
        self._out: np.ndarray | None = None  # the networks still out when the search resumed (see restore)
        self.forget_brood()

    def forget_brood(self) -> None:
        """The population, or what its tournaments compare, changed: the next child comes from a new brood."""
        self._brood: ga.Brood | None = None
        self._brood_size, self._brood_seed, self._taken = MIN_BROOD, 0, 0

    def select_by_value(self, population: Population) -> None:
        """Ensemble selection: the next parents are tournament winners on their value to the ensemble now (then
        fitness)."""
        if self.value is not None:
            values = dict(zip((ind.ident for ind in population), self.value([ind.ident for ind in population])))
            self.rank_key = lambda ind: (values[ind.ident], ind.value)
            self.forget_brood()

    def _proposal(self, genome: list[float], parents: tuple[int, int], operators: str, key: tuple, hashed: int | None = None) -> Proposal:
        """The proposal, its network marked proposed (``hashed``: its key's hash, if computed already)."""
        self.seen.add_hash(self.space.key_hash(key) if hashed is None else hashed)
        return Proposal(genome=genome, parents=parents, operators=operators, key=key)

    def note_outcome(self, record: Record) -> None:
        """A crashed network (out when jobs died, see evolve.engine.loop.MAX_ATTEMPTS) is never proposed
        again, whatever the rng draws: a resume replays the draws made since the last checkpoint."""
        if record.status == "crashed":
            self.crashed.add(candidate_key(self.space, record.genome))

    def random(self) -> Proposal:
        """A random genome, preferably one that decodes to a network not proposed before, and never one
        that crashed (unless :data:`CRASH_FREE_TRIES` draws find none other)."""
        for tries in range(CRASH_FREE_TRIES):
            genome = random_genome(self.rng, len(self.space))
            key = candidate_key(self.space, genome)
            if key not in self.seen or (tries >= RANDOM_TRIES and key not in self.crashed):
                break
        return self._proposal(genome, (-1, -1), "random", key)

    def brood(self, population: Population, count: int, seed: int | None = None) -> ga.Brood:
        """``count`` children of ``population``, bred at once from ``seed`` (by default drawn from the search's rng)."""
        seed = self.rng.getrandbits(ga.SEED_BITS) if seed is None else seed
        standing = population.standing() if self.rank_key is None else ga.ranks([self.rank_key(ind) for ind in population])
        return ga.breed(population.genomes, standing, ga.reseed(self._gen, seed), self.params, count, self.tournament, self.distinct)

    def _next_candidate(self, population: Population) -> int:
        """The kept brood's next child (its index), breeding a brood first where none is left."""
        if self._brood is None or self._taken == len(self._brood):
            if self._brood is not None:
                self._brood_size = min(2 * self._brood_size, MAX_BROOD)
            self._brood_seed = self.rng.getrandbits(ga.SEED_BITS)
            self._keep(self.brood(population, self._brood_size, self._brood_seed), population, 0)
        self._taken += 1
        return self._taken - 1

    def _keep(self, brood: ga.Brood, population: Population, taken: int) -> None:
        """Keep ``brood`` (bred from ``population``), ``taken`` of its children handed out already: its rows as Python
        objects (a child is examined gene by gene), each child's parents as the members it was bred from (their ids and
        every gene's value), whatever the population holds when the child is taken."""
        self._brood, self._taken = brood, taken
        mothers, fathers = brood.mothers.tolist(), brood.fathers.tolist()
        parents = {k: population[k] for k in {*mothers, *fathers}}  # (a few of a population of thousands)
        values = self._parents_values(parents.values(), len(population))
        members = {k: (ind.ident, values[ind.ident]) for k, ind in parents.items()}
        self._rows = (brood.genomes.tolist(), _changes(brood), [members[m] for m in mothers], [members[f] for f in fathers],
                      brood.operators())

    def brood_state(self) -> dict:
        """The kept brood as the state keeps it (its seed, its size, the children taken), so that a resume takes the
        children the unbroken search does; bred again from the population by :meth:`resume_brood`."""
        return {"brood": [str(self._brood_seed), self._brood_size, self._taken]} if self._brood is not None else {}

    def resume_brood(self, state: dict, population: Population) -> None:
        """Breed the brood :meth:`brood_state` named again (one not as this code keeps them is not: a new one follows)."""
        try:
            seed, size, taken = (int(v) for v in state.get("brood", ()))
        except (TypeError, ValueError):
            return
        if MIN_BROOD <= size <= MAX_BROOD and 0 <= taken <= size and 0 <= seed < 1 << ga.SEED_BITS and len(population) >= 2:
            self._brood_seed, self._brood_size = seed, size
            self._keep(self.brood(population, size, seed), population, taken)

    def child(self, population: Population) -> Proposal:
        """A child of the population, preferably one that decodes to a network not proposed before (the first of
        :data:`CHILD_TRIES` candidates that does, else the last); a random genome instead of a network that crashed."""
        space = self.space
        for _ in range(CHILD_TRIES):
            i = self._next_candidate(population)
            genomes, changes, mothers, fathers, operators = self._rows
            (mother, mother_values), (father, father_values) = mothers[i], fathers[i]
            values = space.child_decoded(genomes[i], changes[i], mother_values, father_values)
            if values == mother_values or values == father_values:  # a parent's network, so proposed before (2 tries in 5
                key = None                                          # once the population has converged): no key needed
                continue
            key = space.key_of(values)
            hashed = space.key_hash(key)  # once: for the two sets and the mark
            if not self.seen.holds(hashed):
                break
        if key is None:
            key = space.key_of(values)
            hashed = space.key_hash(key)
        if self.crashed.holds(hashed):
            return self.random()
        return self._proposal(genomes[i], (mother, father), operators[i], key, hashed)

    def _parents_values(self, parents: Iterable[Individual], population: int) -> dict[int, list]:
        """Every gene's value (SearchSpace.decoded) of each of ``parents``, by id: kept from brood to brood (a population
        changes by one member a result), so that a child's duplicate check decodes only its mutated genes; forgotten
        when more are kept than four times the ``population``'s size (those of members that left, mostly)."""
        known = self._decoded
        if len(known) > 4 * population + 16:
            self._decoded = known = {}
        for ind in parents:
            if ind.ident not in known:
                known[ind.ident] = self.space.decoded(ind)
        return known

    def ranked_children(self, population: Population, n: int) -> list[Proposal]:
        """``n`` children, each the most promising of its own brood of ``brood`` candidates bred from the
        population, by the surrogate's score (one call ranks all the broods). A brood's best is
        skipped for its next if it is a network proposed before or chosen already; a brood with none
        new gives no child. Not yet marked seen.

        Each child is the best of its own brood rather than the best ``n`` of all: the children of a
        generation stay as diverse as the blind ones, only each a better draw."""
        size = self.params.brood
        bred = self.brood(population, n * size)
        predicted = self.surrogate.score(bred.genomes)
        genomes, mothers, fathers, operators = bred.genomes.tolist(), bred.mothers.tolist(), bred.fathers.tolist(), bred.operators()
        chosen: dict[tuple, Proposal] = {}
        for start in range(0, len(bred), size):
            for i in start + np.argsort(-predicted[start : start + size], kind="stable"):
                key = candidate_key(self.space, genomes[i])
                if key not in self.seen and key not in chosen:
                    parents = (population[mothers[i]].ident, population[fathers[i]].ident)
                    chosen[key] = Proposal(genome=genomes[i], parents=parents, operators=operators[i], key=key)
                    break
        return list(chosen.values())

    def surrogate_state(self) -> dict:
        return {"surrogate": self.surrogate.to_state()} if self.surrogate is not None else {}

    def bred_memory(self) -> dict[str, np.ndarray]:
        """The part of a strategy's ``memory()`` (evolve.engine.memory) that every breeder has: the networks proposed
        and those that crashed, by hash, and the surrogate's (``surrogate.*``: the rows of its last fit and the latest
        results). A strategy that carries on from it defines ``memory()`` and restores it in ``create``."""
        kept = {**self.seen.memory("seen"), "crashed": self.crashed.hashes()}  # seen: the hashes, or their file's token and count
        if self.surrogate is not None:
            kept.update({f"surrogate.{name}": array for name, array in self.surrogate.memory().items()})
        return kept

    def keep_proposed_in(self, log) -> None:
        """From now on the checkpoints' memory appends the networks proposed to ``log`` (evolve.runfile.proposed) instead
        of holding them all (KeySet.journal); the networks still out when the search resumed go in too (some were sent
        after the checkpoint whose file the set was read from)."""
        self.seen.journal(log, also=self._out)

    def restore(self, memory: dict[str, np.ndarray]) -> None:
        """Carry on from :meth:`bred_memory` (with the networks still out already in ``seen``; ``memory["seen"]`` read
        from its file where the checkpoint kept them there: evolve.runfile.proposed.filled)."""
        out = self._out = self.seen.hashes()
        self.seen = KeySet(hasher=self.space.key_hash, hashes=memory["seen"])
        self.seen.add_hashes(out)
        self.crashed = KeySet(hasher=self.space.key_hash, hashes=memory["crashed"])

    def caught_up(self, context: Context) -> _Breeder:
        """Made from a run's state: told which recorded networks crashed (never proposed again); returns self."""
        for record in context.records:
            self.note_outcome(record)
        return self


def _changes(brood: ga.Brood) -> list[list[tuple[int, int]]]:
    """Each child's genes that are not its mother's, with where each came from (1: the father, 2 or 3: mutation), as
    SearchSpace.child_decoded takes them: in a converged population a few a child, the rest copied as a list."""
    sources = brood.from_father + 2 * brood.mutated
    rows, columns = np.nonzero(sources)
    changes: list[list[tuple[int, int]]] = [[] for _ in range(len(brood))]
    for row, column, source in zip(rows.tolist(), columns.tolist(), sources[rows, columns].tolist()):
        changes[row].append((column, source))
    return changes


def _individual(record: Record, rungs: bool = False) -> Individual:
    """The record as the GA sees it; with ``rungs`` (search.promotion), ranked by the rung it reached first."""
    return Individual.evaluated(record.genome, record.fitness, record.id, record.rung if rungs else None)


def _scored(record: Record) -> bool:
    """Does this result enter a population: a whole training that ended well, or a stage paused at its rung?"""
    return record.status in ("ok", "paused")


def _by_id(context: Context) -> dict[int, Record]:
    return {r.id: r for r in context.records}


def _known(context: Context) -> list[list[float]]:
    """Every genome proposed so far: recorded or still out."""
    return [r.genome for r in context.records] + [p.genome for p in context.pending]


def _surrogate(context: Context) -> Surrogate | None:
    """Model breeding's surrogate, fitted again as it stood at the last fit (a resume: from the records, or from the
    master's memory where no history was read; see Surrogate.from_state and Surrogate.restored), or None for blind
    breeding."""
    if context.params.breeding != "model":
        return None
    rungs = bool(getattr(context.params, "promotion", False))
    if context.memory:
        kept = {name[len("surrogate."):]: array for name, array in context.memory.items() if name.startswith("surrogate.")}
        return Surrogate.restored(context.rng, kept, context.state.get("surrogate"), rungs)
    return Surrogate.from_state(context.rng, context.records, context.state.get("surrogate"), rungs)


@register
class SteadyState(_Breeder):
    """``async``: breed from the population as it stands; each result may replace the worst member.

    The first ``population`` proposals are random; after that each is a child of the population at
    the moment it is asked for, so no worker ever waits for a generation.
    """

    name = mode = "async"
    capabilities = Capabilities(barrier=False, order_matters=True, breeding=("blind", "model"), selection=("fitness", "ensemble"),
                                promotion=True)

    @classmethod
    def create(cls, context: Context) -> SteadyState:
        if context.memory:  # a resume from the state file alone: no records (see memory)
            made = cls(context.space, context.params, context.rng, {}, _known(context), {}, _surrogate(context), context.value)
            made.restore(context.memory)
        else:
            made = cls(context.space, context.params, context.rng, _by_id(context), _known(context), context.state, _surrogate(context),
                       context.value).caught_up(context)
        made.resume_brood(context.state, made.population)
        return made

    def __init__(self, space, params, rng, records: dict[int, Record], known, state: dict, surrogate: Surrogate | None = None,
                 value: Value | None = None):
        super().__init__(space, params, rng, known, surrogate, value)
        self.rungs = bool(getattr(params, "promotion", False))
        self.population = Population((_individual(records[i], self.rungs) for i in state.get("population", [])), len(space))
        self.pool: list[Proposal] = []  # model breeding: children ranked together, handed out best first

    def ask(self) -> Proposal:
        if len(self.population) < self.params.population:
            return self.random()
        self.select_by_value(self.population)
        if self.surrogate is None:
            return self.child(self.population)
        if self.surrogate.refit_if_due():
            self.pool.clear()  # ranked by the old model
        if not self.surrogate.ready:
            return self.child(self.population)
        if not self.pool:
            # One predict call ranks a pool: a child per ask at first, up to POOL_MAX at scale, where the
            # population changes little between asks and a call's fixed cost would dominate.
            self.pool = self.ranked_children(self.population, min(POOL_MAX, 1 + len(self.surrogate) // 64))
            if not self.pool:  # every candidate decodes to a network proposed before
                return self.child(self.population)
        proposal = self.pool.pop(0)
        self.seen.add(proposal.key)
        return proposal

    def tell(self, record: Record) -> None:
        self.note_outcome(record)
        if not _scored(record):
            pass
        elif self.rungs and record.network >= 0 and self._carry_on(record):
            self.forget_brood()  # a promoted network's next stage took its earlier stage's place
        elif self.value is not None:
            admit_by_value(self.population, _individual(record, self.rungs), self.params.population, self.value)
            self.forget_brood()
        elif not self.rungs and len(self.population) >= self.params.population and \
                fitness_wvalues(record.fitness) <= self.population[self.population.worst()].fitness.wvalues:
            pass  # no better than the worst member: admit would turn it away (most results, once the population has converged)
        else:
            newcomer = _individual(record, self.rungs)
            if admit(self.population, newcomer, self.params.population) is not newcomer:
                self.forget_brood()
        if self.surrogate is not None:
            self.surrogate.tell(record)

    def _carry_on(self, record: Record) -> bool:
        """A promoted network's stage replaces its stage before in the population, if that is there (it ranks
        higher: a rung further on); True if it did."""
        at = self.population.index_of(record.parents[0])
        if at is None:
            return False
        self.population[at] = _individual(record, True)
        return True

    def to_state(self) -> dict:
        return {"mode": self.mode, "population": [ind.ident for ind in self.population], **self.brood_state(), **self.surrogate_state()}

    def memory(self) -> dict[str, np.ndarray] | None:
        """What a resume needs besides :meth:`to_state`, so that it reads no history: the breeder's, with the population
        (id, fitness, the rung it reached (-1 without promotion) and genome of each member)."""
        kept = self.bred_memory()
        members = self.population
        rows = [(ind.ident, ind.value, ind.fitness.values[0] if self.rungs else -1) for ind in members]
        return {**kept, "population": np.asarray(rows, dtype=np.float64).reshape(-1, 3),
                "genomes": np.asarray([list(ind) for ind in members], dtype=np.float64).reshape(len(members), len(self.space))}

    def restore(self, memory: dict[str, np.ndarray]) -> None:
        super().restore(memory)
        self.population = Population((Individual.evaluated(list(genome), value, int(ident), int(rung) if self.rungs else None)
                                      for (ident, value, rung), genome in zip(memory["population"].tolist(), memory["genomes"].tolist())),
                                     len(self.space))
