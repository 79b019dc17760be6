"""A run directory of any size of history, written through the product's own checkpoint and segment code (issue 34).

Usage (from the repository root)::

    .venv/bin/python scripts/bench/synthetic_run.py RUN_DIR 10000000     # ten million evaluations

A real search comes first: bench_master's loopback master (zero-work trainings, 3 workers, async with blind
breeding and the median rule, as bench_scale.py runs it) records :data:`SEED_EVALUATIONS` evaluations into
``RUN_DIR`` and leaves a real state file (hall of fame, ensemble, the master's memory and account). The history
then grows to the size asked for in checkpoints of :data:`CHUNK` records each, as ``evens run`` writes them:
each chunk is the real records again under new ids and finishing times, with fresh genomes (so that every
network is new to the duplicate check), appended by ``checkpoint.save`` (segments merged like a binary
counter) after which the state lets go of them; the master's memory (the hashes of the networks proposed, the
median rule's values) and its account take in every synthetic record as the master would have. What is not
real is the search: nobody bred these genomes. The resulting run resumes, reports and shows its status
like any other (bench_scale.py times that).
"""
from __future__ import annotations

import argparse
import os
import random
import time
from dataclasses import replace


SEED_EVALUATIONS = 4608 * 2  # the real search's share (two of bench_master's checkpoints)
CHUNK = 1 << 16  # records a synthetic checkpoint appends


def seed_run(folder: str) -> None:
    """The real search that the synthetic history continues: bench_master's loopback, as bench_scale runs it."""
    from bench_master import PREFETCH, Loopback, search

    loopback = Loopback(3, 2)
    search(loopback, SEED_EVALUATIONS, lambda: loopback.cpu, PREFETCH, "blind", folder=folder)


def grow(folder: str, evaluations: int, seed: int = 0, say=print) -> None:
    """The run in ``folder`` with its history grown to ``evaluations`` records."""
    from evolve.engine import memory
    from evolve.runfile import checkpoint, proposed
    from evolve.search.early_stop import MedianRule
    from evolve.search.keyset import KeySet
    from evolve.search.tally import planned_epochs

    path = os.path.join(folder, "checkpoint.h5")
    state, info = checkpoint.load(path, history=False)
    templates, _ = checkpoint.load(path)
    templates = [r for r in templates.records if r.status != "crashed"]
    space, rng = info.space(), random.Random(seed)
    seen = KeySet(hasher=space.key_hash, hashes=state.memory["strategy.seen"])
    log = proposed.open_for(proposed.proposed_path(path), memory.part(state.memory, "strategy"))  # as evens run appends them
    seen.journal(log)
    rule = MedianRule.restored(memory.part(state.memory, "median"))
    clock = max(r.finished for r in templates)
    began = time.perf_counter()
    while state.recorded < evaluations:
        n = min(CHUNK, evaluations - state.recorded)
        chunk = []
        for i in range(n):
            template = templates[i % len(templates)]
            genome = [rng.random() for _ in template.genome]
            clock += 0.002
            chunk.append(replace(template, id=state.next_id + i, genome=genome, started=clock - template.seconds, finished=clock))
        state.next_id += n
        for r in chunk:
            seen.add(space.key(r.genome))
            rule.tell(r)
            state.tally.tell(r, planned_epochs(space, r))
        rule.settle()  # as the master's bars do, every n/64 results
        state.records = chunk
        state.memory.update({**{f"strategy.{k}": v for k, v in seen.memory("seen").items()},
                             **{f"median.{k}": v for k, v in rule.memory().items()}})
        log.sync()
        checkpoint.save(path, state, info)
        state.let_go()
        say(f"  {state.recorded:,} evaluations written ({time.perf_counter() - began:.0f} s)")
    log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a run directory to create (must not exist)")
    parser.add_argument("evaluations", type=int, help="evaluations the history holds in the end")
    args = parser.parse_args()
    if os.path.exists(args.run_dir):
        raise SystemExit(f"synthetic_run: {args.run_dir} exists; give a new directory")
    os.makedirs(args.run_dir)
    seed_run(args.run_dir)
    grow(args.run_dir, args.evaluations)


if __name__ == "__main__":
    main()
