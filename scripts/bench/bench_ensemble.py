"""Benchmark: does the ensemble beat the best single network, and greedy selection the plain top K?

Run from the repository root (after ./scripts/setup.sh)::

    .venv/bin/python scripts/bench/bench_ensemble.py --seeds 10 --ranks 4 --evaluations 16
    .venv/bin/python scripts/bench/bench_ensemble.py --quick     # 2 seeds of 8 evaluations on 3 ranks

Each seed is one real `mpiexec -n RANKS evens run examples/digits.toml --set search.seed=S` in a
temporary run directory. Three contenders come from the same run, so they saw the same networks,
and all three are chosen on the validation split only:

* ``best``: the single network with the best validation accuracy;
* ``greedy``: Caruana's forward selection with replacement from the hall of fame (the default);
* ``top_k``: the mean of the best ``ensemble.size`` networks.

Both ensembles are chosen again from the run's stored hall of fame (what `evens select` does), so
the comparison costs one search per seed. All are scored on the test split, which played no part
in choosing them. Prints a table and one JSON line.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile

import harness

from ensemble.problem import problem_from_dict
from evolve.app.presentation.report import ensemble_scores, summarize
from evolve.app.run.reselect import select_for_run
from evolve.runfile import checkpoint

METHODS = ("greedy", "top_k")


def run_seed(seed: int, ranks: int, config: str, extra: list[str], workdir: str) -> dict:
    out = os.path.join(workdir, f"seed{seed}")
    cmd = [harness.mpiexec(), "-n", str(ranks), sys.executable, "-m", "evolve", "run", config,
           "--out", out, "--quiet", "--set", f"search.seed={seed}", *extra]
    subprocess.run(cmd, check=True, cwd=harness.ROOT, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    state, info = checkpoint.load(os.path.join(out, "checkpoint.h5"), weights=False)
    problem = problem_from_dict(info.data["problem"])
    summary = summarize(state, info, out)
    row = {
        "seed": seed,
        "evaluations": summary.evaluations,
        "best_val": summary.best.score("val", "accuracy"),
        "best_test": summary.best.score("test", "accuracy"),
        "wall_seconds": summary.wall_seconds,
        "utilization": summary.worker_utilization,
    }
    for method in METHODS:
        state.selection = select_for_run(state.hall_of_fame, info, method=method)
        scores = ensemble_scores(state, info, problem)
        row[f"{method}_test"] = scores.score("test", "accuracy")
        row[f"{method}_val"] = scores.score("val", "accuracy")
        row[f"{method}_members"] = len(scores.members)
    return row


def main() -> None:
    parser = harness.parser(__doc__, quick="2 seeds of 8 evaluations on 3 ranks: a minute or two")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--evaluations", type=int, default=16)
    parser.add_argument("--config", default="examples/digits.toml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--keep", metavar="DIR", help="keep the run directories in DIR (for scripts/bench/study_selection.py)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.evaluations, args.ranks = 2, 8, 3
    extra = ["--set", f"search.evaluations={args.evaluations}"] + [a for kv in args.overrides for a in ("--set", kv)]

    rows = []
    if args.keep:
        os.makedirs(args.keep, exist_ok=False)
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.keep or scratch
        for seed in range(args.seeds):
            rows.append(run_seed(seed, args.ranks, args.config, extra, workdir))
            r = rows[-1]
            print(f"seed {seed}: best {r['best_test']:.4f}  greedy {r['greedy_test']:.4f}  top_k {r['top_k_test']:.4f}", file=sys.stderr, flush=True)

    print(harness.machine_line("bench_ensemble", f"ranks={args.ranks}  config={args.config} {' '.join(extra)}"))
    print(f"{'seed':>4} {'evals':>5} {'best val':>9} {'best test':>9} {'greedy':>9} {'(n)':>4} {'top_k':>9} {'wall s':>7} {'util':>5}")
    for r in rows:
        print(f"{r['seed']:>4} {r['evaluations']:>5} {r['best_val']:>9.4f} {r['best_test']:>9.4f} {r['greedy_test']:>9.4f} "
              f"{r['greedy_members']:>4} {r['top_k_test']:>9.4f} {r['wall_seconds']:>7.1f} {r['utilization']:>5.2f}")

    def mean(key):
        return statistics.mean(r[key] for r in rows)

    def error_ratio(a, b):
        return (1 - mean(a)) / max(1e-12, 1 - mean(b))

    summary = {
        "seeds": args.seeds,
        "evaluations": args.evaluations,
        "mean_best_test": mean("best_test"),
        "mean_greedy_test": mean("greedy_test"),
        "mean_top_k_test": mean("top_k_test"),
        "greedy_at_least_best_minus_0.005": sum(r["greedy_test"] >= r["best_test"] - 0.005 for r in rows),
        "greedy_at_least_best": sum(r["greedy_test"] >= r["best_test"] for r in rows),
        "greedy_at_least_top_k": sum(r["greedy_test"] >= r["top_k_test"] for r in rows),
        "top_k_at_least_best": sum(r["top_k_test"] >= r["best_test"] for r in rows),
        "min_greedy_minus_best": min(r["greedy_test"] - r["best_test"] for r in rows),
        "error_ratio_greedy_to_best": error_ratio("greedy_test", "best_test"),
        "error_ratio_top_k_to_best": error_ratio("top_k_test", "best_test"),
        "rows": rows,
    }
    print(f"# mean test accuracy: best {summary['mean_best_test']:.4f}, greedy {summary['mean_greedy_test']:.4f}, "
          f"top_k {summary['mean_top_k_test']:.4f}; greedy >= best - 0.005 in {summary['greedy_at_least_best_minus_0.005']}/{args.seeds}, "
          f">= best in {summary['greedy_at_least_best']}/{args.seeds}, >= top_k in {summary['greedy_at_least_top_k']}/{args.seeds}; "
          f"worst greedy - best {summary['min_greedy_minus_best']:+.4f}; test error ratio greedy/best "
          f"{summary['error_ratio_greedy_to_best']:.2f}, top_k/best {summary['error_ratio_top_k_to_best']:.2f}")
    harness.emit(summary)


if __name__ == "__main__":
    main()
