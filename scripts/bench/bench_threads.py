"""Benchmark: evens' default threads per rank (``train.threads = 0``) against one thread per rank, under load.

Run from the repository root (after ./scripts/setup.sh)::

    .venv/bin/python scripts/bench/bench_threads.py            # 1, 2 and 4 ranks, 2 launches each, load 8
    .venv/bin/python scripts/bench/bench_threads.py --quick    # 1 and 2 ranks, one launch each, load 2

Each launch is ``evens run`` of the demo search (digits, 8x8 images) with a fixed budget of networks, as a
user runs it: one process (``evens run``), or ``mpiexec -n N`` (a master and N - 1 workers). The two
contenders run one after the other on the same machine, alternating, so a change of load touches both:

* ``default``: ``train.threads = 0`` and no ``OMP_NUM_THREADS``: each training rank takes the cores it may
  run on divided among the training ranks that may run on them (evolve.app.infra.local);
* ``one``: ``--set train.threads=1``.

The load is ``--load`` busy processes of this machine's own (a user's CI with other jobs on it), started
before the first launch and stopped after the last. Reported: wall seconds per network and the ratio
default / one per rank count (below 1: the default is faster). Ends with one JSON line.
"""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
import time

import harness
import numpy as np


def _busy(stop) -> None:  # pragma: no cover - a load process
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def launch(ranks: int, contender: str, folder: str, networks: int, data: str) -> float:
    """Wall seconds of one ``evens run`` of ``networks`` networks."""
    out = os.path.join(folder, f"run-{ranks}-{contender}-{time.monotonic_ns()}")
    sets = [f"data.path={data}", f"search.evaluations={networks}", "search.checkpoint_seconds=30", "space.epochs={low = 4, high = 4}",
            "space.family=['cnn']", "space.width=[32, 64]"] + (["train.threads=1"] if contender == "one" else [])
    evens = [sys.executable, "-m", "evolve", "run", os.path.join(harness.ROOT, "examples", "digits.toml"), "--out", out, "--quiet",
             *[a for s in sets for a in ("--set", s)]]
    command = evens if ranks == 1 else [harness.mpiexec(), "-n", str(ranks), *evens]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    began = time.perf_counter()
    proc = subprocess.run(command, cwd=harness.ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"bench_threads: {' '.join(command)} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - began


def main() -> None:
    parser = harness.parser(__doc__, quick="1 and 2 ranks, one launch each, load 2")
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--load", type=int, default=8, help="busy processes started beside the launches (default 8)")
    parser.add_argument("--networks", type=int, default=8)
    args = parser.parse_args()
    if args.quick:
        args.ranks, args.repeats, args.load = "1,2", 1, 2
    ranks = [int(r) for r in args.ranks.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as folder:
        data = os.path.join(folder, "digits.h5")
        subprocess.run([sys.executable, "-m", "evolve", "make-digits", data], cwd=harness.ROOT, check=True, capture_output=True)
        stop = multiprocessing.Event()
        load = [multiprocessing.Process(target=_busy, args=(stop,), daemon=True) for _ in range(args.load)]
        for p in load:
            p.start()
        try:
            time.sleep(2)
            print(harness.machine_line("bench_threads", f"{args.networks} networks a launch (digits, CNNs of 4 epochs), "
                                                       f"{args.load} busy processes beside, {args.repeats} launch(es) each"))
            seconds: dict[int, dict[str, list[float]]] = {r: {"default": [], "one": []} for r in ranks}
            for repeat in range(args.repeats):
                for r in ranks:
                    order = ("default", "one") if repeat % 2 == 0 else ("one", "default")
                    for contender in order:
                        seconds[r][contender].append(launch(r, contender, folder, args.networks, data))
        finally:
            stop.set()
            for p in load:
                p.join(timeout=10)
    rows = {}
    print(f"{'ranks':>5} {'default s/network':>18} {'one thread s/network':>21} {'default / one':>14}")
    for r in ranks:
        d, o = (float(np.median(seconds[r][c])) / args.networks for c in ("default", "one"))
        rows[str(r)] = {"default_s_per_network": d, "one_s_per_network": o, "default_over_one": d / o,
                        "launches": {c: [round(s, 1) for s in seconds[r][c]] for c in seconds[r]}}
        print(f"{r:>5} {d:>18.2f} {o:>21.2f} {d / o:>14.2f}")
    harness.emit({"load": args.load, "networks": args.networks, "rows": rows})


if __name__ == "__main__":
    main()
