"""Replay early-stopping rules on the full validation curves of real searches: which networks would each stop?

Phase 1 (``--collect``) runs the product's search loop in one process (:func:`evolve.engine.loop.run_search`,
async steady-state GA, 3 in-process workers, the real worker function) with a rule that never stops,
so every network trains to its planned length and reports its whole curve, and appends the networks
to a JSON-lines file (each with its curve, final validation fitness, test accuracy, training
seconds, planned epochs and decoded genes). Phase 2 (the default) replays rules on those curves, network by network in the
order the results arrived, each network judged against the ones that had come back two results
before it was sent (as with 3 workers), a stopped network told with its curve cut where it stopped:

* ``old``: the rule before Vizier's: the fitness after epoch e against the median of the fitness
  after epoch e of the networks that reached it (survivors only);
* ``vizier``: :class:`evolve.search.early_stop.MedianRule` without its planned-epochs guard;
* ``shipped``: :class:`evolve.search.early_stop.MedianRule` as it is (no bar in the first third of a
  network's planned epochs).

For each it prints the share of epochs and of training seconds kept, the networks stopped, and how
many of each search's final best 5 and best 10 (by validation fitness, had nothing been stopped) it
would have stopped. The replay ignores the rule's effect on the GA (a stopped network's fitness is
its partial one, and it stays out of the population), so it measures the rule, not the search::

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/study_early_stop.py --collect --seeds 100-111 --curves /tmp/classic.jsonl
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/study_early_stop.py --collect --config examples/digits-typed.toml --seeds 100-107 --curves /tmp/typed.jsonl
    .venv/bin/python scripts/bench/study_early_stop.py --curves /tmp/classic.jsonl

The collect phase reuses bench_quality.py's data loading and search.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

from evolve.search.early_stop import MIN_PEERS, MedianRule
from evolve.search.records import Record


class OldRule:
    """The rule before Vizier's: per-epoch medians of the fitness itself, compared with the fitness itself."""

    def __init__(self) -> None:
        self.by_epoch: list[list[float]] = []

    def tell(self, record: Record) -> None:
        for epoch, fitness in enumerate(record.curve):
            if math.isfinite(fitness):
                while len(self.by_epoch) <= epoch:
                    self.by_epoch.append([])
                self.by_epoch[epoch].append(fitness)

    def bars(self, epochs: int) -> tuple[float, ...]:
        return tuple(statistics.median(self.by_epoch[e]) if e < len(self.by_epoch) and len(self.by_epoch[e]) >= MIN_PEERS
                     else math.nan for e in range(epochs))


def first_stop(curve: list[float], bars: tuple[float, ...], warmup: int, best_so_far: bool) -> int | None:
    for epoch in range(1, len(curve)):  # after every epoch but the last, as ensemble.train's on_epoch
        bar = bars[epoch - 1]
        mine = max(curve[:epoch]) if best_so_far else curve[epoch - 1]
        if epoch >= warmup and math.isfinite(bar) and mine < bar:
            return epoch
    return None


def replay(networks: list[dict], rule_name: str, warmup: int, inflight: int = 2) -> list[int | None]:
    rule = {"old": OldRule, "vizier": lambda: MedianRule(planned_fraction=0.0), "shipped": MedianRule}[rule_name]()
    told: list[Record] = []
    stops = []
    for i, n in enumerate(networks):
        while len(told) < max(0, i - inflight):  # the results back when this one was sent
            rule.tell(told_record := told_next(networks, stops, len(told)))
            told.append(told_record)
        stops.append(first_stop(n["curve"], rule.bars(n["planned"]), warmup, best_so_far=rule_name != "old"))
    return stops


def told_next(networks: list[dict], stops: list[int | None], j: int) -> Record:
    curve = networks[j]["curve"] if stops[j] is None else networks[j]["curve"][: stops[j]]
    return Record(id=j, genome=[], parents=(-1, -1), status="ok" if stops[j] is None else "stopped", fitness=curve[-1], metrics={},
                  seconds=0.0, epochs_done=len(curve), worker=1, started=0.0, finished=0.0, curve=curve)


def collect(config: str | None, seeds: list[int], evaluations: int, path: str) -> None:
    import bench_quality
    import torch
    from study_space import classic_config

    import evolve.engine.loop as master
    from evolve.config.schema import load_config

    class Never:
        """Watches every training (so it reports its curve) and stops none."""

        def __init__(self, records=()):
            pass

        def tell(self, record):
            pass

        def bars(self, epochs):
            return (math.nan,) * epochs

    master.MedianRule = Never
    torch.set_num_threads(1)
    data = bench_quality.device_data(os.path.join(ROOT, "data", "digits.h5"))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(config or classic_config(tmp))
    space = cfg.space.for_sample_shape(data.sample_shape)
    epochs_at = space.names.index("epochs")
    captured = {}
    original = master.run_search

    def spy(state, *args, **kwargs):
        captured["state"] = state
        return original(state, *args, **kwargs)

    bench_quality.run_search = spy
    with open(path, "a") as out:
        for seed in seeds:
            result = bench_quality.run_evens(cfg, space, data, seed, evaluations, 3, early_stopping=True)
            tests = {row["id"]: row["test"] for row in result.networks}
            for r in captured["state"].records:
                if r.status == "ok":
                    out.write(json.dumps({"seed": seed, "id": r.id, "curve": r.curve, "fitness": r.fitness, "test": tests[r.id],
                                          "seconds": r.seconds, "planned": int(space.key(r.genome)[epochs_at]),
                                          "genes": {k: v if isinstance(v, (int, float, str, bool)) else str(v)
                                                    for k, v in space.decode(r.genome).items()}}) + "\n")
            out.flush()
            print(f"seed {seed}: {len(captured['state'].records)} networks, {result.seconds:.0f} s", flush=True)


def report(path: str, warmup: int) -> None:
    runs: dict[int, list[dict]] = defaultdict(list)
    with open(path) as f:
        for line in f:
            n = json.loads(line)
            runs[n["seed"]].append(n)
    print(f"{path}: {len(runs)} searches, {sum(map(len, runs.values()))} networks, warm-up {warmup} epochs")
    print(f"{'rule':8s} {'epochs kept':>11s} {'seconds kept':>12s} {'stopped':>8s} {'best 5 stopped':>14s} {'best 10 stopped':>15s}   (per search)")
    for name in ("old", "vizier", "shipped"):
        kept = planned = secs = secs_all = stopped = top5 = top10 = 0
        for networks in runs.values():
            stops = replay(networks, name, warmup)
            ranked = sorted((n["fitness"] for n in networks), reverse=True)
            t5, t10 = ranked[min(4, len(ranked) - 1)], ranked[min(9, len(ranked) - 1)]
            for n, stop in zip(networks, stops):
                planned += n["planned"]
                kept += stop or n["planned"]
                secs_all += n["seconds"]
                secs += n["seconds"] * (stop or n["planned"]) / n["planned"]
                if stop:
                    stopped += 1
                    top5 += n["fitness"] >= t5
                    top10 += n["fitness"] >= t10
        s = len(runs)
        print(f"{name:8s} {kept / planned:11.2f} {secs / secs_all:12.2f} {stopped / s:8.1f} {top5 / s:14.2f} {top10 / s:15.2f}")


def seed_list(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--curves", required=True, help="the JSON-lines file of networks (written by --collect, read otherwise)")
    parser.add_argument("--collect", action="store_true", help="run searches and append their networks' curves")
    parser.add_argument("--config", help="the space to search (default: study_space.py's classic space)")
    parser.add_argument("--seeds", default="100-103", help="e.g. 100-111 or 1,2,3")
    parser.add_argument("--evaluations", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=2, help="search.early_stopping_warmup")
    args = parser.parse_args()
    if args.collect:
        collect(args.config, seed_list(args.seeds), args.evaluations, args.curves)
    else:
        report(args.curves, args.warmup)


if __name__ == "__main__":
    main()
