"""Model-based breeding: a surrogate of the fitness, fitted to the evaluations so far, ranks bred children.

With ``search.breeding = "model"`` a strategy breeds ``search.brood`` candidate children for every
child it sends (the same tournament, crossover and mutation as blind breeding) and sends the ones
this model predicts to be best. The model is scikit-learn's ``ExtraTreesRegressor`` on the raw
genomes (each gene in [0, 1]; a tree splits a categorical gene's interval as readily as a number's),
as DeepHyper's centralised Bayesian optimisation uses it: it fits in milliseconds, needs no scaling,
and handles the conditional genes (a gene that is inactive for a family carries no signal, and the
trees learn to split on the family first). Candidates are ranked by an upper confidence bound, the
trees' mean prediction plus :data:`KAPPA` times their spread (CBO's default): ranked by the mean
alone, near-copies of the best network so far (which the trees predict to be as good as it is) win
every brood, and the search stops moving.

What it costs the master stays bounded at any scale: the model is fitted on at most
:data:`ROWS` of the latest results (by id), and fitted again only when the results it could learn
from have grown by :data:`GROWTH` since the last fit, so the fits of a 20,000-evaluation search sum
to a few seconds; candidates are scored in batches (one ``predict`` per batch). It keeps no more
than the :data:`ROWS` latest results told (a result with a lower id than all of them is in no later
fit) and the rows of its last fit.

The run file's strategy state holds how many results the last fit learned from and its trees' seed
(drawn from the search's random generator): a resume fits the same model again from the first that
many records, in the order they were told (the order the run file keeps them in), with that seed.
The master's memory (:meth:`Surrogate.memory`, evolve.engine.memory) holds the rows of the last fit
and the latest results, so that a resume that reads no history fits it from those. No model is
pickled. A generational search fits only at a generation's barrier (when :meth:`due`),
from every result told by then, learned in id order, so its results do not depend on the number of
workers.
"""
from __future__ import annotations

import heapq
import math
import random

import numpy as np

from .records import Record

ROWS = 1024  # the latest results a fit learns from: enough to rank children near today's population, cheap to fit
GROWTH = 1.25  # fit again once this many times the results of the last fit are at hand
MIN_ROWS = 8  # fewer results than this: no model, blind breeding
TREES = 32
KAPPA = 1.96  # the upper confidence bound's weight on the trees' spread


def learns_from(record: Record, rungs: bool = False) -> bool:
    """A result the model learns from: a network trained (to the end, or stopped early: its fitness is what it reached;
    with successive halving, a stage paused at its rung too)."""
    return (record.status in ("ok", "stopped") or (rungs and record.status == "paused")) and math.isfinite(record.fitness)


class Surrogate:
    """Extra trees fitted to (genome, fitness) of the results told so far.

    A fit is named by the results it learned from (the first ``rows`` told, of which the latest
    :data:`ROWS` by id) and its trees' seed; :meth:`to_state` gives both, and :meth:`from_state` fits
    the same model again from a run's records, told in the run file's order.
    """

    def __init__(self, rng: random.Random, rungs: bool = False):
        self.rng = rng
        # successive halving: the rung a result reached is one more input (as BOHB and DEHB model the budget), and
        # children are scored at the highest rung learned from
        self.rungs = rungs
        self.top = 0
        self.rows: list[tuple[int, list[float], float]] = []  # a min-heap by id of the ROWS latest (id, genome, fitness) told
        self.told = 0  # results told that it may learn from
        self.learned: list[tuple[int, list[float], float]] = []  # the rows of the last fit
        self.model = None
        self.fitted_rows = 0  # results the last fit was made from (0: never fitted)
        self.seed = 0  # the last fit's trees' seed

    @classmethod
    def from_state(cls, rng: random.Random, records, state: dict | None, rungs: bool = False) -> Surrogate:
        """The surrogate of a run whose strategy state is ``state``, told its ``records`` in the order told."""
        surrogate, fitted = cls(rng, rungs), int(state.get("rows", 0)) if state else 0
        for record in records:
            surrogate.tell(record)
            if surrogate.told == fitted and not surrogate.ready:
                surrogate.fit(int(state["seed"]))  # the first ``fitted`` results told, as the last fit had them
        if fitted > surrogate.told:
            raise ValueError(f"the run's surrogate was fitted on {fitted} results, but only {surrogate.told} are recorded")
        return surrogate

    def to_state(self) -> dict:
        return {"rows": self.fitted_rows, "seed": self.seed}

    def memory(self) -> dict[str, np.ndarray]:
        """What a resume needs besides :meth:`to_state` to carry on without the history (evolve.engine.memory): the
        rows of the last fit and the latest results, each row (id, fitness, genome (with its rung)); the count told."""
        table = lambda rows: np.asarray([(i, f, *g) for i, g, f in rows], dtype=np.float64).reshape(len(rows), -1 if rows else 0)  # noqa: E731
        return {"learned": table(sorted(self.learned)), "latest": table(sorted(self.rows)), "told": np.asarray([self.told], dtype=np.int64)}

    @classmethod
    def restored(cls, rng: random.Random, memory: dict[str, np.ndarray], state: dict | None, rungs: bool = False) -> Surrogate:
        """The surrogate :meth:`memory` and :meth:`to_state` describe: its last fit made again, from the same rows."""
        rows = lambda table: [(int(row[0]), row[2:], row[1]) for row in table.tolist()]  # noqa: E731
        surrogate = cls(rng, rungs)
        surrogate.rows, surrogate.told = rows(memory["latest"]), int(memory["told"][0])  # (a sorted list is a heap)
        if state and state.get("rows", 0) > 0:
            surrogate._fit(rows(memory["learned"]), int(state["seed"]))
            surrogate.fitted_rows = int(state["rows"])
        return surrogate

    def tell(self, record: Record) -> None:
        if learns_from(record, self.rungs):
            self.told += 1
            row = (record.id, list(record.genome) + ([float(record.rung)] if self.rungs else []), float(record.fitness))
            if len(self.rows) < ROWS:
                heapq.heappush(self.rows, row)
            elif row[0] > self.rows[0][0]:
                heapq.heapreplace(self.rows, row)

    def __len__(self) -> int:
        return self.told

    def due(self) -> bool:
        """Enough new results since the last fit to fit again."""
        return len(self) >= MIN_ROWS and len(self) >= GROWTH * self.fitted_rows

    def fit(self, seed: int | None = None) -> None:
        """Fit on the results told so far, of them the latest :data:`ROWS` by id, with trees seeded by ``seed``
        (default: drawn from the search's generator)."""
        self._fit(sorted(self.rows), self.rng.getrandbits(31) if seed is None else seed)  # by id: the order told does not matter
        self.fitted_rows = self.told

    def _fit(self, learned: list[tuple[int, list[float], float]], seed: int) -> None:
        from sklearn.ensemble import ExtraTreesRegressor  # here: importing scikit-learn takes a second

        x = np.array([genome for _, genome, _ in learned], dtype=np.float64)
        y = np.array([fitness for _, _, fitness in learned], dtype=np.float64)
        self.model = ExtraTreesRegressor(n_estimators=TREES, min_samples_leaf=2, random_state=seed, n_jobs=1)
        self.model.fit(x, y)
        self.learned, self.seed = learned, seed
        self.top = int(x[:, -1].max()) if self.rungs else 0

    def refit_if_due(self) -> bool:
        """Fit if :meth:`due`; True if it did."""
        if self.due():
            self.fit()
            return True
        return False

    @property
    def ready(self) -> bool:
        return self.model is not None

    def score(self, genomes: list[list[float]]) -> np.ndarray:
        """Each genome's upper confidence bound on its fitness: the trees' mean plus KAPPA standard deviations."""
        x = np.asarray(genomes, dtype=np.float32)  # the trees' own dtype, so that check_input=False is safe
        if self.rungs:
            x = np.hstack([x, np.full((len(x), 1), self.top, dtype=np.float32)])
        per_tree = np.stack([tree.predict(x, check_input=False) for tree in self.model.estimators_])
        return per_tree.mean(axis=0) + KAPPA * per_tree.std(axis=0)
