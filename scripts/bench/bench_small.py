"""Benchmark: evens on small public datasets, against a hand-designed network trained with its published recipe.

Run from the repository root (after ./scripts/setup.sh; the datasets come out of the aeon wheel, which
``pip download`` fetches once from PyPI into ``$EVENS_BENCH_CACHE``, see small_data.py)::

    B="OMP_NUM_THREADS=1 .venv/bin/python scripts/bench/bench_small.py"
    $B --quick                                          # GunPoint and iris, 2 seeds, 8 networks: a few minutes
    $B --jobs 2 --seeds 5 --rows rows.jsonl             # every dataset, 48 networks: hours; each row kept as it
                                                        # finishes, and the same command again runs only the rest
    $B --tables-from rows.jsonl                         # the tables of what is there
    $B --folder DIR --rows rows.jsonl ...               # runs in DIR: a run a killed session left is resumed

Issue 32's benchmark. Every evens contender is ``evens run`` as a new user runs it, on one process (its
master trains), with a config holding only ``[data] path`` and ``[search] evaluations`` (48), the seed
set by ``--set search.seed`` and ``data.split_seed`` (which folds, or which val rows), one torch thread;
its figures are the run's own ``summary.json`` and the CPU seconds of its process. With ``--folder`` the runs live
in that folder, and a run that a killed session left behind (a long series takes hours on two cores) goes on with
``evens run --resume`` in the next one; its CPU seconds are every session's, each sampled every 20 s into
``<run>.cpu`` while it runs (so a killed session's count is short by at most 20 s and the training then running).
Contenders
(``--contenders``):

* ``evens``: today's defaults (``data.folds = "auto"``: 5 folds on these sets, steps scaled to the data);
* ``evens-before``: the defaults before issue 32: no folds (a val split of 15 %), 20-60 epochs, batches
  of 32-128, GRU/LSTM networks on series of any length (:data:`BEFORE`; the selection's tie-breaks and
  the bag rule of this commit are in both);
* ``evens-refit``: ``evens`` with ``ensemble.refit = true`` (each member one network refit on every row);
* ``evens-wide``: ``evens`` with a GA population of 16 instead of 10 (EXPERIMENT, GunPoint: a third of the 48 networks
  random, against a population that converges on one design and fills the hall of fame with near-copies of it);
* ``evens-ensemble-selection``: ``evens`` with ``search.selection = "ensemble"`` (EXPERIMENT, GunPoint: parents and
  survivors chosen by their value to the ensemble out of fold, so that a near-copy of a member is worth little);
* ``evens-explore``: ``evens`` with less selection pressure and wider mutation (tournaments of 2 instead of 3, each
  gene mutated with chance 0.3 instead of 0.1, polynomial mutation's eta 2 instead of 8; EXPERIMENT, GunPoint: children
  that stray further from the one design the population converges on);
* ``recipe``: the hand-designed network with its published recipe (small_recipes.py): ResNet-1D of Wang
  et al. 2017 as Fawaz et al. 2019 train it, for series; scikit-learn's default MLP, for tables.

The test split (the archives' own, or a stratified half of a table) is never used for any choice.
For each dataset the output gives each contender's test accuracy of its ensemble (evens) or network
(recipe), the best single network's for evens, CPU seconds, mean ± standard deviation over seeds, the
paired differences against ``evens`` with their standard errors, the published accuracies, and the
issue's targets; it ends with one JSON line.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import harness
import small_data
from quality_stats import mean_std, paired

CONTENDERS = ("evens", "evens-before", "evens-refit", "evens-wide", "evens-ensemble-selection", "evens-explore", "recipe")
# issue 32's "as today": no folds, the presets' old epochs and batches, and recurrent networks on series of any length
# (space.preset = "auto" keeps the preset: genes set without it would make the classic space)
BEFORE = ["data.folds=0", "space.preset=auto", "space.epochs={low = 20, high = 60}", "space.batch_size=[32, 64, 128]"]
BEFORE_SERIES = ["space.family=['cnn', 'rnn']"]
OVERRIDES = {"evens": [], "evens-before": BEFORE, "evens-refit": ["ensemble.refit=true"], "evens-wide": ["search.population=16"],
             "evens-ensemble-selection": ["search.selection=ensemble"],
             "evens-explore": ["search.tournament=2", "search.mutation_prob=0.3", "search.mutation_eta=2"]}


def overrides(contender: str, dataset: str) -> list[str]:
    kind = small_data.DATASETS[dataset].kind
    return OVERRIDES[contender] + (BEFORE_SERIES if contender == "evens-before" and kind == "series" else [])


def run_evens(job: dict) -> dict:
    """One ``evens run`` on one process, of the config ``folder/<dataset>.toml`` with the job's ``overrides``: its
    summary's test accuracies and its CPU seconds."""
    out = os.path.join(job["folder"], f"{job['dataset']}-{job['contender']}-{job['seed']}")
    cfg = os.path.join(job["folder"], f"{job['dataset']}.toml")
    sets = [f"search.evaluations={job['evaluations']}", f"search.seed={job['seed']}", f"data.split_seed={job['seed']}",
            "train.threads=1", *job["overrides"]]
    command = [sys.executable, "-m", "evolve", "run", cfg, "--out", out, "--quiet", *[a for s in sets for a in ("--set", s)]]
    if os.path.exists(os.path.join(out, "checkpoint.h5")):  # left by a session that was killed: it goes on
        command = [sys.executable, "-m", "evolve", "run", "--resume", out, "--quiet"]
    sessions = _sessions(out)
    began = time.perf_counter()
    proc = subprocess.Popen(command, cwd=harness.ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    done = threading.Event()
    threading.Thread(target=_sample_cpu, args=(proc.pid, f"{proc.pid}@{time.time():.0f}", out, done), daemon=True).start()
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    err = proc.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench_small: {' '.join(command)} failed: {err.strip().splitlines()[-1] if err.strip() else status}")
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    e, b = summary["ensemble"], summary["best"]
    return {"ensemble_test": e["test_accuracy"], "best_test": b["test_accuracy"], "ensemble_nll": e["test_calibration"]["nll"],
            "chosen_on": summary["chosen_on"]["rows"], "cpu": sum(sessions.values()) + usage.ru_utime + usage.ru_stime,
            "wall": time.perf_counter() - began, **({"sessions": len(sessions) + 1} if sessions else {})}


def _sessions(out: str) -> dict[str, float]:
    """The CPU seconds of the earlier sessions of the run at ``out`` (killed before it ended), by process id."""
    try:
        with open(out + ".cpu") as f:
            return {pid: float(seconds) for pid, seconds in json.load(f)["sessions"].items()}
    except (OSError, ValueError, KeyError):
        return {}


def _process_cpu(pid: int) -> float:
    """CPU seconds of process ``pid``: its own, its reaped children's, and its live descendants' (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")

    def fields(p) -> list[str]:
        with open(f"/proc/{p}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()

    total = sum(int(x) for x in fields(pid)[11:15]) / tick
    for child in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if int(fields(child)[1]) == pid:
                total += _process_cpu(int(child))
        except (OSError, ValueError, IndexError):
            pass
    return total


def _sample_cpu(pid: int, session: str, out: str, done: threading.Event) -> None:
    """Every 20 s until ``done``: the CPU of the run's process so far into ``<out>.cpu`` (as ``session``) beside the
    earlier sessions'."""
    while not done.wait(20):
        try:
            seconds = _process_cpu(pid)
        except OSError:
            return
        sessions = {**_sessions(out), session: seconds}
        with open(out + ".cpu.tmp", "w") as f:
            json.dump({"sessions": sessions}, f)
        os.replace(out + ".cpu.tmp", out + ".cpu")


def run_recipe(job: dict) -> dict:
    import small_recipes

    data = small_data.DATASETS[job["dataset"]]
    recipe = small_recipes.RECIPES[data.kind]
    epochs = {"epochs": job["recipe_epochs"]} if job["recipe_epochs"] else {}
    began = time.perf_counter()
    r = recipe(*small_data.read_splits(job["path"]), seed=job["seed"], **epochs)
    return {"ensemble_test": r.accuracy, "best_test": r.accuracy, "ensemble_nll": r.log_loss, "cpu": r.cpu_seconds,
            "wall": time.perf_counter() - began}


def run_job(job: dict) -> dict:
    result = run_recipe(job) if job["contender"] == "recipe" else run_evens(job)
    return {k: job[k] for k in ("dataset", "contender", "seed", "evaluations")} | result | ({"device": "cpu"} if job["contender"] == "recipe" else {})


def prepare(datasets: list[str], folder: str) -> dict[str, str]:
    """Each dataset as an evens file and a config with only [data] and [search] beside it."""
    paths = {}
    for name in datasets:
        h5 = os.path.join(folder, f"{name}.h5")
        if os.path.exists(h5) and os.path.exists(os.path.join(folder, f"{name}.toml")):  # a --folder used before: its runs read it
            paths[name] = h5
            continue
        paths[name] = small_data.prepare(name, folder, say=lambda line: None)
        with open(os.path.join(folder, f"{name}.toml"), "w") as f:
            f.write(f'[data]\npath = "{name}.h5"\n\n[search]\nevaluations = 48\n')
    return paths


def seed_list(text: str) -> list[int]:
    """``--seeds``: a count N (seeds 0 to N-1) or a comma-separated list of seeds."""
    values = [int(v) for v in text.split(",") if v]
    if not values or any(v < 0 for v in values) or ("," not in text and values[0] < 1):
        raise ValueError(text)
    return values if "," in text else list(range(values[0]))


def main(argv=None) -> int:
    p = harness.parser(__doc__, quick="GunPoint and iris, 2 seeds, 8 networks, the recipe 100 epochs: a few minutes")
    p.add_argument("--datasets", default=",".join(small_data.DATASETS))
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--seeds", type=seed_list, default=seed_list("5"), help="how many (seeds 0 to N-1), or which: 3,4 (one seed: 3,) (default 5)")
    p.add_argument("--evaluations", type=int, default=48)
    p.add_argument("--recipe-epochs", type=int, default=0, help="the series recipe's epochs (default: its published 1,500)")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--rows", help="a JSON line per finished run, appended; runs already there are not run again")
    p.add_argument("--recipe-rows", help="recipe runs made elsewhere (small_recipes.py --out, on a GPU say): taken as they are")
    p.add_argument("--tables-from", help="only print the tables of a rows file")
    p.add_argument("--folder", help="where the runs go (default: a new temporary folder); a run left there by a killed "
                                    "session is resumed")
    args = p.parse_args(argv)
    if args.quick:
        args.datasets, args.seeds, args.evaluations, args.recipe_epochs = "GunPoint,iris", [0, 1], 8, 100
    if args.tables_from:
        return report(harness.read_rows(args.tables_from) + (harness.read_rows(args.recipe_rows) if args.recipe_rows else []), args)
    datasets, contenders = args.datasets.split(","), args.contenders.split(",")
    for name in contenders:
        if name not in CONTENDERS:
            raise SystemExit(f"unknown contender {name!r} (known: {', '.join(CONTENDERS)})")
    done = harness.read_rows(args.rows) if args.rows and os.path.exists(args.rows) else []
    if args.recipe_rows:
        done += harness.read_rows(args.recipe_rows)
    have = {(r["dataset"], r["contender"], r["seed"], r["evaluations"] if r["contender"] != "recipe" else args.evaluations) for r in done}
    folder = args.folder or tempfile.mkdtemp(prefix="bench-small-")  # (jobs go dataset by dataset, in --datasets' order)
    os.makedirs(folder, exist_ok=True)
    paths = prepare(datasets, folder)
    jobs = [{"dataset": d, "contender": c, "seed": s, "evaluations": args.evaluations, "folder": folder, "path": paths[d],
             "recipe_epochs": args.recipe_epochs, "overrides": overrides(c, d) if c != "recipe" else []}
            for d in datasets for s in args.seeds for c in contenders if (d, c, s, args.evaluations) not in have]
    print(harness.machine_line("bench_small", f"datasets={args.datasets} seeds={','.join(map(str, args.seeds))} evaluations={args.evaluations} "
                                              f"jobs={args.jobs}"), flush=True)
    rows = list(done)
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        for row in pool.map(run_job, jobs):
            rows.append(row)
            print(f"{row['dataset']:>16} {row['contender']:>12} seed {row['seed']}: test {row['ensemble_test']:.4f} "
                  f"(best single {row['best_test']:.4f})  {row['cpu']:.0f} s CPU", flush=True)
            if args.rows:
                harness.append_row(args.rows, row)
    return report(rows, args)


def report(rows: list[dict], args) -> int:
    """Per dataset: each contender's mean ± sd over the seeds every contender finished, paired differences
    against evens, the published figures and the issue's targets."""
    out = {}
    rows = [r for r in rows if r["evaluations"] == args.evaluations or r["contender"] == "recipe"]
    for name in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == name]
        contenders = list(dict.fromkeys(r["contender"] for r in mine))
        seeds = sorted(set.intersection(*({r["seed"] for r in mine if r["contender"] == c} for c in contenders)))
        if not seeds:
            continue
        by = {c: [next(r for r in mine if r["contender"] == c and r["seed"] == s) for s in seeds] for c in contenders}
        data = small_data.DATASETS[name]
        print(f"\n{name} ({data.n_train} train / {data.n_test} test, {data.classes} classes, shape {data.sample_shape}); "
              f"{len(seeds)} seeds, test accuracy")
        result = {}
        for c in contenders:
            ens, best, cpu = (mean_std([r[k] for r in by[c]]) for k in ("ensemble_test", "best_test", "cpu"))
            line = f"  {c:>12}: {ens[0]:.4f} +- {ens[1]:.4f}"
            line += f"   best single {best[0]:.4f}" if c != "recipe" else ""
            print(line + f"   CPU {cpu[0]:.0f} s")
            result[c] = {"ensemble_test": ens[0], "best_test": best[0], "cpu": cpu[0], "seeds": len(seeds)}
        if "evens" in by:
            for c in contenders:
                if c != "evens":
                    d = paired([r["ensemble_test"] for r in by["evens"]], [r["ensemble_test"] for r in by[c]])
                    print(f"    evens - {c}: {d.mean:+.4f} +- {d.se:.4f} (paired SE)")
                    result[c]["evens_minus"] = [d.mean, d.se]
        if data.published:
            print("  published: " + ", ".join(f"{k} {v:.3f}" for k, v in data.published.items()))
        out[name] = result | {"targets": targets(name, result)}
        for line in out[name]["targets"]["lines"]:
            print(f"  target: {line}")
    harness.emit(out)
    return 0


TIE = 1e-6  # equal counts of right answers are equal (the recipe scores in float32, evens in float64)


def targets(name: str, result: dict) -> dict:
    """Issue 32's targets on means over seeds: evens' ensemble at least the recipe's, and for a series at least the best
    published deep network's (ResNet, FCN, InceptionTime) minus 0.5 points."""
    lines, met = [], {}
    if "evens" not in result:
        return {"lines": lines, "met": met}
    ours = result["evens"]["ensemble_test"]
    if "recipe" in result:
        met["recipe"] = ours >= result["recipe"]["ensemble_test"] - TIE
        lines.append(f"evens {ours:.4f} >= recipe {result['recipe']['ensemble_test']:.4f}: {'met' if met['recipe'] else 'missed'}")
    deep = [v for k, v in small_data.DATASETS[name].published.items() if k in ("ResNet", "FCN", "InceptionTime")]
    if deep:
        bar = max(deep) - 0.005
        met["published"] = ours >= bar - TIE
        lines.append(f"evens {ours:.4f} >= best published deep network - 0.005 = {bar:.4f}: {'met' if met['published'] else 'missed'}")
    return {"lines": lines, "met": met}


if __name__ == "__main__":
    sys.exit(main())
