"""``nsga2``: NSGA-II, generational with two objectives (the validation fitness, maximised, and a cost, minimised).

The cost is the network's trainable parameters (``params``) or its measured inference latency (``latency``,
microseconds per sample). It is :class:`evolve.search.generational.Generational` (the same barrier and the same
determinism) with another choice of parents and survivors: parents are binary tournament winners on Pareto rank,
then crowding distance; the next population is DEAP's ``selNSGA2`` over parents and children. The Pareto front
over every successful evaluation so far is kept as it grows (:class:`~evolve.search.pareto.ParetoFront`) and
stored with the strategy's state. With successive halving, promotion is by Pareto rank within the rung.
"""
from __future__ import annotations

from . import named
from .ga import Individual, nsga2_survivors, pareto_individual, pareto_ranks
from .pareto import OBJECTIVES, ParetoFront, objective_value
from .records import Record, best_first
from .registry import Capabilities, Context, register
from .generational import Generational
from .strategy import Proposal, _by_id, _known


@register
class NSGA2(Generational):
    """``nsga2``: generational NSGA-II on (validation fitness, maximised; ``objective``, minimised).

    Generation 0 is random; each later generation's children are bred from the population by
    binary tournaments on Pareto rank, then crowding distance (uniform crossover and bounded
    polynomial mutation as in the other modes), and the next population is DEAP's ``selNSGA2``
    over parents and children ((mu + lambda)), fed in id order so that ties never depend on
    arrival. Only successful evaluations that report the objective enter the population or
    the front. The barrier, the queue and the determinism are :class:`Generational`'s.
    """

    name = mode = "nsga2"
    capabilities = Capabilities(barrier=True, order_matters=False, objectives=2, promotion=True)

    @classmethod
    def create(cls, context: Context) -> NSGA2:
        if context.memory:  # a resume from the state file alone (see Generational.memory)
            records = named.records(context.memory, OBJECTIVES[context.objective]) if context.objective in OBJECTIVES else {}
            return cls(context.space, context.params, context.rng, records, _known(context), context.state,
                       context.objective).remembered(context)
        return cls(context.space, context.params, context.rng, _by_id(context), _known(context), context.state,
                   context.objective).caught_up(context)

    def __init__(self, space, params, rng, records: dict[int, Record], known, state: dict, objective: str = "params"):
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown second objective {objective!r} (known: {', '.join(OBJECTIVES)})")
        if state and state.get("objective", objective) != objective:
            raise ValueError(f"the run's second objective is {state.get('objective')!r}, not {objective!r}")
        self.objective = objective
        self.rung_of: dict[int, int] = {}  # a member's rung (search.promotion): the pool is ranked by it first
        super().__init__(space, params, rng, records, known, state)
        self.front = ParetoFront()
        for i in state.get("front", []):
            self.front.add(i, records[i].fitness, objective_value(records[i], objective))

    def tell(self, record: Record) -> None:
        cost = objective_value(record, self.objective)
        if cost is not None and record.status == "ok":  # the front: whole trainings only
            self.front.add(record.id, record.fitness, cost)
        super().tell(record)

    def _eligible(self, record: Record) -> bool:
        return record.status in ("ok", "paused" if self.rungs else "ok") and objective_value(record, self.objective) is not None

    def _named(self, record: Record) -> named.Named:
        return named.Named.of(record, objective_value(record, self.objective))

    def _named_more(self) -> list[named.Named]:
        """The front's members (the only part of them it reads: fitness and cost), where the population does not hold them."""
        return [named.Named(ident, [0.0] * len(self.space), fitness, cost=cost) for ident, fitness, cost in self.front.points()]

    def _member(self, record: Record) -> Individual:
        self.rung_of[record.id] = record.rung
        self.named[record.id] = self._named(record)
        return pareto_individual(record.genome, record.fitness, objective_value(record, self.objective), record.id)

    def _best(self, records: list[Record], k: int) -> list[Record]:
        """Promotion by Pareto rank within the rung, then crowding distance (``selNSGA2``, ties to the earlier id); a
        stage without the objective goes on only where too few have it."""
        scored = [r for r in sorted(records, key=lambda r: r.id) if objective_value(r, self.objective) is not None]
        chosen = {ind.ident for ind in nsga2_survivors([self._member(r) for r in scored], min(k, len(scored)))}
        rest = sorted((r for r in records if r.id not in chosen), key=best_first)
        return [r for r in records if r.id in chosen] + rest[: k - len(chosen)]

    def _survivors(self, pool: list[Individual]) -> list[Individual]:
        """``selNSGA2`` over the pool; with successive halving, rung by rung from the highest (a whole training before
        any network stopped at a lower rung), ``selNSGA2`` within the rung that fills the last places."""
        pool = sorted(pool, key=lambda ind: ind.ident)
        if not self.rungs:
            return nsga2_survivors(pool, self.params.population)
        out: list[Individual] = []
        for rung in sorted({self.rung_of.get(ind.ident, self.top) for ind in pool}, reverse=True):
            group = [ind for ind in pool if self.rung_of.get(ind.ident, self.top) == rung]
            room = self.params.population - len(out)
            out += group if len(group) <= room else nsga2_survivors(group, room)
            if len(out) >= self.params.population:
                break
        return out

    def _breed(self) -> list[Proposal]:
        # NSGA-II's binary tournaments: two members drawn without replacement, the lower rank, then the larger crowding
        # distance winning (the first drawn among equals, as a coin would)
        ranks = pareto_ranks(self.population)
        self.rank_key = lambda ind: (-ranks[ind.ident][0], ranks[ind.ident][1])
        self.tournament, self.distinct = 2, True
        self.forget_brood()
        return [self.child(self.population) for _ in range(self.params.population)]

    def to_state(self) -> dict:
        return {**super().to_state(), "objective": self.objective, "front": self.front.ids()}
