"""The records a generational strategy's state names, kept in the master's memory (evolve.engine.memory) so that a
resume reads no history.

A generational strategy (``generational``, ``nsga2``) rebuilds itself from the records its ``to_state()`` names: the
population, the generation's results told so far, its stages paused at a rung, nsga2's Pareto front. Of each it reads
only the id, genome, fitness, validation loss, rung, network, whether it is paused, and nsga2's second objective.
:func:`memory` keeps those as two arrays (about 8 bytes a gene and 56 a record, for the few hundred records a
generation names), and :func:`records` makes records again that carry them, which the strategy's constructor reads
as it reads the run file's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .records import Record

_COLUMNS = ("id", "fitness", "loss", "rung", "network", "paused", "cost")


@dataclass(frozen=True)
class Named:
    """What a strategy reads of a record its state names (``cost``: nsga2's second objective, NaN if none)."""

    id: int
    genome: list[float]
    fitness: float
    loss: float = math.inf
    rung: int = 0
    network: int = -1
    paused: bool = False
    cost: float = math.nan

    @classmethod
    def of(cls, record: Record, cost: float | None = None) -> Named:
        return cls(record.id, list(record.genome), record.fitness, record.loss, record.rung, record.network, record.status == "paused",
                   math.nan if cost is None else cost)


def memory(named: list[Named], genes: int) -> dict[str, np.ndarray]:
    """``named`` as arrays: ``named`` (a row of :data:`_COLUMNS` each, by id) and ``named_genomes``. Of two for the same
    id, the first is kept."""
    unique = sorted({n.id: n for n in reversed(named)}.values(), key=lambda n: n.id)
    rows = [(n.id, n.fitness, n.loss, n.rung, n.network, n.paused, n.cost) for n in unique]
    return {"named": np.asarray(rows, dtype=np.float64).reshape(len(rows), len(_COLUMNS)),
            "named_genomes": np.asarray([n.genome for n in unique], dtype=np.float64).reshape(len(unique), genes)}


def records(memory: dict[str, np.ndarray], cost_metric: str | None = None) -> dict[int, Record]:
    """The records :func:`memory` kept, by id: each with its genome, fitness, status (``ok`` or ``paused``), rung and
    network, its loss as the metric ``val_loss`` and its cost as ``cost_metric``, where it has them."""
    out = {}
    for (ident, fitness, loss, rung, network, paused, cost), genome in zip(memory["named"].tolist(), memory["named_genomes"].tolist()):
        metrics = {"val_loss": loss} if not math.isinf(loss) else {}
        if cost_metric is not None and not math.isnan(cost):
            metrics[cost_metric] = cost
        out[int(ident)] = Record(id=int(ident), genome=genome, status="paused" if paused else "ok", fitness=fitness, metrics=metrics,
                                 rung=int(rung), network=int(network))
    return out
