"""The keys of many genomes at once, for breeding in broods (:class:`~evolve.strategy.SteadyState`)."""
from __future__ import annotations

import math

import numpy as np

from .space import Choice, SearchSpace


class BatchKeys:
    """:meth:`SearchSpace.key` of many genomes at once: ``keys(matrix)[i] == space.key(matrix[i])``,
    value for value (a test holds it to that on several spaces).

    Each gene is decoded as a whole column: a choice is one index (``min(int(u * n), n - 1)``) into its
    options, an integer range an offset from its low end, a float range the same arithmetic as
    :class:`~evolve.space.Range` (log-uniform values through ``math.exp`` itself, as the space does),
    and a conditional gene is active where every gene it depends on is active and holds an allowed
    value; an inactive gene takes its default.
    """

    def __init__(self, space: SearchSpace):
        self.space = space
        genes = space.genes
        position = {g.name: i for i, g in enumerate(genes)}
        width = len(genes)
        # Every column in one pass: code = min(int(u * n), n - 1) for choices and integer ranges (n: how
        # many values), value = low + u * span for float ranges (the exponent, for log ranges).
        self.n = np.ones(width)
        self.low, self.span = np.zeros(width), np.ones(width)
        self.kinds = []  # per gene: ("choice", options) | ("int", low) | ("float",) | ("log", Range)
        for i, g in enumerate(genes):
            domain = g.domain
            if isinstance(domain, Choice):
                self.n[i] = len(domain.options)
                self.kinds.append(("choice", domain.options))
            elif domain.integer and not domain.log:
                self.n[i] = int(domain.high) - int(domain.low) + 1
                self.kinds.append(("int", int(domain.low)))
            elif domain.log:
                self.low[i] = math.log(domain.low)
                self.span[i] = math.log(domain.high) - self.low[i]
                self.kinds.append(("log", domain))
            else:
                self.low[i], self.span[i] = domain.low, domain.high - domain.low
                self.kinds.append(("float",))
        self.counted = np.array([k[0] in ("choice", "int") for k in self.kinds])
        self._top = (self.n - 1).astype(np.int64)
        self._options: dict[int, np.ndarray] = {}  # per choice gene: its options as an object array, to index with codes
        self._defaults: dict[int, np.ndarray] = {}  # ... and its default, as a 0-d object array (to assign to many rows)
        for i, kind in enumerate(self.kinds):
            if kind[0] == "choice":
                table = self._options[i] = np.empty(len(kind[1]), dtype=object)
                for j, option in enumerate(kind[1]):
                    table[j] = option  # one by one: an option that is a tuple stays one object
                default = self._defaults[i] = np.empty((), dtype=object)
                default[()] = genes[i].default
        order, seen = [], set()

        def visit(i: int) -> None:  # conditions first (a space's conditions never form a cycle)
            if i not in seen:
                seen.add(i)
                for other, _ in genes[i].conditions():
                    visit(position[other])
                order.append(i)

        for i in range(width):
            visit(i)
        # per conditional gene, in order: [(gene j, table: is the value with code c allowed?)]
        self.plan = []
        for i in order:
            needs = genes[i].conditions()
            if needs:
                self.plan.append((i, [(position[other], self._allowed(genes[position[other]], frozenset(values))) for other, values in needs]))

    @staticmethod
    def _allowed(gene, allowed: frozenset) -> np.ndarray:
        """A table: is the value with code c in ``allowed`` (a choice's option index, an integer's offset)?"""
        domain = gene.domain
        values = domain.options if isinstance(domain, Choice) else domain.values()
        return np.array([v in allowed for v in values], dtype=bool)

    def keys(self, genomes: np.ndarray) -> list[tuple]:
        u = np.clip(np.asarray(genomes, dtype=np.float64), 0.0, 1.0)
        count, width = u.shape
        if width != len(self.kinds):
            raise ValueError(f"genomes have {width} genes, the space has {len(self.kinds)}")
        codes = np.minimum((u * self.n).astype(np.int64), self._top)  # (count, genes)
        numbers = self.low + u * self.span
        logs = {}  # log ranges first: an integer one's code is its rounded value, which a condition may test
        for i, kind in enumerate(self.kinds):
            if kind[0] == "log":
                domain, exp = kind[1], math.exp
                values = [exp(x) for x in numbers[:, i].tolist()]
                if domain.integer:
                    lo, hi = int(domain.low), int(domain.high)
                    values = [min(max(int(round(v)), lo), hi) for v in values]
                    codes[:, i] = values
                    codes[:, i] -= lo
                logs[i] = values
        inactive: dict[int, np.ndarray] = {}  # per conditional gene inactive somewhere: where
        active: list[np.ndarray | None] = [None] * width  # None: active everywhere
        for i, needs in self.plan:
            here = None
            for j, table in needs:
                ok = table[codes[:, j]]
                if active[j] is not None:
                    ok &= active[j]
                here = ok if here is None else here & ok
            active[i] = here
            if not here.all():
                inactive[i] = ~here
        columns = []  # each gene's values, as Python objects (only the columns each kind needs are converted)
        for i, kind in enumerate(self.kinds):
            tag, off = kind[0], inactive.get(i)
            if tag == "choice":
                options = kind[1]
                if off is None and len(options) == 1:
                    columns.append([options[0]] * count)
                    continue
                column = self._options[i][codes[:, i]]
                if off is not None:  # an inactive gene takes its default (whole-array: one object, a tuple too)
                    column[off] = self._defaults[i]
                columns.append(column.tolist())
                continue
            if tag == "int":
                column = (codes[:, i] + kind[1]).tolist()
            elif tag == "float":
                column = numbers[:, i].tolist()
            else:
                column = logs[i]
            if off is not None:
                default = self.space.genes[i].default
                for row in np.flatnonzero(off).tolist():
                    column[row] = default
            columns.append(column)
        return list(zip(*columns))
