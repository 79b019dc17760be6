"""Asynchronous successive halving (ASHA, Li et al. 2020): which network, paused at which rung, trains on next.

A network trains in stages (ensemble.paused): its first stage to the lowest rung, and each promotion on to
the next rung, carrying on from where it paused. Rungs are fractions of the network's own planned
epochs (its ``epochs`` gene): with reduction factor ``eta`` and minimum budget ``min_budget``, rung i is
``min_budget * eta**i`` of them, up to the last rung, the whole training. So every network has the same
rungs, and the networks at a rung have all trained the same share of their plans.

A network at rung i is promotable once it is among the best ``n_i // eta`` of the ``n_i`` results at rung i
(fitness, then validation loss, then id: ensemble.hall_of_fame.standing's order) and has not been promoted.
No worker ever waits for a rung to fill: a rung promotes as soon as it has ``eta`` results. :class:`RungTable`
answers in O(log n) per result.

A paused training lives in the memory of the worker that trained it (its holder: ensemble.paused.PausedCache),
so a promotion goes to its holder, which carries it on; any other worker would train it again from the start.
A free worker takes a promotion it holds (highest rung first) before a new network, and a new network before
a promotion another worker holds, which it takes only when it has nothing else to do (the holders of the
promotions waiting are busy, and the budget starts no new network): a promotion waits for its holder at most
one of the holder's trainings. The holders are the master's bookkeeping only (:meth:`Halving.hold`); a resume
starts with none, and every promotion it makes trains from the start.
"""
from __future__ import annotations

import heapq
import math
import struct
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from evolve.engine.evaluations import WHOLE
from evolve.errors import RunDirError
from evolve.search.records import Pending, Record, network_of
from evolve.search.rungs import rung_count, rung_epochs

__all__ = ["HELD_ELSEWHERE", "Halving", "RungTable", "rung_count", "rung_epochs"]

HELD_ELSEWHERE = -2  # Halving.part_for: every part of a promotion left is held paused by another worker
# the networks whose holders the master remembers, at least (the search loop raises it to HOLDERS_PER_WORKER a worker):
# a bound on the master's memory where most networks stay paused below a rung's top for good
HOLDERS_MAX, HOLDERS_PER_WORKER = 65_536, 64


_SIGN = 1 << 63
_BITS = (1 << 64) - 1


def _ordered(x: float) -> int:
    """A float as a 64-bit integer in the same order (-0.0 as 0.0)."""
    bits = struct.unpack("<Q", struct.pack("<d", x + 0.0))[0]
    return bits ^ _BITS if bits & _SIGN else bits | _SIGN


def _unordered(n: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", n ^ _SIGN if n & _SIGN else n ^ _BITS))[0]


_FAILED = _ordered(-math.inf)


def _packed(fitness: float, minus_loss: float, ident: int) -> int:
    """A result's rank as one integer, higher is better: ``fitness``, then ``minus_loss``, then the earlier ``ident``.
    One int (some 60 bytes) instead of a tuple of three numbers (some 170): the tables hold one a result."""
    return (_ordered(fitness) << 128) | (_ordered(minus_loss) << 64) | (_SIGN - 1 - ident)


def _key(fitness: float, loss: float, ident: int) -> int:
    """Higher is better: fitness, then lower loss, then the earlier id (a failure's fitness is -inf, its loss inf)."""
    return _packed(fitness if math.isfinite(fitness) else -math.inf, -loss if not math.isnan(loss) else -math.inf, ident)


def _ident(key: int) -> int:
    """The network of a key (or of a negated one)."""
    return _SIGN - 1 - (abs(key) & _BITS)


def _parts(key: int) -> tuple[float, float, int]:
    """(fitness, minus the loss, minus the id): a key as RungTable.memory keeps it."""
    return _unordered(key >> 128), _unordered((key >> 64) & _BITS), -_ident(key)


@dataclass
class _Rung:
    top: list = field(default_factory=list)  # min-heap of the best n // eta results' keys (its worst first)
    rest: list = field(default_factory=list)  # max-heap (negated keys) of the others
    ready: list = field(default_factory=list)  # max-heap (negated keys) of unpromoted results that were in the top
    held: dict = field(default_factory=dict)  # worker -> a heap like ``ready``, of the networks whose paused training it holds
    # (None -> of those no worker is known to hold: after a resume, any worker trains them again alike)
    promoted: set = field(default_factory=set)
    results: int = 0

    def in_top(self, key: int) -> bool:
        """Is ``key`` among the best ``n // eta`` (the top holds exactly those: keys are unique)?"""
        return bool(self.top) and key >= self.top[0]


class RungTable:
    """The results at each rung but the last, and the promotions made from them."""

    def __init__(self, eta: int, rungs: int, holders: Callable[[int], tuple[int, ...]] = lambda ident: ()):
        """``holders(network)``: the workers that hold its paused training (one, or one per fold), which take its
        promotion first (Halving's bookkeeping); none known: any worker."""
        self.eta, self.rungs = eta, rungs
        self._rungs = [_Rung() for _ in range(rungs - 1)]
        self._holders = holders

    def add(self, rung: int, ident: int, fitness: float, loss: float) -> None:
        """A network's result at ``rung`` (a failure too: it counts among the rung's results, last)."""
        if rung >= self.rungs - 1:
            return  # the whole training: nothing to promote to
        r, key = self._rungs[rung], _key(fitness, loss, ident)
        r.results += 1
        heapq.heappush(r.rest, -key)
        self._balance(r)

    def _balance(self, r: _Rung) -> None:
        size = r.results // self.eta
        while r.rest and r.top and -r.rest[0] > r.top[0]:  # the best of the rest beats the worst of the top: swap
            best, worst = -heapq.heappop(r.rest), heapq.heappop(r.top)
            heapq.heappush(r.rest, -worst)
            self._enter(r, best)
        while len(r.top) < size and r.rest:
            self._enter(r, -heapq.heappop(r.rest))

    def _enter(self, r: _Rung, key: int) -> None:
        heapq.heappush(r.top, key)
        ident = _ident(key)
        if ident not in r.promoted and key >> 128 != _FAILED:
            heapq.heappush(r.ready, -key)
            for worker in self._holders(ident) or (None,):
                heapq.heappush(r.held.setdefault(worker, []), -key)

    @staticmethod
    def _next(r: _Rung, heap: list) -> int | None:
        """The best network of ``heap`` (the rung's ready heap, or a holder's) that may be promoted now, or None.
        Entries that fell out of the top, or were promoted, are dropped here, lazily."""
        while heap and (not r.in_top(-heap[0]) or _ident(heap[0]) in r.promoted):
            heapq.heappop(heap)
        return _ident(heap[0]) if heap else None

    def due(self) -> bool:
        """Is a promotion due now (without making it)?"""
        return any(self._next(r, r.ready) is not None for r in self._rungs)

    def promotion(self, holder: int | None = None) -> tuple[int, int] | None:
        """The next promotion, marked made: ``(network id, the rung it goes to)``, highest rung first; None if none is
        due. With ``holder``, only one whose paused training that worker holds, or that no worker is known to hold."""
        for rung in range(self.rungs - 2, -1, -1):
            r = self._rungs[rung]
            for heap in ((r.ready,) if holder is None else (r.held.get(holder), r.held.get(None))):
                ident = self._next(r, heap) if heap is not None else None
                if ident is not None:
                    heapq.heappop(heap)  # (its entries in the other heaps go lazily: it is promoted)
                    r.promoted.add(ident)
                    return ident, rung + 1
        return None

    def mark_promoted(self, rung: int, ident: int) -> None:
        """A promotion made before (a resume rebuilding the table): never made again."""
        if rung < self.rungs - 1:
            self._rungs[rung].promoted.add(ident)

    def memory(self) -> dict[str, np.ndarray]:
        """What a resume needs to rebuild the table without the history (evolve.engine.memory): each rung's results, as
        their keys (fitness, minus the loss, minus the id: 24 bytes each), and the networks promoted from it."""
        out = {}
        for i, r in enumerate(self._rungs):
            keys = [_parts(key) for key in r.top] + [_parts(-key) for key in r.rest]
            out[f"rung{i}.keys"] = np.asarray(keys, dtype=np.float64).reshape(len(keys), 3)
            out[f"rung{i}.promoted"] = np.asarray(sorted(r.promoted), dtype=np.int64)
        return out

    @classmethod
    def restored(cls, eta: int, rungs: int, memory: dict[str, np.ndarray],
                 holders: Callable[[int], tuple[int, ...]] = lambda ident: ()) -> RungTable:
        """The table :meth:`memory` describes, as adding its results one by one makes it (no worker holds a paused
        training after a resume: every promotion ready is anyone's). One sort a rung: a sorted list is a heap."""
        table = cls(eta, rungs, holders)
        for i, r in enumerate(table._rungs):
            keys = sorted((_packed(a, b, -int(c)) for a, b, c in memory[f"rung{i}.keys"].tolist()), reverse=True)
            r.results, size = len(keys), len(keys) // eta
            r.promoted = set(memory[f"rung{i}.promoted"].tolist())
            r.top = keys[:size][::-1]
            r.rest = [-key for key in keys[size:]]
            r.ready = [-key for key in keys[:size] if _ident(key) not in r.promoted and key >> 128 != _FAILED]
            r.held = {None: list(r.ready)} if r.ready else {}
        return table

    def occupancy(self) -> list[dict]:
        """Per rung but the last: its results and promotions so far."""
        return [{"rung": i, "results": r.results, "promoted": len(r.promoted)} for i, r in enumerate(self._rungs)]


class Genomes:
    """The paused networks' genomes, by network, in memory: what a search without a run directory keeps (its checkpoints
    hold them too). With a run directory they are in a file instead (evolve.runfile.genomes.GenomeFile, the same methods)."""

    in_memory = True

    def __init__(self):
        self._rows: dict[int, array] = {}

    def put(self, network: int, genome) -> None:
        self._rows[network] = array("d", genome)

    def get(self, network: int) -> list[float] | None:
        row = self._rows.get(network)
        return None if row is None else row.tolist()

    def drop(self, network: int) -> None:
        """``network`` is paused no more (trained to the end, or failed): its genome is not needed again."""
        self._rows.pop(network, None)

    def items(self):
        return self._rows.items()

    def memory(self) -> dict[str, np.ndarray]:
        return {}

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


class Halving:
    """Successive halving in the search loop: the rung table, each network's latest stage, and what a stage's
    task is held to. A resume rebuilds it from the records and the pending stages (:meth:`of`), or from what the last
    checkpoint kept of it (:meth:`memory`, :meth:`restored`) where it read no history."""

    def __init__(self, eta: int, min_budget: float, asynchronous: bool = True, genomes: Genomes | None = None):
        self.eta, self.min_budget = eta, min_budget
        # True: the table promotes as results come (ASHA); False: the strategy promotes at its barrier (Generational)
        self.asynchronous = asynchronous
        self.rungs = rung_count(eta, min_budget)
        self.table = RungTable(eta, self.rungs, lambda network: tuple(dict.fromkeys(self._held(network).values())))
        # each paused network's genome (what its promotion trains): in a file beside the state file where the run has a
        # directory (evolve.runfile.genomes), so that the master keeps none; and the id of its latest stage where that is
        # not its first (a promotion paused again at a higher rung)
        self.genomes = Genomes() if genomes is None else genomes
        self.latest: dict[int, int] = {}
        self.promotions_recorded = 0
        # network -> part (fold, or -1) -> the worker holding it paused, the latest paused last; at most holders_max
        # networks (a worker's cache forgets its least recently paused first too: ensemble.paused.PausedCache)
        self.holders: OrderedDict[int, int | dict[int, int]] = OrderedDict()
        self.holders_max = HOLDERS_MAX

    @classmethod
    def _of_settings(cls, search, genomes: Genomes | None) -> Halving:
        """A new halving of ``search``'s rungs; asynchronous unless its strategy has a barrier."""
        from evolve.search.registry import capabilities

        return cls(search.eta, search.min_budget, asynchronous=not capabilities(search.mode).barrier, genomes=genomes)

    @classmethod
    def of(cls, search, state, genomes: Genomes | None = None) -> Halving:
        """The halving of ``search``'s settings, carrying on from ``state``'s records and pending stages (``genomes``: where
        the paused networks' genomes go; default: memory)."""
        halving = cls._of_settings(search, genomes)
        for record in sorted(state.records, key=lambda r: r.id):
            halving.tell(record)
        halving._mark(state.pending)
        return halving

    @property
    def top(self) -> int:
        """The last rung: the whole training."""
        return self.rungs - 1

    def tell(self, record: Record) -> None:
        """A stage recorded: a paused one joins its rung's results; one that failed below the top counts there, last."""
        network = network_of(record)
        if record.network >= 0:
            self.promotions_recorded += 1
            self.table.mark_promoted(record.rung - 1, network)
        if record.status == "paused":  # what its promotion needs: the genome (a network's stages share it) and the stage
            if record.network < 0:
                self.genomes.put(network, record.genome)
                self.latest.pop(network, None)
            else:
                self.latest[network] = record.id
        else:
            self.genomes.drop(network)
            self.latest.pop(network, None)
            self.holders.pop(network, None)  # trained to the end, or failed: no paused training is held
        if not self.asynchronous:
            return
        if record.status == "paused":
            self.table.add(record.rung, network, record.fitness, record.loss)
        elif record.status != "ok" and record.rung < self.top:
            self.table.add(record.rung, network, -math.inf, math.inf)

    def memory(self) -> dict[str, np.ndarray]:
        """What a resume needs to carry on without the history (evolve.engine.memory): the rung table's, the networks
        paused again after a promotion (network, its latest stage's id), the count of promotions recorded, and the
        genome file's token (evolve.runfile.genomes); or, with the genomes in memory, every paused network with its
        latest stage's id and its genome."""
        if self.genomes.in_memory:
            held = sorted(self.genomes.items())
            paused = [(network, self.latest.get(network, network)) for network, _ in held]
            genomes = np.asarray([genome for _, genome in held], dtype=np.float64).reshape(len(held), -1 if held else 0)
            kept = {"paused_genomes": genomes}
        else:
            paused, kept = sorted(self.latest.items()), self.genomes.memory()
        return {**self.table.memory(), "paused": np.asarray(paused, dtype=np.int64).reshape(len(paused), 2),
                "promotions": np.asarray([self.promotions_recorded], dtype=np.int64), **kept}

    @classmethod
    def restored(cls, search, memory: dict[str, np.ndarray], pending, genomes: Genomes | None = None) -> Halving:
        """The halving :meth:`memory` describes, carrying on with the stages ``pending``; as :meth:`of` makes it from
        the history. ``genomes``: the genome file that memory names (evolve.runfile.genomes.open_for), or the genomes'
        new home where the memory holds them (default: memory)."""
        halving = cls._of_settings(search, genomes)
        halving.table = RungTable.restored(halving.eta, halving.rungs, memory, halving.table._holders)
        pairs = memory["paused"].tolist()
        halving.latest = {network: stage for network, stage in pairs if stage != network}
        if "paused_genomes" in memory:
            for (network, _), genome in zip(pairs, memory["paused_genomes"].tolist()):
                halving.genomes.put(network, genome)
        halving.promotions_recorded = int(memory["promotions"][0])
        halving._mark(pending)
        return halving

    def _mark(self, pending) -> None:
        """Promotions out when the last session ended are made: never made again."""
        for stage in pending:
            if stage.network >= 0:
                self.table.mark_promoted(stage.rung - 1, stage.network)

    def hold(self, network: int, part: int, worker: int) -> None:
        """``worker`` paused a part of ``network``'s training (a fold, or -1 for the whole) and holds it."""
        held = self._held(network)
        self.holders[network] = worker if part == WHOLE and len(held) <= (WHOLE in held) else {**held, part: worker}
        self.holders.move_to_end(network)
        while len(self.holders) > self.holders_max:  # forgotten: its promotion, if it comes, trains again on any worker
            self.holders.popitem(last=False)

    def _held(self, network: int) -> dict[int, int]:
        """Part -> worker, of the parts of ``network`` held paused (a whole training's holder is kept as a bare int)."""
        held = self.holders.get(network)
        return {} if held is None else held if isinstance(held, dict) else {WHOLE: held}

    def holder(self, network: int, part: int) -> int | None:
        """The worker holding that part of ``network`` paused, if one is known."""
        return self._held(network).get(part)

    def part_for(self, network: int, unsent, worker: int, workers) -> int | None:
        """Which of the parts not yet out (``unsent``: folds, or -1) of ``network``'s promotion ``worker`` takes: the one
        it holds paused; :data:`HELD_ELSEWHERE` where others of ``workers`` (those still in the job) hold every one left;
        else None (the next: no one holds it)."""
        held = self._held(network)
        mine = next((part for part in unsent if held.get(part) == worker), None)
        if mine is not None:
            return mine
        return HELD_ELSEWHERE if all(held.get(part) in workers for part in unsent) else None

    def reached(self, record: Record) -> Record:
        """A stage that trained the whole of its network's epochs (one of few epochs, whose rungs coincide) is at the top."""
        if record.status == "ok":
            record.rung = self.top
        return record

    def promote(self, state, holder: int | None = None) -> Pending | None:
        """The next promotion as a stage to send (id ``state.next_id``), or None if none is due; with ``holder``, only
        one that worker holds (a part of it, with folds)."""
        made = self.table.promotion(holder)
        if made is None:
            return None
        return self.stage(state, *made)

    def stage(self, state, network: int, rung: int) -> Pending:
        """``network``'s promotion to ``rung`` as a stage to send (id ``state.next_id``), carrying on its latest stage."""
        genome = self.genomes.get(network)
        if genome is None:
            raise RunDirError(f"{getattr(self.genomes, 'path', 'the search')}: the genome of network {network}, paused at a rung, "
                              "is missing (the file was changed outside evens); the run's checkpoint is intact: resume it")
        before = self.latest.get(network, network)
        return Pending(id=state.next_id, genome=genome, parents=(before, -1), operators="promotion", rung=rung, network=network)

    def watch(self, stage: Pending, epochs: int) -> dict:
        """What the stage's training is held to (ensemble.train.Watch): pause after its rung's epochs (below the top),
        and carry on from its network's paused training (a promotion)."""
        out = {}
        if stage.rung < self.top:
            out["pause_after"] = rung_epochs(epochs, self.eta, self.min_budget)[stage.rung]
        if stage.network >= 0:
            out["carry_on"] = stage.network
        return out
