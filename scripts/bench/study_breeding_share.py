"""Study: how much of the master's CPU per evaluation is breeding (issue 34, part 4)?

Run from the repository root::

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/study_breeding_share.py             # 20,000 evaluations, 3 rounds
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/study_breeding_share.py --quick     # 4,000 evaluations, 1 round

bench_master's loopback search (the master alone, instant trainings, their CPU taken out) twice, alternated
round by round: as it is, and with every child of the GA replaced by a random genome (its draws, its decoding and
its duplicate check: what a proposal costs without breeding). The difference of the medians is what breeding costs
an evaluation; what is left is the cost of everything else (taking and recording results, the task and its
dispatch, the in-flight log, early stopping, checkpoints). The random variant is a measurement device only: its
search is not the GA's. Ends with one JSON line.
"""
from __future__ import annotations

import statistics

import bench_master
import harness


def main(argv=None) -> int:
    p = harness.parser(__doc__, quick="4,000 evaluations, one round")
    p.add_argument("--evaluations", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if args.quick:
        args.evaluations, args.rounds = 4000, 1
    from evolve.search import strategy

    child = strategy._Breeder.child
    runs: dict[str, list[float]] = {"ga": [], "random": []}
    try:
        for _ in range(args.rounds):  # alternated, so that a change of load touches both alike
            for name in runs:
                strategy._Breeder.child = child if name == "ga" else (lambda self, population: self.random())
                loopback = bench_master.Loopback(3, 2)
                result = bench_master.search(loopback, args.evaluations, lambda: loopback.cpu, bench_master.PREFETCH, "blind")
                runs[name].append(result["evens_us"])
    finally:
        strategy._Breeder.child = child
    ga, rest = statistics.median(runs["ga"]), statistics.median(runs["random"])
    print(harness.machine_line("study_breeding_share", f"{args.evaluations} evaluations, loopback (3 workers), medians of {args.rounds}"))
    print(f"master us per evaluation: the GA {ga:.1f} (runs {[round(v, 1) for v in runs['ga']]}), random children {rest:.1f} "
          f"(runs {[round(v, 1) for v in runs['random']]}): breeding {ga - rest:.1f} us, {100 * (ga - rest) / ga:.0f} % of the master's")
    harness.emit({"ga_us": ga, "random_children_us": rest, "breeding_us": ga - rest, "runs": runs, "evaluations": args.evaluations})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
