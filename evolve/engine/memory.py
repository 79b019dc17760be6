"""What the master keeps across a resume, so that a resume reads the state file and not the history (issue 34).

A long search's history lives in the run file's segments, and a resume of the default search reads none of
it: at each checkpoint the master's parts that carry knowledge from result to result put what they need into
``state.memory`` (arrays, by name, written to the run file's ``/master`` group):

* the strategy (``strategy.*``, its ``memory()``): the networks proposed and those that crashed, as 64-bit
  hashes, and the population (a generational one: what it reads of each record its state names,
  evolve.search.named); model breeding's surrogate, the rows of its last fit and the latest results;
* the median stopping rule (``median.*``): each epoch's kept values (bounded, see RunningMedian);
* successive halving (``halving.*``, evolve.engine.promotion): each rung's results as 24-byte keys, the promotions
  made, and the networks paused, each with its genome (what its promotion trains). Per network, compact: the master
  holds the same in memory.

A part that cannot carry on from such a summary (a strategy without ``memory()``: optuna's, whose sampler is rebuilt
from every trial) makes the memory empty, and a resume of that
run reads the history as before. So does a resume whose settings build other parts than the checkpoint's
(``signature``), or whose Python hashes numbers otherwise (the hashes are Python's own).
"""
from __future__ import annotations

import json
import sys

import numpy as np

SIGNATURE = "signature"  # the settings the memory was made under, as JSON bytes


def signature(search, bars: bool) -> dict:
    """The settings that decide which parts the master builds and what they keep."""
    rungs = [search.eta, search.min_budget] if search.promotion else None  # another table from the same results
    return {"mode": search.mode, "breeding": search.breeding, "selection": search.selection, "promotion": bool(search.promotion),
            "rungs": rungs, "median_rule": bars, "python": list(sys.version_info[:2])}


def gather(search, strategy, bars, halving) -> dict[str, np.ndarray]:
    """The memory of a checkpoint: every part's, or {} if some part needs the history to resume."""
    kept = getattr(strategy, "memory", lambda: None)()
    if kept is None:
        return {}
    memory = {f"strategy.{name}": array for name, array in kept.items()}
    if halving is not None:
        memory.update({f"halving.{name}": array for name, array in halving.memory().items()})
    if bars is not None:
        rule = bars.rule.memory()
        if rule is None:
            return {}
        memory.update({f"median.{name}": array for name, array in rule.items()})
    memory[SIGNATURE] = np.frombuffer(json.dumps(signature(search, bars is not None)).encode(), dtype=np.uint8)
    return memory


def carried(state) -> dict[str, np.ndarray] | None:
    """The memory a session carries on from: the checkpoint's, where ``state`` was loaded without its history
    (checkpoint.load(history=False)); None where its records are there to rebuild the parts from."""
    return state.memory if state.dropped > 0 and not state.records else None


def part(memory: dict[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
    """The arrays of one part (``strategy``, ``median``), by their own names."""
    prefix = name + "."
    return {key[len(prefix):]: value for key, value in memory.items() if key.startswith(prefix)}


def resumable(memory: dict[str, np.ndarray], search, bars: bool) -> bool:
    """Can a resume with these settings carry on from ``memory`` alone (no history)?"""
    if not memory or SIGNATURE not in memory:
        return False
    made_under = json.loads(bytes(np.asarray(memory[SIGNATURE], dtype=np.uint8)).decode())
    return made_under == signature(search, bars)
