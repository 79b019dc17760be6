"""The networks a search has proposed, in 12 to 16 bytes each: what keeps the duplicate check's memory small at millions.

A network's key (:meth:`evolve.search.space.SearchSpace.key`, a tuple of decoded gene values) is held as its
64-bit hash (:meth:`~evolve.search.space.SearchSpace.key_hash`, the same in every process of the same Python,
so a run file keeps the set and a resume reads it back). Hashes wait in a Python set and are merged, now and
then, into a sorted numpy array with a byte filter beside it (4 to 8 bytes a key); a lookup is a set probe, a
filter probe and, for one key in four or so not held, a binary search. Two different networks whose
keys hash alike (about one pair in 10^6 at 10^7 networks) count as one: the second is taken for a duplicate
and bred again, which costs a draw, never a wrong result.

A run's checkpoints keep the set. Without a run directory each holds every hash (:meth:`KeySet.memory`); with one, the
set is journaled (:meth:`KeySet.journal`) to an append-only file beside the state file (evolve.runfile.proposed), and
a checkpoint appends only the hashes added since the last one, so its cost does not grow with the history.
"""
from __future__ import annotations

from typing import Callable, Hashable, Iterable

import numpy as np

MERGE_AT = 4096  # hashes waiting in the set before a merge, or an eighth of those merged if more


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of integers, by a sort: NumPy 2.3 and later make ``np.unique`` hash, which took 1.4 s for 10^6 random
    int64 where a sort and a comparison take 0.04 s (NumPy 2.4.6)."""
    ordered = np.sort(np.asarray(values))
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if ordered.size else ordered


class KeySet:
    """A set of keys, by hash: ``add``, ``update``, ``in`` and ``len`` (no iteration: the keys are not kept)."""

    def __init__(self, keys: Iterable[Hashable] = (), hasher: Callable[[Hashable], int] = hash, hashes: np.ndarray | None = None) -> None:
        """``hashes``: what :meth:`hashes` gave, to carry on from (a resume)."""
        self.hasher = hasher
        self._sorted = np.empty(0, dtype=np.int64)
        if hashes is not None:
            given = np.asarray(hashes, dtype=np.int64)
            self._sorted = given if given.size < 2 or bool(np.all(given[1:] > given[:-1])) else sorted_unique(given)  # (as hashes() gave: kept)
        self._new: set[int] = set()
        self._log = None  # see journal()
        self._unsaved: list[int] | None = None  # hashes added since the log was last written (None: no log)
        self._unsaved_held: list[np.ndarray] = []  # ... and arrays of them: what journal() found held, add_hashes' batches
        self._refilter()
        self.update(keys)

    def journal(self, log, also: np.ndarray | None = None) -> None:
        """From now on, :meth:`memory` appends the hashes added since its last call to ``log`` (``append(hashes)``,
        ``memory()``, ``count``: evolve.runfile.proposed.ProposedLog) instead of giving every hash. A log that holds
        nothing yet gets every hash held now at the next :meth:`memory`; one that holds some (a resume carries on from
        them) gets ``also``: what the set holds beyond them (the networks still out that were sent after the checkpoint
        that wrote them, which the in-flight log gave back; a repeat is harmless)."""
        self._log, self._unsaved = log, []
        held = self.hashes() if log.count == 0 else also
        self._unsaved_held = [np.asarray(held, dtype=np.int64)] if held is not None and len(held) else []

    def memory(self, name: str) -> dict[str, np.ndarray]:
        """The set as a checkpoint keeps it, under ``name``: every hash held (sorted), or with a log, the log's token
        and count (``<name>_token``, ``<name>_count``) once the hashes added since the last call are in it."""
        if self._log is None:
            return {name: self.hashes()}
        if self._unsaved or self._unsaved_held:
            self._log.append(np.concatenate([*self._unsaved_held, np.asarray(self._unsaved, dtype=np.int64)]))
            self._unsaved.clear()
            self._unsaved_held = []
        return {f"{name}_{part}": array for part, array in self._log.memory().items()}

    def _refilter(self) -> None:
        """A byte per slot, at least 4 slots a merged hash, 1 where some merged hash's low bits point: most lookups of
        a key not held end there, without a binary search (a bytearray index is some 30 ns, numpy's search 1 us)."""
        slots = 1 << max(12, int(4 * max(self._sorted.size, 1) - 1).bit_length())
        marks = np.zeros(slots, dtype=np.uint8)
        marks[self._sorted & (slots - 1)] = 1
        self._filter, self._mask = bytearray(marks.tobytes()), slots - 1

    def hashes(self) -> np.ndarray:
        """Every hash held, sorted (what a run file keeps)."""
        self._merge()
        return self._sorted

    def add_hashes(self, hashes: np.ndarray) -> None:
        """Hashes another set gave (:meth:`hashes`)."""
        given = np.asarray(hashes, dtype=np.int64)
        self._new.update(given.tolist())
        if self._unsaved is not None:
            self._unsaved_held.append(given.copy())
        self._merge_if_due()

    def add(self, key: Hashable) -> None:
        self.add_hash(self.hasher(key))

    def add_hash(self, h: int) -> None:
        """:meth:`add` of a key whose hash (``hasher(key)``) the caller has already computed."""
        self._new.add(h)
        if self._unsaved is not None:
            self._unsaved.append(h)
        self._merge_if_due()

    def _merge_if_due(self) -> None:
        if len(self._new) > max(MERGE_AT, self._sorted.size >> 3):
            self._merge()

    def update(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            self.add(key)

    def __contains__(self, key: Hashable) -> bool:
        return self.holds(self.hasher(key))

    def holds(self, h: int) -> bool:
        """``in`` for a key whose hash (``hasher(key)``) the caller has already computed."""
        if h in self._new:
            return True
        if not self._filter[h & self._mask]:
            return False
        merged = self._sorted
        i = int(merged.searchsorted(h))
        return i < merged.size and int(merged[i]) == h

    def __len__(self) -> int:
        self._merge()
        return int(self._sorted.size)

    @property
    def nbytes(self) -> int:
        """Roughly what the set holds in memory (the merged array and its filter, and some 70 bytes per waiting hash)."""
        return int(self._sorted.nbytes) + len(self._filter) + 70 * len(self._new)

    def _merge(self) -> None:
        if self._new:
            waiting = np.sort(np.fromiter(self._new, dtype=np.int64, count=len(self._new)))  # each once (a set's)
            merged = self._sorted
            at = merged.searchsorted(waiting)
            fresh = waiting != merged[np.minimum(at, merged.size - 1)] if merged.size else np.ones(waiting.size, dtype=bool)
            waiting = waiting[fresh]
            self._sorted = np.insert(merged, at[fresh], waiting)  # one copy, O(n); not np.union1d, whose np.unique hashes (sorted_unique)
            self._new.clear()
            if self._sorted.size * 4 > len(self._filter):
                self._refilter()
            else:
                filter_, mask = self._filter, self._mask
                for h in waiting.tolist():
                    filter_[h & mask] = 1
