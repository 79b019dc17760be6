"""Benchmark: what a checkpoint costs the master, and its HDF5 writes through h5py's high-level calls against ensemble.h5write.

Run from the repository root (after ./scripts/setup.sh)::

    .venv/bin/python scripts/bench_checkpoint.py            # 7 repeats of each, alternated
    .venv/bin/python scripts/bench_checkpoint.py --quick    # 3 repeats

Contenders, alternated in one process, each writing into a fresh file (the median of the repeats):

* ``members``: 32 hall-of-fame members written into ``/ensemble/members``, as a checkpoint writes the
  members that entered since the last one; ``h5py``: with h5py's high-level ``create_group``,
  ``attrs.update`` and ``create_dataset(..., fletcher32=True)`` (what evens did before
  ensemble.h5write); ``h5write``: :func:`ensemble.store.add_members`. Both make byte-identical files
  (tests/test_h5write.py). Two kinds of member: three small arrays (the zero-work trainings of
  scripts/bench_master.py) and a small CNN (4 conv layers with batch norm: 20 tensors, predictions on
  500 samples);
* ``segment``: the columns of 4,608 evaluations (a checkpoint's worth in bench_master.py) written as
  a segment file's datasets: ``h5py`` (``f[name] = column``) against ``h5write`` (evolve.segments).

Then, not a contest: ``checkpoint.save`` as the master calls it, 4,608 new evaluations each time,
with 32 members entering the hall, and with the hall unchanged (ms per save; half of each kind
merge segments, as every second save does).
Prints a table and one JSON line.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ensemble.hall_of_fame import Member  # noqa: E402
from ensemble.problem import Classification  # noqa: E402
from ensemble.store import add_members, member_checksums  # noqa: E402
from evolve import checkpoint, segments  # noqa: E402
from evolve.checkpoint import RunInfo  # noqa: E402
from evolve.master import SearchState  # noqa: E402
from evolve.records import Record  # noqa: E402
from evolve.space import GENE_NAMES  # noqa: E402

ROWS = 4608


def small_member(ident: int) -> Member:
    return Member(ident, 0.5 + ident * 1e-6, {"family": "mlp", "depth": 2, "width": 64}, {"learning_rate": 0.001, "epochs": 2},
                  np.full((4, 2), 0.5, np.float32), np.full((6, 2), 0.5, np.float32), {"w": np.zeros(16, np.float32)})


def cnn_member(ident: int, rng: np.random.Generator) -> Member:
    weights = {}
    for layer in range(4):
        weights[f"{layer}.weight"] = rng.random((32, 32, 3, 3), dtype=np.float32)
        for name in ("bias", "running_mean", "running_var"):
            weights[f"{layer}.{name}"] = rng.random(32, dtype=np.float32)
        weights[f"{layer}.num_batches_tracked"] = np.array(100)
    return Member(ident, 0.5, {"family": "cnn", "depth": 4}, {"learning_rate": 0.001, "epochs": 12},
                  rng.random((500, 10), dtype=np.float32), rng.random((500, 10), dtype=np.float32), weights)


def members_by_h5py(f: h5py.File, members: list[Member]) -> None:
    """What ensemble.store wrote before ensemble.h5write: the same objects, through h5py's high-level calls."""
    group = f.create_group("members")
    for m in members:
        g = group.create_group(str(m.id))
        val, test = np.asarray(m.val_pred, dtype=np.float32), np.asarray(m.test_pred, dtype=np.float32)
        g.attrs.update(fitness=m.fitness, network=json.dumps(m.network), training=json.dumps(m.training),
                       checksums=json.dumps(member_checksums(val, test, m.weights)))  # (ensemble format 3)
        for name, array in (("val_pred", m.val_pred), ("test_pred", m.test_pred)):
            g.create_dataset(name, data=array, fletcher32=True)
        w = g.create_group("weights")
        for name, array in m.weights.items():
            w.create_dataset(name, data=array, **({"fletcher32": True} if array.ndim and array.size else {}))


def members_by_h5write(f: h5py.File, members: list[Member]) -> None:
    add_members(f.create_group("members"), members)


def segment_by_h5py(f: h5py.File, columns: dict) -> None:
    for key, values in columns.items():
        if key == "metrics":
            group = f.create_group("metrics")
            for metric, column in values.items():
                group[metric] = column
        elif values.dtype.kind == "O":
            f.create_dataset(key, data=values, dtype=h5py.string_dtype())
        else:
            f[key] = values


def records(start: int, n: int, rng: random.Random) -> list[Record]:
    return [Record(i, [rng.random() for _ in GENE_NAMES], (i - 1, i - 2), "ok", rng.random(), {"val_accuracy": 0.5, "test_accuracy": 0.4},
                   1.0, 2, 1 + i % 3, 1e9 + i, 1e9 + i + 1, "", "crossover+mutation", [0.2, 0.4]) for i in range(start, start + n)]


def timed(write, folder: str, *args) -> float:
    path = os.path.join(folder, f"x{time.monotonic_ns()}.h5")
    began = time.perf_counter()
    with h5py.File(path, "w") as f:
        write(f, *args)
    seconds = time.perf_counter() - began
    os.remove(path)
    return seconds


def saves(folder: str, repeats: int, rng: random.Random) -> dict:
    """ms per checkpoint.save, as run_search's master calls it: 4,608 new records each time."""
    problem = Classification(2)
    info = RunInfo({"search": {}}, list(GENE_NAMES), {"problem": problem.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"},
                   np.array([0, 1, 1, 0]), np.array([1, 0, 1, 1, 0, 0]))
    state = SearchState.fresh(0, candidates=32)
    path = os.path.join(folder, "checkpoint.h5")
    out = {"hall_changed_ms": [], "hall_unchanged_ms": []}
    for k in range(4 * repeats):
        state.records += records(len(state.records), ROWS, rng)
        # every second save merges segments (a binary counter): each kind has as many of both
        changed = k % 4 in (0, 3)
        if changed:  # 32 members enter (and as many leave)
            for m in [small_member(len(state.records) - 1 - j) for j in range(32)]:
                m.fitness = 1.0 + len(state.records) + m.id * 1e-9
                state.hall_of_fame.offer(m)
        began = time.perf_counter()
        checkpoint.save(path, state, info)
        out["hall_changed_ms" if changed else "hall_unchanged_ms"].append(1e3 * (time.perf_counter() - began))
    return {key: statistics.median(values) for key, values in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    rng = np.random.default_rng(0)
    kinds = {"members_small": [small_member(i) for i in range(32)], "members_cnn": [cnn_member(i, rng) for i in range(32)]}
    columns = segments._record_columns(records(0, ROWS, random.Random(0)), len(GENE_NAMES))
    contests = {name: (members_by_h5py, members_by_h5write, ms) for name, ms in kinds.items()}
    contests["segment"] = (segment_by_h5py, segments._fill, columns)
    times: dict[str, dict[str, list[float]]] = {name: {"h5py": [], "h5write": []} for name in contests}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(repeats):
            for name, (old, new, arg) in contests.items():  # alternated, so a change of load touches both alike
                times[name]["h5py"].append(timed(old, folder, arg))
                times[name]["h5write"].append(timed(new, folder, arg))
        save = saves(folder, repeats, random.Random(1))
    print(f"# bench_checkpoint  {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}  host={platform.node()}  "
          f"cpus={os.cpu_count()}  load={' '.join(f'{v:.2f}' for v in os.getloadavg())}  h5py {h5py.version.version}, "
          f"HDF5 {h5py.version.hdf5_version}; medians of {repeats}")
    print(f"{'contest':>14} {'h5py ms':>9} {'h5write ms':>11} {'h5py/h5write':>13}")
    result = {}
    for name, t in times.items():
        a, b = statistics.median(t["h5py"]), statistics.median(t["h5write"])
        per = 32 if name.startswith("members") else 1
        print(f"{name:>14} {1e3 * a / per:>9.2f} {1e3 * b / per:>11.2f} {a / b:>13.2f}" + ("   (per member)" if per > 1 else ""))
        result[f"{name}_ratio"] = round(a / b, 2)
        result[f"{name}_ms"] = round(1e3 * b / per, 3)
    print(f"checkpoint.save with {ROWS} new evaluations: {save['hall_changed_ms']:.1f} ms when 32 members enter the hall, "
          f"{save['hall_unchanged_ms']:.1f} ms when it is unchanged")
    result.update(save_hall_changed_ms=round(save["hall_changed_ms"], 1), save_hall_unchanged_ms=round(save["hall_unchanged_ms"], 1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
