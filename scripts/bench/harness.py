"""What every benchmark in scripts/bench/ shares: its common flags, its machine line and its JSON line.

A benchmark reads::

    import harness

    parser = harness.parser(__doc__, quick="3 repeats: under a minute")
    parser.add_argument("--repeats", type=int, default=7)          # its own options
    args = parser.parse_args()
    ...
    print(harness.machine_line("bench_x", f"repeats={args.repeats}"))
    print(table)
    harness.emit({"x_vs_y": 1.7})                                # the last line of its output

The scripts run as files (``.venv/bin/python scripts/bench/bench_x.py``), so Python puts this folder
first on the module search path and ``import harness`` (or ``import bench_sim``) needs nothing more.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository


def parser(doc: str, quick: str, whole_doc: bool = False) -> argparse.ArgumentParser:
    """An argument parser described by the docstring's first line (all of it with ``whole_doc``), with ``--quick``.

    ``quick`` says what ``--quick`` does in that benchmark (its help text).
    """
    if whole_doc:
        p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    else:
        p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    p.add_argument("--quick", action="store_true", help=quick)
    return p


def git_commit() -> str:
    """The repository's commit, with ``-dirty`` when the work tree differs from it; ``unknown`` without git."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], check=False, cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def machine_line(name: str, details: str = "") -> str:
    """``# NAME  DATE  host=H  cpus=N  load=1m 5m 15m  commit=C  DETAILS``: where and when the figures were taken.

    The load averages are part of the figures on a shared machine: a benchmark that ran at load 3 on
    2 cores says so.
    """
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    line = f"# {name}  {now}  host={platform.node()}  cpus={os.cpu_count()}  load={load}  commit={git_commit()}"
    return f"{line}  {details}" if details else line


def read_rows(path: str) -> list[dict]:
    """A rows file's JSON lines (blank lines skipped): what a benchmark appended with :func:`append_row`."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def append_row(path: str, row: dict) -> None:
    """One finished run's row, as a JSON line at the end of ``path`` (a run cut short keeps the rows before it)."""
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def emit(result: dict) -> None:
    """The benchmark's last line: its figures as one JSON object (what docs/benchmarks.md and scripts read)."""
    print(json.dumps(result), flush=True)


def mpiexec() -> str:
    """The virtual environment's MPICH launcher beside this Python, else the PATH's (a site MPI)."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"
