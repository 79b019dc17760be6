"""Benchmark: what a long search costs the master and a resume, as the history grows (issue 34's scale figures).

Run from the repository root (after ./scripts/setup.sh)::

    .venv/bin/python scripts/bench/bench_scale.py                      # live 10^4 to 10^5, synthetic 10^5 and 10^6
    .venv/bin/python scripts/bench/bench_scale.py --quick              # live 10^4 and 3x10^4, synthetic 10^5
    .venv/bin/python scripts/bench/bench_scale.py --sizes 1000000 --synthetic 100000,1000000,10000000
                                                                       # issue 34's sizes: some 40 minutes on the 2-core VM
    .venv/bin/python scripts/bench/bench_scale.py --variant promotion --synthetic ''
                                                                       # the live searches with successive halving

Two kinds of run, each measured the same way:

* live (``--sizes``): the real search loop runs in one process over bench_master's loopback (zero-work
  trainings, 3 workers, async with blind breeding and the median rule (``--variant promotion``: successive
  halving instead), a checkpoint every 4,608 evaluations into a kept run directory, the records each
  checkpoint committed let go as ``evens run`` does). ``master``:
  its resident memory after each checkpoint (``/proc/self/statm``), and its growth per evaluation from the
  first checkpoint past a tenth of the search to the last; and the master's CPU in a checkpoint early (the median
  of the 2nd to 4th) and at the end (of the last 3): a checkpoint writes the master's memory whole, so this grows;
* synthetic (``--synthetic``): scripts/bench/synthetic_run.py grows such a run's history to the size, through
  the product's checkpoint and segment code (a live search of 10^7 evaluations takes hours here).

Then, each in a fresh process, as a user would after it:

* ``run file``: the bytes of ``checkpoint.h5`` and its segments per evaluation;
* ``resume``: what ``evens run --resume`` does before its first task goes out: ``checkpoint.load`` of the
  state file alone (the history too where the memory cannot serve; it can here) and the search's strategy,
  median rule and successive halving built from it; seconds and the process's peak memory;
* ``history load``: ``checkpoint.load`` of every record (what a resume of the optuna strategy reads; ``report
  --plot`` and a Pareto front did until 2026-11-29), for sizes up to 10^6;
* ``report`` and ``status``: ``evens report --json`` (the account, and the tables streamed from a few columns)
  and ``evens status`` (the state file alone), seconds;
* ``csv``: ``evens report --csv FILE`` (every record, a slice of the history at a time), seconds and peak
  memory, for sizes up to 10^6 (at 10^7 the file alone is some 3 GB);
* ``select``: ``evens select --size 3`` (the state file alone), seconds and peak memory; last, as it changes the run.

Reports each figure per size and the growth from the smallest size to the largest (issue 34's targets: memory
at most 100 MB per million evaluations, a resume at most 5 s, a report at most 30 s and status 2 s at 10
million). Ends with one JSON line.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import harness
import numpy as np
import synthetic_run
from bench_master import PREFETCH, Loopback, search

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    """This process's resident memory now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names)


# the process's own peak resident memory: /proc's VmHWM (getrusage's ru_maxrss survives execve, so a child of a large
# benchmark process would report the parent's)
PEAK = """import re
PEAK = lambda: 1024 * int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
"""

RESUME = PEAK + """import sys, time
t = time.perf_counter()
from evolve.engine import memory
from evolve.engine.loop import uses_median_rule
from evolve.engine.promotion import Halving
from evolve.runfile import checkpoint
from evolve.search.early_stop import MedianRule
from evolve.search.registry import Context, make_strategy
state, info = checkpoint.load(sys.argv[1], history=False)
search = info.config.search
if not memory.resumable(state.memory, search, uses_median_rule(search)):
    state, info = checkpoint.load(sys.argv[1])
    raise SystemExit("the memory cannot serve this run: " + str(len(state.records)))
space = info.space()
strategy = make_strategy(search.mode, Context(space, search, state.rng, [], state.pending, state.strategy, memory=memory.part(state.memory, "strategy")))
rule = MedianRule.restored(memory.part(state.memory, "median")) if uses_median_rule(search) else None
if search.promotion:  # the paused networks' genomes: the file the checkpoint names, as evens run opens it
    from evolve.runfile.genomes import genomes_path, open_for, usable
    kept = memory.part(state.memory, "halving")
    assert usable(genomes_path(sys.argv[1]), kept, len(space)), "the genome file is not the checkpoint's"
    halving = Halving.restored(search, kept, state.pending, open_for(genomes_path(sys.argv[1]), kept, len(space)))
print(time.perf_counter() - t, state.recorded, PEAK())
"""

HISTORY = PEAK + """import sys, time
t = time.perf_counter()
from evolve.runfile import checkpoint
state, info = checkpoint.load(sys.argv[1])
print(time.perf_counter() - t, len(state.records), PEAK())
"""
HISTORY_UP_TO = 1_000_000  # larger histories are not loaded whole (some 35 us and 2 KB a record)

COMMAND = PEAK + """import sys, time
t = time.perf_counter()
from evolve.app.commands.cli import main
code = main(sys.argv[2:])
if code:
    raise SystemExit(code)
print(time.perf_counter() - t, 0, PEAK())
"""
CSV_UP_TO = 1_000_000


def timed(command: list[str]) -> float:
    began = time.perf_counter()
    proc = subprocess.run(command, cwd=harness.ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"bench_scale: {' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - began


def figures(command: str, path: str, args: tuple = ()) -> tuple[float, int, int]:
    proc = subprocess.run([sys.executable, "-c", command, path, *args], cwd=harness.ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"bench_scale: reading {path} failed:\n{proc.stderr[-2000:]}")
    seconds, records, peak = proc.stdout.split()[-3:]
    return float(seconds), int(records), int(peak)


def live(evaluations: int, folder: str, variant: str = "blind") -> dict:
    """The live search's memory, then what :func:`after` measures."""
    samples: list[tuple[int, int]] = []
    os.makedirs(folder)
    loopback = Loopback(3, 2)
    figures = search(loopback, evaluations, lambda: loopback.cpu, PREFETCH, variant, folder=folder,
                     after_save=lambda n: samples.append((n, rss())))
    first = next((s for s in samples if s[0] >= evaluations // 10), samples[0])
    last = samples[-1]
    saves = [ms for _, ms in figures["checkpoint_ms"]]  # the master's CPU in each checkpoint: does it grow with the history?
    return {"master_rss_mb": last[1] / 2**20, "master_bytes_per_eval": (last[1] - first[1]) / max(1, last[0] - first[0]),
            "checkpoint_ms_first": float(np.median(saves[1:4] or saves)), "checkpoint_ms_last": float(np.median(saves[-3:])), **after(folder)}


def synthetic(evaluations: int, folder: str) -> dict:
    os.makedirs(folder)
    synthetic_run.seed_run(folder)
    synthetic_run.grow(folder, evaluations, say=lambda line: None)
    return after(folder)


def after(folder: str) -> dict:
    path = os.path.join(folder, "checkpoint.h5")
    seconds, records, peak = figures(RESUME, path)
    evens = [sys.executable, "-m", "evolve"]
    row = {"evaluations": records, "run_file_bytes_per_eval": folder_bytes(folder) / records, "resume_s": seconds, "resume_peak_mb": peak / 2**20,
           "history_load_s": None, "history_peak_mb": None, "report_s": timed(evens + ["report", folder, "--json"]),
           "status_s": timed(evens + ["status", folder])}
    if records <= HISTORY_UP_TO:
        seconds, _, peak = figures(HISTORY, path)
        row.update(history_load_s=seconds, history_peak_mb=peak / 2**20)
    row.update(csv_s=None, csv_peak_mb=None)
    if records <= CSV_UP_TO:
        table = os.path.join(os.path.dirname(folder), "runs.csv")
        seconds, _, peak = figures(COMMAND, path, ["report", folder, "--csv", table])
        os.remove(table)
        row.update(csv_s=seconds, csv_peak_mb=peak / 2**20)
    seconds, _, peak = figures(COMMAND, path, ["select", folder, "--size", "3"])
    row.update(select_s=seconds, select_peak_mb=peak / 2**20)
    return row


def show(kind: str, row: dict) -> None:
    cell = lambda v, f: format(v, f) if v is not None else "-"  # noqa: E731
    print(f"{kind:>9} {row['evaluations']:>11,} {cell(row.get('master_rss_mb'), '>9.0f'):>9} {cell(row.get('master_bytes_per_eval'), '>10.0f'):>10} "
          f"{row['run_file_bytes_per_eval']:>10.0f} {row['resume_s']:>8.2f} {row['resume_peak_mb']:>9.0f} {cell(row['history_load_s'], '>8.2f'):>8} "
          f"{cell(row['report_s'], '>8.2f'):>8} {row['status_s']:>8.2f} {cell(row['csv_s'], '>7.1f'):>7} {cell(row['csv_peak_mb'], '>7.0f'):>7} "
          f"{row['select_s']:>8.2f} {row['select_peak_mb']:>9.0f}")


def main() -> None:
    parser = harness.parser(__doc__, quick="live 10^4 and 3x10^4, synthetic 10^5")
    parser.add_argument("--sizes", default="10000,30000,100000", help="live searches' evaluations, comma separated ('' for none)")
    parser.add_argument("--synthetic", default="100000,1000000", help="synthetic histories' evaluations, comma separated ('' for none)")
    parser.add_argument("--variant", choices=("blind", "promotion"), default="blind", help="the live searches' (bench_master.VARIANTS)")
    args = parser.parse_args()
    sizes = [10_000, 30_000] if args.quick else [int(s) for s in args.sizes.split(",") if s]
    made = [100_000] if args.quick else [int(s) for s in args.synthetic.split(",") if s]
    print(harness.machine_line("bench_scale", f"live {sizes} ({args.variant}): the search loop in one process over a loopback, zero-work trainings, 3 workers, "
                                              f"a checkpoint every 4,608 evaluations; synthetic {made} (synthetic_run.py)"))
    print(f"{'run':>9} {'evaluations':>11} {'master MB':>9} {'bytes/eval':>10} {'file B/eval':>10} {'resume s':>8} {'resume MB':>9} "
          f"{'load s':>8} {'report s':>8} {'status s':>8} {'csv s':>7} {'csv MB':>7} {'select s':>8} {'select MB':>9}")
    rows: dict[str, dict] = {}
    for kind, ns, measure in (("live", sizes, lambda n, folder: live(n, folder, args.variant)), ("synthetic", made, synthetic)):
        for n in ns:
            with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
                row = rows[f"{kind}_{n}"] = measure(n, os.path.join(folder, "run"))
            show(kind, row)
    everything = sorted(rows.values(), key=lambda r: r["evaluations"])
    small, large = everything[0], everything[-1]
    growth = {f"{k}_growth": large[k] / small[k] for k in ("resume_s", "resume_peak_mb", "status_s", "select_s", "select_peak_mb") if small[k]}
    growth["evaluations_ratio"] = large["evaluations"] / small["evaluations"]
    for kind_row in (r for r in everything if "checkpoint_ms_last" in r):  # a live search's checkpoints, early and late
        print(f"live {kind_row['evaluations']:,}: a checkpoint costs the master {kind_row['checkpoint_ms_first']:.0f} ms early "
              f"(checkpoints 2-4) and {kind_row['checkpoint_ms_last']:.0f} ms at the end (the last 3)")
    print("growth from the smallest to the largest: " + ", ".join(f"{k} {v:.2f}" for k, v in growth.items()))
    harness.emit({"runs": rows, **growth})


if __name__ == "__main__":
    main()
