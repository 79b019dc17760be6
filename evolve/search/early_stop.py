"""The median stopping rule, kept on the master at a list append per epoch reported.

The rule is Google Vizier's (Golovin et al., "Google Vizier", KDD 2017, section 3.2.2): a training
stops after epoch e if its best validation fitness so far is below the median, over the earlier
networks that reached epoch e, of their running averages (the mean of their fitness after epochs
1..e). The running average of a rising curve lies below its last value, and the best so far above a
noisy curve's last value, so the rule stops only networks clearly worse than a typical one, and
rarely one that would end among the best (docs/search-space.md, "Early stopping", compares rules).

Two guards:

* a network is never judged before ``warmup`` epochs (``search.early_stopping_warmup``, applied by
  the worker), nor in the first third of its own planned epochs (:data:`PLANNED_FRACTION`; the bars
  sent are NaN there): a network planned for 12 epochs at a large batch size has had few optimiser
  steps after 2 epochs, and its batch-norm statistics have not settled, so its early validation
  scores say little of its end;
* an epoch's median is a bar only once :data:`MIN_PEERS` networks have reached that epoch.

Every network that reached epoch e counts, a stopped one too (up to where it stopped), so the peers
of an early epoch do not depend on what the rule stopped. The master keeps one running median per
epoch (a sorted array, merged with what came since whenever the bars are rebuilt) and sends each
task the bars for its epochs; the worker applies the rule itself, so no training ever waits on a
message. Results bring their curves (the fitness after each epoch) back in their header.

Only finite values count: a curve's running averages end at its first NaN or infinite value, so a
diverged network never moves a median.

With successive halving (``search.stage_early_stopping``) a network's curve comes back in stages, each
record's the whole curve so far: the rule takes in only the epochs a stage added (it remembers how far
each paused network's curve was told), so every network counts once at every epoch it reached.
"""
from __future__ import annotations

import json
import math

import numpy as np

from .records import Record, network_of

MIN_PEERS = 5  # an epoch's median is a bar only once this many networks have reached it
PLANNED_FRACTION = 1 / 3  # no bar in the first third of a network's planned epochs


KEPT_VALUES = 1 << 16  # values an epoch's median keeps before thinning them (RunningMedian): 512 KB an epoch at most


class RunningMedian:
    """The median of the values added so far: exact up to ``cap`` values, then within a fraction of a percentile.

    The values are kept sorted in a numpy array; those added since the median was last asked for wait
    in a list, and are merged in when it is asked for again (sorted, then one O(n) merge). The master
    asks once per ``n / 64`` results (:class:`BarCache`), so adding a value costs a list append,
    and the merges some 64 moves of a float64 per value, in C, rather than O(log n) Python
    operations per value as with heaps.

    Memory stays bounded at millions of values: past ``cap`` kept values, every second one of the sorted
    array is dropped (starting at the first or the second, in turn) and each kept value stands for twice as
    many; of the values added since, one in ``weight`` is then kept at each merge, evenly through their sorted
    order from a random start (so each is kept with probability 1 / ``weight``, and no part of the order is
    favoured). Measured on 300,000 values in 300 batches (tests/test_early_stop.py checks a small cap), the
    median's rank stayed within 0.02 % of the middle with the default cap, 0.23 % with a cap of 4,000.
    """

    def __init__(self, cap: int = KEPT_VALUES) -> None:
        self._sorted = np.empty(0)
        self._new: list[float] = []
        self.cap = cap
        self.weight = 1  # how many values each kept one stands for
        self._merged = 0  # values added before the last merge, thinned or not
        self._draw = np.random.default_rng(0)  # where each sampled merge starts: a fixed seed, so a search repeats
        self._flip = 0  # which half the next thinning keeps

    def __len__(self) -> int:
        """Values added, whether kept or thinned out."""
        return self._merged + len(self._new)

    def add(self, value: float) -> None:
        self._new.append(value)

    @property
    def adder(self):
        """:meth:`add`, as the bound ``append`` it comes down to (for MedianRule.tell; the list is only ever
        cleared, never replaced, so it stays bound to this median)."""
        return self._new.append

    def memory(self) -> dict[str, np.ndarray]:
        """What a resume needs to carry on exactly (:meth:`restored`): the kept values, those waiting, and the thinning's place."""
        draw = json.dumps(self._draw.bit_generator.state).encode()
        return {"kept": self._sorted, "waiting": np.asarray(self._new, dtype=np.float64),
                "counts": np.asarray([self.cap, self.weight, self._merged, self._flip], dtype=np.int64), "draw": np.frombuffer(draw, np.uint8)}

    @classmethod
    def restored(cls, memory: dict[str, np.ndarray]) -> RunningMedian:
        cap, weight, merged, flip = (int(v) for v in memory["counts"])
        median = cls(cap)
        median._sorted, median.weight, median._merged, median._flip = np.asarray(memory["kept"], dtype=np.float64), weight, merged, flip
        median._new.extend(np.asarray(memory["waiting"], dtype=np.float64).tolist())
        median._draw.bit_generator.state = json.loads(bytes(np.asarray(memory["draw"], dtype=np.uint8)).decode())
        return median

    def median(self) -> float:
        if self._new:
            new = np.array(self._new, dtype=np.float64)
            self._new.clear()
            self._merged += new.size
            new.sort()
            if self.weight > 1:  # one in ``weight`` of the new values, evenly through their order, from a random start
                new = new[int(self._draw.integers(self.weight)):: self.weight]
            merged = np.concatenate((self._sorted, new))
            merged.sort(kind="stable")  # two sorted runs: one O(n) merge
            while merged.size > self.cap:
                merged = merged[self._flip::2].copy()
                self._flip ^= 1
                self.weight *= 2
            self._sorted = merged
        n = self._sorted.size
        if not n:
            return math.nan
        mid = n // 2
        return float(self._sorted[mid]) if n % 2 else (float(self._sorted[mid - 1]) + float(self._sorted[mid])) / 2


class MedianRule:
    """Per-epoch running medians of the running averages of every network that reported its curve.

    ``tell`` costs a list append per epoch of the curve told; ``bars`` O(n) per epoch after new
    values, O(1) else (see :class:`RunningMedian`). The master's cost with long curves is measured
    by scripts/bench/bench_master.py --curve-epochs 50 (docs/benchmarks.md).
    """

    def __init__(self, records: list[Record] = (), min_peers: int = MIN_PEERS, planned_fraction: float = PLANNED_FRACTION):
        self.min_peers = min_peers
        self.planned_fraction = planned_fraction
        self._by_epoch: list[RunningMedian] = []
        self._adders: list = []  # each epoch's RunningMedian.adder
        self._told: dict[int, int] = {}  # a paused network (successive halving) -> the epochs of its curve told so far
        for record in records:
            self.tell(record)

    def memory(self) -> dict[str, np.ndarray] | None:
        """Each epoch's median as :meth:`RunningMedian.memory` gives it, named ``<epoch>.<part>``; None while paused networks'
        curves are half told (successive halving: such a search resumes from its history)."""
        if self._told:
            return None
        return {f"{epoch}.{name}": value for epoch, median in enumerate(self._by_epoch) for name, value in median.memory().items()}

    @classmethod
    def restored(cls, memory: dict[str, np.ndarray], min_peers: int = MIN_PEERS, planned_fraction: float = PLANNED_FRACTION) -> MedianRule:
        """The rule as :meth:`memory` left it."""
        rule = cls(min_peers=min_peers, planned_fraction=planned_fraction)
        for epoch in range(len({name.split(".")[0] for name in memory})):
            median = RunningMedian.restored({name: memory[f"{epoch}.{name}"] for name in ("kept", "waiting", "counts", "draw")})
            rule._by_epoch.append(median)
            rule._adders.append(median.adder)
        return rule

    def tell(self, record: Record) -> None:
        adders, total, isfinite = self._adders, 0.0, math.isfinite
        told = self._told.pop(network_of(record), 0) if self._told or record.network >= 0 else 0
        if record.status == "paused":
            self._told[network_of(record)] = len(record.curve)
        for epoch, fitness in enumerate(record.curve):  # the running average after each epoch, to the first non-finite value
            if not isfinite(fitness):
                break
            total += fitness
            if epoch < told:
                continue  # an earlier stage of this network told it
            if epoch == len(adders):
                self._by_epoch.append(RunningMedian())
                adders.append(self._by_epoch[-1].adder)
            adders[epoch](total / (epoch + 1))  # the bound append, not add: this runs for every epoch told

    def settle(self) -> None:
        """Merge the values waiting at every epoch (:meth:`RunningMedian.median` does), so that memory stays bounded at
        epochs no bar is asked for (those in the first third of every network's plan)."""
        for median in self._by_epoch:
            median.median()

    def bars(self, epochs: int) -> tuple[float, ...]:
        """The bar for a network planned for ``epochs`` epochs, after each of them (index e: after epoch e + 1).

        NaN (no bar) in the first ``planned_fraction`` of the epochs, and while fewer than
        ``min_peers`` networks reached the epoch; else the median of their running averages there.
        A network stops where its best fitness so far is below the bar (ensemble.train.Watch).
        """
        first = math.ceil(self.planned_fraction * epochs - 1e-9)  # epochs done before the first bar
        bars = []
        for epoch in range(epochs):
            medians = self._by_epoch[epoch] if epoch < len(self._by_epoch) else None
            judged = epoch + 1 >= first and medians is not None and len(medians) >= self.min_peers
            bars.append(medians.median() if judged else math.nan)
        return tuple(bars)


class BarCache:
    """The early-stopping bars tasks carry (:meth:`MedianRule.bars`), rebuilt only as often as they can move.

    A bar is the median of thousands of values late in a search; one more result moves it by half a
    rank at most. So the bars are rebuilt after every result while fewer than 64 are known, and then
    once per ``n // 64`` new results: a task's bars reflect all but at most 1/64 of the results told
    so far. Each length is built once per rebuild, not once per task.
    """

    def __init__(self, rule: MedianRule, told: int):
        self.rule, self.told = rule, told
        self.built_at = -1
        self.cache: dict[int, tuple[float, ...]] = {}

    def tell(self, record: Record) -> None:
        self.rule.tell(record)
        self.told += 1

    def bars(self, epochs: int) -> tuple[float, ...]:
        if self.told - self.built_at > self.told >> 6:
            self.cache.clear()
            self.built_at = self.told
            self.rule.settle()  # every epoch's values merged, those no bar asks for too: none waits long in a list
        bars = self.cache.get(epochs)
        if bars is None:
            bars = self.cache[epochs] = self.rule.bars(epochs)
        return bars
