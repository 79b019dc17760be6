"""Benchmark: what a long search costs the master and a resume, as the history grows (issue 34's scale figures).

Run from the repository root (after ./scripts/setup.sh)::

    .venv/bin/python scripts/bench/bench_scale.py                # 10^4, 3x10^4 and 10^5 evaluations
    .venv/bin/python scripts/bench/bench_scale.py --quick        # 10^4 and 3x10^4
    .venv/bin/python scripts/bench/bench_scale.py --sizes 1000000   # a million: some three hours on the 2-core VM

For each size the real search loop runs in one process over bench_master's loopback (zero-work trainings, 3
workers, async with blind breeding and the median rule, a checkpoint every 4,608 evaluations into a kept run
directory), and then, each in a fresh process, as a user would after it:

* ``master``: the master's resident memory after each checkpoint (``/proc/self/statm``), and its growth per
  evaluation from the first checkpoint past a tenth of the search to the last;
* ``run file``: the bytes of ``checkpoint.h5`` and its segments per evaluation;
* ``resume``: ``evolve.runfile.checkpoint.load`` of the run file (what ``evens run --resume`` reads before its
  first task goes out): seconds and the process's peak memory;
* ``report`` and ``status``: ``evens report --json`` and ``evens status``, seconds.

Reports each figure per size and the growth from the smallest size to the largest (a resume that reads the
history grows with it; issue 34's targets: memory at most 100 MB per million evaluations, a resume at most 5 s
and a report at most 30 s and status 2 s at 10 million). Ends with one JSON line.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import harness
from bench_master import PREFETCH, Loopback, search

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    """This process's resident memory now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(folder) for name in names)


LOAD = """import resource, sys, time
t = time.perf_counter()
from evolve.runfile import checkpoint
state, info = checkpoint.load(sys.argv[1])
print(time.perf_counter() - t, len(state.records), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def timed(command: list[str]) -> float:
    began = time.perf_counter()
    proc = subprocess.run(command, cwd=harness.ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"bench_scale: {' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - began


def measure(evaluations: int, folder: str) -> dict:
    samples: list[tuple[int, int]] = []
    os.makedirs(folder)
    loopback = Loopback(3, 2)
    search(loopback, evaluations, lambda: loopback.cpu, PREFETCH, "blind", folder=folder, after_save=lambda n: samples.append((n, rss())))
    first = next((s for s in samples if s[0] >= evaluations // 10), samples[0])
    last = samples[-1]
    path = os.path.join(folder, "checkpoint.h5")
    load = subprocess.run([sys.executable, "-c", LOAD, path], cwd=harness.ROOT, capture_output=True, text=True, timeout=3600)
    if load.returncode != 0:
        raise SystemExit(f"bench_scale: loading {path} failed:\n{load.stderr[-2000:]}")
    seconds, records, peak = load.stdout.split()
    evens = [sys.executable, "-m", "evolve"]
    return {
        "evaluations": int(records),
        "master_rss_mb": last[1] / 2**20,
        "master_bytes_per_eval": (last[1] - first[1]) / max(1, last[0] - first[0]),
        "run_file_bytes_per_eval": folder_bytes(folder) / int(records),
        "resume_s": float(seconds),
        "resume_peak_mb": int(peak) / 2**20,
        "report_s": timed(evens + ["report", folder, "--json"]),
        "status_s": timed(evens + ["status", folder]),
    }


def main() -> None:
    parser = harness.parser(__doc__, quick="10^4 and 3x10^4 evaluations")
    parser.add_argument("--sizes", default="10000,30000,100000", help="evaluations per search, comma separated")
    args = parser.parse_args()
    sizes = [10_000, 30_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    print(harness.machine_line("bench_scale", f"sizes {sizes}; the search loop in one process over a loopback, zero-work "
                                              "trainings, 3 workers, a checkpoint every 4,608 evaluations"))
    rows = {}
    print(f"{'evaluations':>11} {'master MB':>9} {'bytes/eval':>10} {'file bytes/eval':>15} {'resume s':>8} "
          f"{'resume MB':>9} {'report s':>8} {'status s':>8}")
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
            row = rows[str(n)] = measure(n, os.path.join(folder, "run"))
        print(f"{row['evaluations']:>11,} {row['master_rss_mb']:>9.0f} {row['master_bytes_per_eval']:>10.0f} "
              f"{row['run_file_bytes_per_eval']:>15.0f} {row['resume_s']:>8.2f} {row['resume_peak_mb']:>9.0f} "
              f"{row['report_s']:>8.2f} {row['status_s']:>8.2f}")
    small, large = rows[str(sizes[0])], rows[str(sizes[-1])]
    growth = {f"{k}_growth": large[k] / small[k] for k in ("resume_s", "resume_peak_mb", "report_s", "status_s") if small[k] > 0}
    growth["evaluations_ratio"] = large["evaluations"] / small["evaluations"]
    print("growth from the smallest to the largest: " + ", ".join(f"{k} {v:.2f}" for k, v in growth.items()))
    harness.emit({"sizes": rows, **growth})


if __name__ == "__main__":
    main()
