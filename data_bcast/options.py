"""How a dataset is split, streamed and held: the options of :func:`data_bcast.broadcast.broadcast_dataset`.

Plain data, no MPI: evens' config reads its ``[data]`` defaults from here.
"""
from __future__ import annotations

from dataclasses import dataclass

MODES = ("replicate", "shard")


@dataclass(frozen=True)
class LoadOptions:
    """How a dataset is split, streamed and held: the defaults of evens' ``[data]`` section, which has
    these very fields (:class:`evolve.config.schema.DataConfig`, passed in their place)."""

    val_fraction: float = 0.15  # held out of train when the file has no val
    test_fraction: float = 0.15  # held out of train when the file has no test
    split_seed: int = 0  # seeds which rows are held out
    chunk_mb: float = 64  # the stream's chunks, in MiB (a fraction for tests of many small chunks)
    read_threads: int = 0  # the root's reading threads (0: one per core it may run on, at most MAX_READ_THREADS)
    shared_memory: bool = True  # one host copy per node (see data_bcast.memory), or one per rank
    allow_external: bool = False  # read datasets whose data lives in other files
    mode: str = "replicate"  # "replicate" (every node holds all of train) or "shard" (a part each)
