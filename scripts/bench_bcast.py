"""Benchmark: load one dataset onto every rank (read + deliver), five ways, side by side in one launch.

Run from the repository root, under the MPI launcher, at the rank counts to compare::

    mpiexec -n 4 .venv/bin/python scripts/bench_bcast.py --quick          # 16 MiB; under a minute
    mpiexec -n 4 .venv/bin/python scripts/bench_bcast.py --mib 16,256      # and again with -n 2

Rank 0 writes a synthetic dataset (float32 images (N, 1, 64, 64), explicit splits) of each size
into a temporary folder. The contenders run interleaved, rep by rep. Each is timed from a barrier
to the moment every rank holds the data (read and delivery together: "time to ready"), and the
maximum over ranks is taken:

  stream_private   evens: ``broadcast_dataset(shared=False)``. The root reads chunk k+1 while chunk
                   k travels (Ibcast), and every rank has a private copy, so the bytes really move.
  stream_shared    the same, with one shared window per node (what evens runs).
  pickle           the root reads the whole dataset, then ``comm.bcast(arrays)`` (pickled).
  whole            the root reads the whole dataset, then one buffer ``Bcast`` per array.
  every_rank_reads every rank opens and reads the file itself (what 27,648 ranks must not do).

Reported:

- seconds and GB/s per contender;
- ``bcast_vs_pickle`` and ``bcast_vs_whole``: the others' time over stream_private's;
- ``root_extra_mib``: the root's peak RSS growth during the load, minus its own copy of the data.
  This is what streaming holds beyond the destination: a few chunks, not the arrays;
- ``shm_memory_ratio``: Pss summed over the ranks, private against shared;
- ``opens_ratio``: opens of the file, every_rank_reads against stream;
- ``model_speedup_27648``: a MODEL, not a measurement, of the load time for 27,648 ranks (4 per
  node) on a parallel file system of 2.5 TB/s with 25 GB/s node links. Every rank reading is
  bound by the file system: ranks x bytes / 2.5 TB/s. Streaming reads once and pipelines chunks
  down a binomial tree of node leaders: bytes / 25 GB/s + log2(nodes) x chunk / 25 GB/s.

Every rep checks that each rank's arrays match the root's reference (CRC-32 per array).
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
from mpi4py import MPI

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import h5py  # noqa: E402

from bench_broadcast import digest, fixed_mmap_threshold, make_file, proc_kb, reset_peak  # noqa: E402
from data_bcast import load_dataset  # noqa: E402
from data_bcast.broadcast import broadcast_dataset  # noqa: E402

OPENS = {"n": 0}
_real_file = h5py.File


def _counting_file(*a, **k):
    OPENS["n"] += 1
    return _real_file(*a, **k)


h5py.File = _counting_file
import data_bcast.h5file as _h5file  # noqa: E402

_h5file.h5py.File = _counting_file


def run_stream(shared):
    def run(comm, path, chunk):
        data = broadcast_dataset(comm, path if comm.rank == 0 else None, chunk_bytes=chunk, shared=shared)
        return data.arrays, data.close
    return run


def run_pickle(comm, path, chunk):
    arrays = load_dataset(path)[1] if comm.rank == 0 else None
    return comm.bcast(arrays, root=0), lambda: None


def run_whole(comm, path, chunk):
    arrays = load_dataset(path)[1] if comm.rank == 0 else None
    specs = comm.bcast([(k, a.shape, a.dtype.str) for k, a in arrays.items()] if comm.rank == 0 else None, root=0)
    if comm.rank != 0:
        arrays = {k: np.empty(shape, dtype=np.dtype(dt)) for k, shape, dt in specs}
    for k, _, _ in specs:
        comm.Bcast(arrays[k], root=0)  # one message per array (below 2 GiB here)
    return arrays, lambda: None


def run_every_rank(comm, path, chunk):
    return load_dataset(path)[1], lambda: None


CONTENDERS = {"stream_private": run_stream(False), "stream_shared": run_stream(True), "pickle": run_pickle,
              "whole": run_whole, "every_rank_reads": run_every_rank}


def model_speedup(payload: float, ranks: int = 27648, per_node: int = 4, fs: float = 2.5e12, link: float = 25e9,
                  chunk: float = 64 * 2**20) -> float:
    every = ranks * payload / fs
    nodes = ranks // per_node
    ours = payload / min(fs, link) + math.log2(nodes) * min(chunk, payload) / link
    return every / ours


def measure(comm, path, ref, payload, chunk, reps) -> dict:
    rows = {name: {"t": [], "held": [], "root_peak": [], "opens": []} for name in CONTENDERS}
    for rep in range(reps):
        for name, run in CONTENDERS.items():
            gc.collect()
            comm.Barrier()
            pss0, rss0 = proc_kb("/proc/self/smaps_rollup", "Pss"), proc_kb("/proc/self/status", "VmRSS")
            reset_peak()
            opens0 = OPENS["n"]
            comm.Barrier()
            t0 = time.perf_counter()
            arrays, close = run(comm, path, chunk)
            comm.Barrier()
            t = time.perf_counter() - t0
            peak = (proc_kb("/proc/self/status", "VmHWM") - rss0) * 1024
            held = (proc_kb("/proc/self/smaps_rollup", "Pss") - pss0) * 1024
            ok = digest(arrays) == ref
            del arrays
            close()
            if not all(comm.allgather(ok)):
                raise RuntimeError(f"{name}, rep {rep}: a rank received wrong data; no figures reported")
            opens = comm.reduce(OPENS["n"] - opens0, op=MPI.SUM, root=0)
            t = comm.reduce(t, op=MPI.MAX, root=0)
            held = comm.reduce(held, op=MPI.SUM, root=0)
            if comm.rank == 0:
                rows[name]["t"].append(t)
                rows[name]["held"].append(held)
                rows[name]["root_peak"].append(peak)
                rows[name]["opens"].append(opens)
    if comm.rank != 0:
        return {}
    med = {name: {k: statistics.median(v) for k, v in r.items()} for name, r in rows.items()}
    return {
        "mib": payload / 2**20,
        "per_contender": {name: {"seconds": m["t"], "gb_per_s": payload / 1e9 / m["t"], "held_mib": m["held"] / 2**20,
                                 "root_peak_mib": m["root_peak"] / 2**20, "opens": m["opens"]} for name, m in med.items()},
        "bcast_vs_pickle": med["pickle"]["t"] / med["stream_private"]["t"],
        "bcast_vs_whole": med["whole"]["t"] / med["stream_private"]["t"],
        "root_extra_mib": (med["stream_private"]["root_peak"] - payload) / 2**20,
        "pickle_root_extra_mib": (med["pickle"]["root_peak"] - payload) / 2**20,
        "shm_memory_ratio": med["stream_private"]["held"] / med["stream_shared"]["held"],
        "opens_ratio": med["every_rank_reads"]["opens"] / max(1, med["stream_private"]["opens"]),
        "model_speedup_27648": model_speedup(payload, chunk=chunk),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 MiB, 3 reps: under a minute")
    parser.add_argument("--mib", default="16,256", help="dataset sizes in MiB, comma-separated (default 16,256)")
    parser.add_argument("--reps", type=int, default=0, help="repetitions (default 5, quick 3)")
    parser.add_argument("--chunk-mib", type=float, default=4, help="chunk size in MiB (default 4; evens' default is 64)")
    args = parser.parse_args()
    fixed_mmap_threshold()
    comm = MPI.COMM_WORLD
    sizes = [16.0] if args.quick else [float(m) for m in args.mib.split(",")]
    reps = args.reps or (3 if args.quick else 5)
    chunk = int(args.chunk_mib * 2**20)
    nodes = comm.allreduce(int(comm.Split_type(MPI.COMM_TYPE_SHARED).rank == 0))
    results = []
    for mib in sizes:
        tmp = tempfile.mkdtemp(prefix="bench_bcast_") if comm.rank == 0 else None
        try:
            path = ref = None
            if comm.rank == 0:
                path = make_file(tmp, mib * 2**20 / 1e6)
                ref = digest(load_dataset(path)[1])
            path, ref = comm.bcast((path, ref), root=0)
            payload = float(sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d, _ in ref.values()))
            results.append(measure(comm, path, ref, payload, chunk, reps))
        finally:
            if comm.rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)
    if comm.rank != 0:
        return
    print(f"# bench_bcast  {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}  host={platform.node()}  "
          f"ranks={comm.size}  nodes={nodes}  chunk={args.chunk_mib:g} MiB  reps={reps}  (time to ready: read + deliver)")
    for r in results:
        print(f"\n## {r['mib']:.0f} MiB")
        print(f"{'contender':<17} {'median s':>9} {'GB/s':>7} {'held MiB (sum Pss)':>19} {'root peak MiB':>14} {'opens':>6}")
        for name, c in r["per_contender"].items():
            print(f"{name:<17} {c['seconds']:>9.3f} {c['gb_per_s']:>7.2f} {c['held_mib']:>19.1f} {c['root_peak_mib']:>14.1f} {c['opens']:>6.0f}")
        print(f"bcast_vs_pickle {r['bcast_vs_pickle']:.2f} (target >= 5)  bcast_vs_whole {r['bcast_vs_whole']:.2f} (target >= 1.0)  "
              f"root_extra_mib {r['root_extra_mib']:.1f} (pickle: {r['pickle_root_extra_mib']:.1f})  "
              f"shm_memory_ratio {r['shm_memory_ratio']:.2f} (target >= {0.9 * comm.size / nodes:.1f})  opens_ratio {r['opens_ratio']:.0f}  "
              f"MODEL speedup at 27,648 ranks {r['model_speedup_27648']:.0f}x")
    last = results[-1]
    print(json.dumps({k: v for k, v in last.items() if k != "per_contender"} | {"ranks": comm.size, "quick": args.quick,
                                                                               "sizes_mib": [r["mib"] for r in results]}))


if __name__ == "__main__":
    main()
