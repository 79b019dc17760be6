"""Study: up to how many training rows does cross-validation (``data.folds = 5``) beat a validation split?

Run from the repository root::

    B="OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/study_folds.py"
    $B --jobs 2 --rows docs/measurements/folds.jsonl      # hours; rows kept as they finish, the same command resumes
    $B --tables-from docs/measurements/folds.jsonl

``data.folds = "auto"`` turns 5-fold cross-validation on under a threshold of training rows; this measures
where it stops paying. For each dataset and training size (``--sizes``), a file with a train and a test
split only (as ``evens convert`` writes one) is searched twice per seed, with everything else at its default:

* ``folds``: ``data.folds = 5``: each network is 5 fold trainings, chosen and ensembled out of fold, and its
  member is its 5 fold models averaged;
* ``split``: ``data.folds = 0``: one training per network on 85 % of the rows, chosen on the other 15 %.

Both contenders run ``evens run`` as bench_small.py does (one process, one torch thread, ``--networks``
networks, ``search.seed`` and ``data.split_seed`` the seed). The data is the same for every seed of a size:
the training rows are a stratified draw of ``size`` rows (seed 0) from a pool, and the test split is fixed
and never used for a choice. Datasets (``--datasets``):

* ``digits``: scikit-learn's 8x8 digits, (1, 8, 8), 10 classes: a stratified third (599 rows) is the test
  split, the training rows are drawn from the other 1,198; ``digits-table``: the same rows as 64 features, a
  table (the tabular preset's MLPs: a tenth of a CNN's cost per step);
* ``signal``, ``image``: the generated tasks of bench_quality.py (data_bcast.synthetic), 1,500 test rows.

Per dataset and size the output gives each contender's ensemble and best-single test accuracy (mean over
seeds), the paired difference ``folds - split`` with its standard error, and each one's CPU seconds; it ends
with one JSON line.
"""
from __future__ import annotations

import concurrent.futures
import os
import sys
import tempfile

import numpy as np

import harness
from bench_small import run_evens
from quality_stats import mean_std, paired

from data_bcast import write_dataset

CONTENDERS = {"folds": ["data.folds=5"], "split": ["data.folds=0"]}
TEST_ROWS = 1500  # of a generated task


def pool_of(dataset: str) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(training pool, test split) of ``dataset``, each ``(x, y)``."""
    if dataset in ("digits", "digits-table"):
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        d = load_digits()
        x = (d.images / 16.0).astype(np.float32)
        x = x.reshape(len(x), 64) if dataset == "digits-table" else x[:, None, :, :]
        x_pool, x_test, y_pool, y_test = train_test_split(x, d.target.astype(np.int64), test_size=1 / 3, stratify=d.target,
                                                          random_state=0)
        return (x_pool, y_pool), (x_test, y_test)
    from data_bcast.synthetic import make_shapes, make_signals

    make = {"signal": make_signals, "image": make_shapes}[dataset]
    return make(4000, np.random.default_rng([0, 0])), make(TEST_ROWS, np.random.default_rng([0, 2]))


def write(dataset: str, size: int, folder: str) -> str:
    """``folder/<dataset>-<size>.h5`` (train: a stratified draw of ``size`` pool rows; test) and its config beside it."""
    from sklearn.model_selection import train_test_split

    (x, y), test = pool_of(dataset)
    if size > len(y):
        raise SystemExit(f"{dataset}: {size} training rows asked, its pool has {len(y)}")
    if size < len(y):
        x, _, y, _ = train_test_split(x, y, train_size=size, stratify=y, random_state=0)
    name = f"{dataset}-{size}"
    write_dataset(os.path.join(folder, f"{name}.h5"), {"train": (x, y), "test": test}, overwrite=True)
    with open(os.path.join(folder, f"{name}.toml"), "w") as f:
        f.write(f'[data]\npath = "{name}.h5"\n')
    return name


def run_job(job: dict) -> dict:
    row = run_evens(job)
    return {k: job[k] for k in ("dataset", "size", "contender", "seed", "evaluations")} | row


def main(argv=None) -> int:
    p = harness.parser(__doc__, quick="digits at 150 and 600 rows, 2 seeds, 6 networks: minutes")
    p.add_argument("--datasets", default="digits")
    p.add_argument("--sizes", default="150,300,600,1198")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--networks", type=int, default=24)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--rows", help="a JSON line per finished run, appended; runs already there are not run again")
    p.add_argument("--tables-from", help="only print the tables of a rows file")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.seeds, args.networks = "150,600", 2, 6
    if args.tables_from:
        return report(harness.read_rows(args.tables_from), args.networks)
    done = harness.read_rows(args.rows) if args.rows and os.path.exists(args.rows) else []
    have = {(r["dataset"], r["size"], r["contender"], r["seed"], r["evaluations"]) for r in done}
    folder = tempfile.mkdtemp(prefix="study-folds-")
    jobs = []
    for dataset in args.datasets.split(","):
        for size in map(int, args.sizes.split(",")):
            name = write(dataset, size, folder)
            jobs += [{"dataset": name, "size": size, "contender": c, "seed": s, "evaluations": args.networks, "folder": folder,
                      "overrides": CONTENDERS[c]}
                     for s in range(args.seeds) for c in CONTENDERS if (name, size, c, s, args.networks) not in have]
    print(harness.machine_line("study_folds", f"datasets={args.datasets} sizes={args.sizes} seeds={args.seeds} "
                                              f"networks={args.networks} jobs={args.jobs}"), flush=True)
    rows = list(done)
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        for row in pool.map(run_job, jobs):
            rows.append(row)
            print(f"{row['dataset']:>14} {row['contender']:>6} seed {row['seed']}: test {row['ensemble_test']:.4f} "
                  f"(best single {row['best_test']:.4f}, chosen on {row['chosen_on']} rows)  {row['cpu']:.0f} s CPU", flush=True)
            if args.rows:
                harness.append_row(args.rows, row)
    return report(rows, args.networks)


def report(rows: list[dict], networks: int) -> int:
    """Per dataset and size, over the seeds both contenders finished: means, ``folds - split`` paired, CPU."""
    out = {}
    rows = [r for r in rows if r["evaluations"] == networks]
    print(f"\n{'data':>14} {'seeds':>5} {'folds':>7} {'split':>7} {'folds - split':>17} {'best: folds - split':>21} "
          f"{'CPU folds':>9} {'split':>6}")
    for name in sorted(dict.fromkeys(r["dataset"] for r in rows), key=lambda n: (n.rsplit("-", 1)[0], int(n.rsplit("-", 1)[1]))):
        by = {c: {r["seed"]: r for r in rows if r["dataset"] == name and r["contender"] == c} for c in CONTENDERS}
        seeds = sorted(set(by["folds"]) & set(by["split"]))
        if not seeds:
            continue
        a, b = ([by[c][s] for s in seeds] for c in ("folds", "split"))
        ens, best = (paired([r[k] for r in a], [r[k] for r in b]) for k in ("ensemble_test", "best_test"))
        cpu = [mean_std([r["cpu"] for r in side])[0] for side in (a, b)]
        means = [mean_std([r["ensemble_test"] for r in side])[0] for side in (a, b)]
        print(f"{name:>14} {len(seeds):>5} {means[0]:7.4f} {means[1]:7.4f} {ens.mean:+8.4f} +- {ens.se:.4f} "
              f"{best.mean:+12.4f} +- {best.se:.4f} {cpu[0]:9.0f} {cpu[1]:6.0f}")
        out[name] = {"seeds": len(seeds), "folds": means[0], "split": means[1], "ensemble_diff": [ens.mean, ens.se],
                     "best_diff": [best.mean, best.se], "cpu": cpu}
    harness.emit(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
