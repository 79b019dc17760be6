"""The networks a search has proposed, in about 8 bytes each: what keeps the duplicate check's memory small at millions.

A network's key (:meth:`evolve.search.space.SearchSpace.key`, a tuple of decoded gene values) is held as its
64-bit hash (:meth:`~evolve.search.space.SearchSpace.key_hash`, the same in every process of the same Python,
so a run file keeps the set and a resume reads it back). Hashes wait in a Python set and are merged, now and
then, into a sorted numpy array; a lookup is a set probe and a binary search. Two different networks whose
keys hash alike (about one pair in 10^6 at 10^7 networks) count as one: the second is taken for a duplicate
and bred again, which costs a draw, never a wrong result.
"""
from __future__ import annotations

from typing import Callable, Hashable, Iterable

import numpy as np

MERGE_AT = 4096  # hashes waiting in the set before a merge, or an eighth of those merged if more


class KeySet:
    """A set of keys, by hash: ``add``, ``update``, ``in`` and ``len`` (no iteration: the keys are not kept)."""

    def __init__(self, keys: Iterable[Hashable] = (), hasher: Callable[[Hashable], int] = hash, hashes: np.ndarray | None = None) -> None:
        """``hashes``: what :meth:`hashes` gave, to carry on from (a resume)."""
        self.hasher = hasher
        self._sorted = np.empty(0, dtype=np.int64)
        if hashes is not None:
            given = np.asarray(hashes, dtype=np.int64)
            self._sorted = given if given.size < 2 or bool(np.all(given[1:] > given[:-1])) else np.unique(given)  # (as hashes() gave: kept)
        self._new: set[int] = set()
        self.update(keys)

    def hashes(self) -> np.ndarray:
        """Every hash held, sorted (what a run file keeps)."""
        self._merge()
        return self._sorted

    def add_hashes(self, hashes: np.ndarray) -> None:
        """Hashes another set gave (:meth:`hashes`)."""
        self._new.update(np.asarray(hashes, dtype=np.int64).tolist())
        if len(self._new) > max(MERGE_AT, self._sorted.size >> 3):
            self._merge()

    def add(self, key: Hashable) -> None:
        self._new.add(self.hasher(key))
        if len(self._new) > max(MERGE_AT, self._sorted.size >> 3):
            self._merge()

    def update(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            self.add(key)

    def __contains__(self, key: Hashable) -> bool:
        h = self.hasher(key)
        if h in self._new:
            return True
        merged = self._sorted
        i = int(merged.searchsorted(h))
        return i < merged.size and int(merged[i]) == h

    def __len__(self) -> int:
        self._merge()
        return int(self._sorted.size)

    @property
    def nbytes(self) -> int:
        """Roughly what the set holds in memory (the merged array, and some 70 bytes per waiting hash)."""
        return int(self._sorted.nbytes) + 70 * len(self._new)

    def _merge(self) -> None:
        if self._new:
            waiting = np.fromiter(self._new, dtype=np.int64, count=len(self._new))
            self._sorted = np.union1d(self._sorted, waiting)  # sorted, each hash once
            self._new.clear()
