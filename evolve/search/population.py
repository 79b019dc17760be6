"""The GA's population as a list of individuals with their genomes and fitness kept beside it as arrays.

Breeding (:func:`evolve.search.ga.breed`) reads every member's genome and fitness, and steady-state replacement
(:func:`evolve.search.ga.admit`) looks for the worst member, once a result. At scale a population holds thousands
of networks (docs/cluster.md's campaign: 2,800) and changes by one member a result, so both read arrays kept as the
members change, not a pass over the members in Python each result (docs/benchmarks.md, "The master's CPU per
evaluation": a population of thousands).
"""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from .ga import Individual


class Population:
    """A list of :class:`Individual` (``len``, iteration, indexing, ``append``, item assignment) whose genomes,
    fitness (``wvalues``) and ids are also rows of arrays, written as members are: :attr:`genomes`,
    :meth:`standing` and :meth:`worst` read them."""

    def __init__(self, members: Iterable[Individual] = (), genes: int | None = None):
        members = list(members)
        genes = genes if genes is not None else len(members[0]) if members else 0
        self._members: list[Individual] = []
        self._genomes = np.empty((max(len(members), 8), genes))
        self._fitness = np.empty((len(self._genomes), 0))
        self._idents = np.empty(len(self._genomes), dtype=np.int64)
        self._worst: int | None = None  # cached until a member changes
        self._where: dict[int, int] = {}  # id -> index
        for ind in members:
            self.append(ind)

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Individual]:
        return iter(self._members)

    def __getitem__(self, i: int) -> Individual:
        return self._members[i]

    def __repr__(self) -> str:
        return f"Population({self._members!r})"

    def append(self, ind: Individual) -> None:
        n = len(self._members)
        self._fit(ind, n)
        if n == len(self._idents):  # grown by doubling
            self._genomes = np.concatenate([self._genomes, np.empty_like(self._genomes)])
            self._fitness = np.concatenate([self._fitness, np.empty_like(self._fitness)])
            self._idents = np.concatenate([self._idents, np.empty_like(self._idents)])
        self._members.append(ind)
        self._write(n, ind)

    def __setitem__(self, i: int, ind: Individual) -> None:
        i = range(len(self._members))[i]  # (an index out of range raises IndexError, as a list's)
        self._fit(ind, len(self._members) - 1)
        self._where.pop(self._members[i].ident, None)
        self._members[i] = ind
        self._write(i, ind)

    def _fit(self, ind: Individual, others: int) -> None:
        """Refuse a member of another shape than the ``others``; the first one says what the arrays hold."""
        genes, objectives = len(ind), len(ind.fitness.wvalues)
        if (self._genomes.shape[1], self._fitness.shape[1]) != (genes, objectives):
            if others:
                raise ValueError(f"a population's members have {self._genomes.shape[1]} genes and {self._fitness.shape[1]} "
                                 f"objectives, not {genes} and {objectives}")
            self._genomes = np.empty((len(self._idents), genes))
            self._fitness = np.empty((len(self._idents), objectives))

    def _write(self, i: int, ind: Individual) -> None:
        self._genomes[i] = ind
        self._fitness[i] = ind.fitness.wvalues
        self._idents[i] = ind.ident
        self._where[ind.ident] = i
        self._worst = None

    @property
    def genomes(self) -> np.ndarray:
        """The members' genomes, one row each (a view: read it before the population changes)."""
        return self._genomes[: len(self._members)]

    def standing(self) -> np.ndarray:
        """What tournaments compare (higher is better): each member's ``wvalues``, one row a member (one column for one
        objective: then a vector), compared as DEAP compares them, as tuples (a view: read it before the population
        changes)."""
        fitness = self._fitness[: len(self._members)]
        return fitness[:, 0] if fitness.shape[1] == 1 else fitness

    def worst(self) -> int:
        """The index of the member of lowest fitness (``wvalues`` compared as tuples), the latest id among equals: the
        one that a better newcomer replaces."""
        if self._worst is None:
            fitness = self._fitness[: len(self._members)]
            lowest = np.arange(len(fitness))
            for column in fitness.T:
                values = column[lowest]
                lowest = lowest[values == values.min()]
            self._worst = int(lowest[np.argmax(self._idents[lowest])])
        return self._worst

    def index_of(self, ident: int) -> int | None:
        """Where the member of id ``ident`` is, or None."""
        return self._where.get(ident)
