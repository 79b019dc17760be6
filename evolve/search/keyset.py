"""The networks a search has proposed, in 12 to 16 bytes each: what keeps the duplicate check's memory small at millions.

A network's key (:meth:`evolve.search.space.SearchSpace.key`, a tuple of decoded gene values) is held as its
64-bit hash (:meth:`~evolve.search.space.SearchSpace.key_hash`, the same in every process of the same Python,
so a run file keeps the set and a resume reads it back). Hashes wait in a Python set and are merged, now and
then, into a sorted numpy array with a byte filter beside it (4 to 8 bytes a key); a lookup is a set probe, a
filter probe and, for one key in four or so not held, a binary search. Two different networks whose
keys hash alike (about one pair in 10^6 at 10^7 networks) count as one: the second is taken for a duplicate
and bred again, which costs a draw, never a wrong result.
"""
from __future__ import annotations

from typing import Callable, Hashable, Iterable

import numpy as np

MERGE_AT = 4096  # hashes waiting in the set before a merge, or an eighth of those merged if more


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of integers, by a sort: NumPy 2.3 and later make ``np.unique`` hash, which took 1.4 s for 10^6 random
    int64 where a sort and a comparison take 0.04 s (NumPy 2.4.6)."""
    ordered = np.sort(np.asarray(values), kind="stable")
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
        self._refilter()
        self.update(keys)

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
        self._new.update(np.asarray(hashes, dtype=np.int64).tolist())
        self._merge_if_due()

    def add(self, key: Hashable) -> None:
        self._new.add(self.hasher(key))
        self._merge_if_due()

    def _merge_if_due(self) -> None:
        if len(self._new) > max(MERGE_AT, self._sorted.size >> 3):
            self._merge()

    def update(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            self.add(key)

    def __contains__(self, key: Hashable) -> bool:
        h = self.hasher(key)
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
