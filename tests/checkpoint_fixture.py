"""A search state that grows by a few records at a time, saved after each step: shared by the
checkpoint tests and by the crash program (tests/mpi/prog_crash_save.py)."""
import numpy as np
from fakes import PROBLEM, TEST_Y, VAL_Y, landscape, search_config

from evolve.config.schema import config_from_dict
from evolve.engine.loop import run_search
from evolve.engine.state import SearchState
from evolve.runfile import checkpoint
from evolve.runfile.checkpoint import RunInfo
from evolve.search.space import GENE_NAMES
from evolve.search.space_config import parse_space
from evolve.transport.protocol import InProcessTransport

SPACE = parse_space({}).for_sample_shape((1, 8, 8))
STEPS = (3, 4, 9, 10, 17, 18, 30)  # the record counts at which the search checkpoints


def info() -> RunInfo:
    data = {"problem": PROBLEM.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"}
    return RunInfo(config_from_dict({"search": {"evaluations": STEPS[-1]}, "ensemble": {"size": 3, "method": "greedy"}, "space": {}}), list(GENE_NAMES), data,
                   VAL_Y, TEST_Y)


def growing_saves(path: str):
    """Run one search to each count in STEPS, checkpointing at each; yields the count just saved."""
    state = SearchState.fresh(0, candidates=3)
    for n in STEPS:
        run_search(state, InProcessTransport(landscape, 2), SPACE, search_config(n, 4, 3, 0))
        checkpoint.save(path, state, info())
        yield n


def full_state() -> SearchState:
    state = SearchState.fresh(0, candidates=3)
    for n in STEPS:
        run_search(state, InProcessTransport(landscape, 2), SPACE, search_config(n, 4, 3, 0))
    return state


def record_keys(records):
    return [(r.id, tuple(r.genome), r.fitness, r.status, r.operators) for r in records]


__all__ = ["STEPS", "full_state", "growing_saves", "info", "record_keys", "np"]
