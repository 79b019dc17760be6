"""Benchmark: does the ensemble beat the best single network? Repeats the demo search over seeds.

Run from the repository root (after ./scripts/setup.sh)::

    .venv/bin/python scripts/bench_ensemble.py --seeds 5 --ranks 4

Each seed is one real `mpiexec -n RANKS evens run examples/digits.toml --set search.seed=S`
in a temporary run directory; the two contenders come from the same run, so they saw the same
networks: the best single network by validation accuracy, and the mean of the best
`ensemble.size` networks' probabilities. Both are scored on the test split, which played no
part in choosing them. Prints a table and one JSON line.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_seed(seed: int, ranks: int, config: str, extra: list[str], workdir: str) -> dict:
    bindir = os.path.dirname(sys.executable)
    out = os.path.join(workdir, f"seed{seed}")
    cmd = [os.path.join(bindir, "mpiexec"), "-n", str(ranks), sys.executable, "-m", "evolve", "run", config,
           "--out", out, "--quiet", "--set", f"search.seed={seed}", *extra]
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    report = subprocess.run([sys.executable, "-m", "evolve", "report", out, "--json"], check=True, cwd=ROOT, capture_output=True, text=True)
    return json.loads(report.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--config", default="examples/digits.toml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    extra = [a for kv in args.overrides for a in ("--set", kv)]

    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for seed in range(args.seeds):
            r = run_seed(seed, args.ranks, args.config, extra, workdir)
            rows.append({
                "seed": seed,
                "evaluations": r["evaluations"],
                "best_val": r["best"]["val_accuracy"],
                "best_test": r["best"]["test_accuracy"],
                "ensemble_test": r["ensemble"]["test_accuracy"],
                "ensemble_size": r["ensemble"]["size"],
                "wall_seconds": r["wall_seconds"],
                "utilization": r["worker_utilization"],
            })
            print(f"seed {seed}: best {rows[-1]['best_test']:.4f}  ensemble {rows[-1]['ensemble_test']:.4f}", file=sys.stderr, flush=True)

    print(f"# bench_ensemble  {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}  host={platform.node()}  "
          f"cpus={os.cpu_count()}  ranks={args.ranks}  config={args.config} {' '.join(extra)}")
    print(f"{'seed':>4} {'evals':>5} {'best val':>9} {'best test':>9} {'ens test':>9} {'gain':>7} {'wall s':>7} {'util':>5}")
    for r in rows:
        print(f"{r['seed']:>4} {r['evaluations']:>5} {r['best_val']:>9.4f} {r['best_test']:>9.4f} {r['ensemble_test']:>9.4f} "
              f"{r['ensemble_test'] - r['best_test']:>+7.4f} {r['wall_seconds']:>7.1f} {r['utilization']:>5.2f}")
    gains = [r["ensemble_test"] - r["best_test"] for r in rows]
    summary = {
        "seeds": args.seeds,
        "ensemble_at_least_best": sum(g >= 0 for g in gains),
        "mean_gain": statistics.mean(gains),
        "mean_best_test": statistics.mean(r["best_test"] for r in rows),
        "mean_ensemble_test": statistics.mean(r["ensemble_test"] for r in rows),
        "ratio_error_ensemble_to_best": statistics.mean(1 - r["ensemble_test"] for r in rows) / max(1e-12, statistics.mean(1 - r["best_test"] for r in rows)),
        "rows": rows,
    }
    print(f"# ensemble >= best single in {summary['ensemble_at_least_best']}/{args.seeds} seeds; mean test accuracy "
          f"{summary['mean_ensemble_test']:.4f} vs {summary['mean_best_test']:.4f}; test error ratio ensemble/best "
          f"{summary['ratio_error_ensemble_to_best']:.2f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
