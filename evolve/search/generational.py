"""``generational``: a barrier per generation (see :mod:`.strategy` for what the strategies share).

A generation's children are all bred at once, when the previous generation is complete, and the next population
is the best ``population`` of parents and children ((mu + lambda), ties to the earlier id). What a run computes
depends on the seed alone, not on how many workers there are or in which order their results arrive. With
successive halving it promotes at its barrier, within the generation (synchronous successive halving, as each
bracket of Hyperband). :class:`evolve.search.nsga2.NSGA2` is this strategy with two objectives.
"""
from __future__ import annotations

import numpy as np

from . import named
from .ga import Individual
from .population import Population
from .records import Pending, Record, best_first, network_of
from .registry import Capabilities, Context, Value, register
from .rungs import rung_count
from .strategy import Proposal, _Breeder, _by_id, _individual, _known, _surrogate, candidate_key
from .surrogate import Surrogate


@register
class Generational(_Breeder):
    """``generational``: breed a whole generation at once; wait for all of it; keep the best of parents and children."""

    name = mode = "generational"
    capabilities = Capabilities(barrier=True, order_matters=False, breeding=("blind", "model"), selection=("fitness", "ensemble"),
                                promotion=True)

    @classmethod
    def create(cls, context: Context) -> Generational:
        if context.memory:  # a resume from the state file alone: the records its state names, from memory (see memory)
            made = cls(context.space, context.params, context.rng, named.records(context.memory), _known(context), context.state,
                       _surrogate(context), context.value)
            return made.remembered(context)
        return cls(context.space, context.params, context.rng, _by_id(context), _known(context), context.state, _surrogate(context),
                   context.value).caught_up(context)

    def remembered(self, context: Context) -> Generational:
        """Made from the memory of a run's state: as :meth:`caught_up`, with the networks proposed and crashed from memory."""
        self.adopt(context.pending)
        self.restore(context.memory)
        return self

    def caught_up(self, context: Context) -> Generational:
        """As a breeder catches up, and counting as out the pending individuals the state does not (:meth:`adopt`)."""
        self.adopt(context.pending)
        return super().caught_up(context)

    def __init__(self, space, params, rng, records: dict[int, Record], known, state: dict, surrogate: Surrogate | None = None,
                 value: Value | None = None):
        super().__init__(space, params, rng, known, surrogate, value)
        self.named: dict[int, named.Named] = {}  # what memory() keeps of each member's record (see _member)
        # search.promotion: successive halving within each generation (see the module's docstring)
        self.rungs = bool(getattr(params, "promotion", False))
        self.eta = int(getattr(params, "eta", 3))
        self.top = rung_count(self.eta, getattr(params, "min_budget", 1.0)) - 1 if self.rungs else 0
        self.population = Population((self._member(records[i]) for i in state.get("population", [])), len(space))
        self.generation = int(state.get("generation", 0))
        self.queue = [Proposal.from_json(item, space) for item in state.get("queue", [])]
        self.seen.update(p.key for p in self.queue)  # proposed, as before the stop
        self.outstanding = int(state.get("outstanding", 0))  # handed out, not yet told
        self.stage = [records[i] for i in state.get("stage", [])]  # the generation's stages paused at its current rung
        self.promotions = [(int(n), int(r)) for n, r in state.get("promotions", [])]  # (network, rung): decided, not yet out
        self.told = [self._member(records[i]) for i in state.get("told", []) if self._eligible(records[i])]
        if not state:  # a new search: generation 0 is random
            self.queue = [self.random() for _ in range(params.population)]

    def adopt(self, pending: list[Pending]) -> None:
        """Count as out the pending individuals that this state does not: those a job that died sent after the
        checkpoint the state comes from (the in-flight log adds them, see evolve.runfile.inflight). They went out
        after all it counts, so they hold the highest ids. One that came from the queue leaves it; one bred for a
        generation this state has not reached joins the one in progress. None is sent twice, and the barrier
        waits for them all."""
        for individual in sorted(pending, key=lambda p: p.id)[self.outstanding:]:
            if individual.network >= 0:  # a promotion
                if (individual.network, individual.rung) in self.promotions:
                    self.promotions.remove((individual.network, individual.rung))
            else:
                key = candidate_key(self.space, individual.genome)
                sent = next((i for i, p in enumerate(self.queue) if p.key == key), None)
                if sent is not None:
                    del self.queue[sent]
            self.outstanding += 1

    def ask(self) -> Proposal | None:
        if not self.queue:
            return None  # the barrier: the generation's children are all out
        self.outstanding += 1
        return self.queue.pop(0)

    def promote(self) -> tuple[int, int] | None:
        """The next promotion decided at the barrier (successive halving): ``(network, the rung it goes to)``, or None. (The
        engine opens them all at once, in this order, each carrying on its network's latest stage, and sends each to
        the worker that holds its paused training when it can.)"""
        if not self.promotions:
            return None
        self.outstanding += 1
        return self.promotions.pop(0)

    def promotions_waiting(self) -> bool:
        return bool(self.promotions)

    def tell(self, record: Record) -> None:
        self.note_outcome(record)
        self.outstanding -= 1
        if self.rungs and record.status == "paused":
            self.stage.append(record)
        elif self._eligible(record):
            self.told.append(self._member(record))
        if self.surrogate is not None:
            self.surrogate.tell(record)
        if not self.queue and not self.promotions and self.outstanding <= 0:
            self._barrier()

    def _barrier(self) -> None:
        """The generation's results so far are all in: with stages paused at a rung, the best of them go on to the
        next (the rest join the pool, ranked at their rung); else the generation is complete."""
        if not self.stage:
            self._next_generation()
            return
        chosen = {r.id for r in self._best(self.stage, max(1, len(self.stage) // self.eta))}
        self.told += [self._member(r) for r in self.stage if r.id not in chosen and self._eligible(r)]
        self.promotions = [(network_of(r), r.rung + 1) for r in sorted(self.stage, key=lambda r: r.id) if r.id in chosen]
        self.stage = []

    def _best(self, records: list[Record], k: int) -> list[Record]:
        """The ``k`` of ``records`` (stages at one rung) promoted: the best by fitness, then loss, then id."""
        return sorted(records, key=best_first)[:k]

    def _eligible(self, record: Record) -> bool:
        """May this result enter the population: a whole training that ended well, or a stage paused at its rung?"""
        return record.status == "ok" or (self.rungs and record.status == "paused")

    def _member(self, record: Record) -> Individual:
        self.named[record.id] = self._named(record)
        return _individual(record, self.rungs)

    def _named(self, record: Record) -> named.Named:
        """What :meth:`memory` keeps of a record the state may name."""
        return named.Named.of(record)

    def memory(self) -> dict[str, np.ndarray]:
        """What a resume needs besides :meth:`to_state`, so that it reads no history: the breeder's, and what the
        strategy reads of each record the state names (evolve.search.named)."""
        ids = [ind.ident for ind in [*self.population, *self.told]]
        kept = [self.named[i] for i in ids] + [self._named(r) for r in self.stage] + self._named_more()
        return {**self.bred_memory(), **named.memory(kept, len(self.space))}

    def _named_more(self) -> list[named.Named]:
        return []

    def _survivors(self, pool: list[Individual]) -> list[Individual]:
        """The next population: the best ``population`` of parents and children (by fitness, or by value to the
        ensemble, then fitness), ties to the earlier id."""
        if self.value is not None:
            values = self.value([ind.ident for ind in pool])
            order = sorted(range(len(pool)), key=lambda i: (-values[i], -pool[i].value, pool[i].ident))
            return [pool[i] for i in order[: self.params.population]]
        return sorted(pool, key=lambda ind: ind.standing)[: self.params.population]

    def _breed(self) -> list[Proposal]:
        n = self.params.population
        self.select_by_value(self.population)
        if self.surrogate is None:
            return [self.child(self.population) for _ in range(n)]
        # At the barrier every result of the generation is told, so the fit (and so the children) depend
        # on the seed alone, not on the number of workers or the order results arrived in.
        self.surrogate.refit_if_due()
        children = self.ranked_children(self.population, n) if self.surrogate.ready else []
        self.seen.update(p.key for p in children)
        return children + [self.child(self.population) for _ in range(n - len(children))]

    def _next_generation(self) -> None:
        self.population = Population(self._survivors([*self.population, *self.told]), len(self.space))
        self.forget_brood()
        self.told, self.outstanding = [], 0
        self.named = {ind.ident: self.named[ind.ident] for ind in self.population}
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
            **({"stage": [r.id for r in self.stage], "promotions": [list(p) for p in self.promotions]} if self.rungs else {}),
            "told": sorted(ind.ident for ind in self.told),  # by id, not arrival: the state is the same on any number of workers
            **self.surrogate_state(),
        }
