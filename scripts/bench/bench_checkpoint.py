"""Benchmark: what a checkpoint costs the master, against rewriting the whole history at every checkpoint.

Run from the repository root (after ./scripts/setup.sh)::

    .venv/bin/python scripts/bench/bench_checkpoint.py            # 7 repeats
    .venv/bin/python scripts/bench/bench_checkpoint.py --quick    # 3 repeats, the memory at 10^6 networks only

``checkpoint.save`` as the master calls it, 4,608 new evaluations each time (a checkpoint's worth in
bench_master.py), with 32 members entering the hall of fame, and with the hall unchanged (ms per save;
half of each kind merge segments, as every second save does). The contender, timed beside each save
on the same history: writing every record so far as one file (the columns of evolve.runfile.columns),
what a checkpoint without the append-only segment log would do. Its cost grows with the history; the
ratio is reported at the last save. Then, not a contest: what writing a hall-of-fame member costs
(``ensemble.store.add_members``, h5py's high-level calls), for three small arrays (the zero-work
trainings of bench_master.py) and a small CNN (4 conv layers with batch norm: 20 tensors, predictions
on 500 samples). Then the master's memory at a checkpoint of a search that has proposed 10^6 and 10^7
networks (``--networks``): 4,608 proposals made since the last checkpoint merged into the set of the
networks proposed (evolve.search.keyset: a sorted array of 64-bit hashes), against the merge it
replaced (``np.union1d``, whose ``np.unique`` hashes since NumPy 2.3); and what a checkpoint writes of them: the
new hashes appended to ``checkpoint.proposed`` and synced (evolve.runfile.proposed, what evens run does), against
the whole set written into a state file and synced (what a checkpoint did before it). Prints a table and one JSON line.
"""
from __future__ import annotations

import os
import random
import statistics
import tempfile
import time

import h5py
import harness
import numpy as np

from ensemble.hall_of_fame import Member
from ensemble.problem import Classification
from ensemble.store import add_members
from evolve.config.schema import config_from_dict
from evolve.engine.state import SearchState
from evolve.runfile import checkpoint, columns
from evolve.runfile.checkpoint import RunInfo
from evolve.runfile.proposed import ProposedLog
from evolve.runfile.segments import write_columns
from evolve.search.keyset import KeySet, sorted_unique
from evolve.search.records import Record
from evolve.search.space import GENE_NAMES

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


def records(start: int, n: int, rng: random.Random) -> list[Record]:
    return [Record(id=i, genome=[rng.random() for _ in GENE_NAMES], parents=(i - 1, i - 2), status="ok", fitness=rng.random(),
                   metrics={"val_accuracy": 0.5, "test_accuracy": 0.4}, seconds=1.0, epochs_done=2, worker=1 + i % 3,
                   started=1e9 + i, finished=1e9 + i + 1, message="", operators="crossover+mutation", curve=[0.2, 0.4])
            for i in range(start, start + n)]


def timed(write, folder: str, *args) -> float:
    path = os.path.join(folder, f"x{time.monotonic_ns()}.h5")
    began = time.perf_counter()
    with h5py.File(path, "w") as f:
        write(f, *args)
    seconds = time.perf_counter() - began
    os.remove(path)
    return seconds


def whole_history(folder: str, records_so_far: list[Record]) -> float:
    """Seconds to write every record so far as one file: the contender."""
    path = os.path.join(folder, f"whole{time.monotonic_ns()}.h5")
    began = time.perf_counter()
    with h5py.File(path, "w") as f:
        write_columns(f, columns.encode(records_so_far, Record, len(GENE_NAMES)))
    seconds = time.perf_counter() - began
    os.remove(path)
    return seconds


def saves(folder: str, repeats: int, rng: random.Random) -> dict:
    """ms per checkpoint.save, as run_search's master calls it (4,608 new records each time), and the contender beside it."""
    problem = Classification(2)
    info = RunInfo(config_from_dict({"space": {}}), list(GENE_NAMES), {"problem": problem.to_dict(), "sample_shape": [1, 8, 8], "x_dtype": "float32"},
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
    last = statistics.median(out["hall_changed_ms"][-2:] + out["hall_unchanged_ms"][-2:])
    rewrite = 1e3 * statistics.median(whole_history(folder, state.records) for _ in range(3))
    return {**{key: statistics.median(values) for key, values in out.items()}, "rows": len(state.records), "last_ms": last,
            "rewrite_ms": rewrite}


def member_ms(folder: str, members: list[Member], repeats: int) -> float:
    """ms per member written by ensemble.store.add_members (the median of ``repeats``)."""
    def once() -> float:
        path = os.path.join(folder, f"m{time.monotonic_ns()}.h5")
        began = time.perf_counter()
        with h5py.File(path, "w") as f:
            add_members(f.create_group("members"), members)
        seconds = time.perf_counter() - began
        os.remove(path)
        return seconds
    return 1e3 * statistics.median(once() for _ in range(repeats)) / len(members)


def memory_ms(folder: str, networks: int, repeats: int) -> dict:
    """ms a checkpoint's memory costs with ``networks`` proposed: the KeySet's merge of a checkpoint's new hashes, the
    same merge by np.union1d, and writing the merged hashes into an HDF5 file with an fsync (what checkpoint.save does)."""
    rng = np.random.default_rng(networks)
    base = sorted_unique(rng.integers(-2**63, 2**63 - 1, networks, dtype=np.int64))
    merge, union, write, append = [], [], [], []
    log = ProposedLog(os.path.join(folder, "checkpoint.proposed"))
    log.append(base)
    log.sync()
    for _ in range(repeats):
        new = rng.integers(-2**63, 2**63 - 1, ROWS, dtype=np.int64)
        held = KeySet(hasher=int, hashes=base)
        held.add_hashes(new)
        began = time.process_time()
        merged = held.hashes()
        merge.append(time.process_time() - began)
        began = time.process_time()
        assert np.array_equal(np.union1d(base, new), merged)
        union.append(time.process_time() - began)
        path = os.path.join(folder, f"mem{time.monotonic_ns()}.h5")
        began = time.perf_counter()
        with h5py.File(path, "w") as f:
            f.create_group("master").create_dataset("strategy.seen", data=merged)
            f.flush()
            os.fsync(f.id.get_vfd_handle())
        write.append(time.perf_counter() - began)
        os.remove(path)
        began = time.perf_counter()
        log.append(new)
        log.sync()
        append.append(time.perf_counter() - began)
    log.close()
    return {"networks": networks, "merge_ms": 1e3 * statistics.median(merge), "union1d_ms": 1e3 * statistics.median(union),
            "write_ms": 1e3 * statistics.median(write), "append_ms": 1e3 * statistics.median(append), "mb": merged.nbytes / 1e6}


def main() -> None:
    parser = harness.parser(__doc__, quick="3 repeats, the memory at 10^6 networks only")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--networks", default="1000000,10000000", help="networks proposed, for the memory's part (comma separated)")
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        save = saves(folder, repeats, random.Random(1))
        small = member_ms(folder, [small_member(i) for i in range(32)], repeats)
        cnn = member_ms(folder, [cnn_member(i, rng) for i in range(32)], repeats)
        networks = ["1000000"] if args.quick else args.networks.split(",")
        memories = [memory_ms(folder, int(n), repeats) for n in networks if n]
    print(harness.machine_line("bench_checkpoint", f"h5py {h5py.version.version}, HDF5 {h5py.version.hdf5_version}; medians of {repeats}"))
    print(f"checkpoint.save with {ROWS} new evaluations: {save['hall_changed_ms']:.1f} ms when 32 members enter the hall, "
          f"{save['hall_unchanged_ms']:.1f} ms when it is unchanged")
    ratio = save["rewrite_ms"] / save["last_ms"]
    print(f"at {save['rows']:,} evaluations: rewriting the whole history {save['rewrite_ms']:.1f} ms, checkpoint.save "
          f"{save['last_ms']:.1f} ms: rewrite/append {ratio:.2f}")
    print(f"a hall-of-fame member: {small:.2f} ms (three small arrays), {cnn:.2f} ms (a small CNN, 20 tensors)")
    for m in memories:
        print(f"the memory at {m['networks']:,} networks proposed ({m['mb']:.0f} MB of hashes): merge {m['merge_ms']:.1f} ms "
              f"(np.union1d {m['union1d_ms']:.0f} ms: {m['union1d_ms'] / m['merge_ms']:.0f}x); the new ones appended and synced "
              f"{m['append_ms']:.1f} ms (the whole set written and synced {m['write_ms']:.0f} ms: {m['write_ms'] / m['append_ms']:.0f}x)")
    harness.emit({"save_hall_changed_ms": round(save["hall_changed_ms"], 1), "save_hall_unchanged_ms": round(save["hall_unchanged_ms"], 1),
                  "rows": save["rows"], "rewrite_vs_append": round(ratio, 2), "members_small_ms": round(small, 3),
                  "members_cnn_ms": round(cnn, 3),
                  **{f"memory_{m['networks']}_{k}": round(m[k], 1) for m in memories for k in ("merge_ms", "union1d_ms", "write_ms", "append_ms")}})


if __name__ == "__main__":
    main()
