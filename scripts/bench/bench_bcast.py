"""Benchmark: load one dataset onto every rank (read + deliver), contenders side by side in one launch.

Run from the repository root, under the MPI launcher, at the rank counts to compare::

    mpiexec -n 4 .venv/bin/python scripts/bench/bench_bcast.py --quick            # 16 MiB; under a minute
    mpiexec -n 4 .venv/bin/python scripts/bench/bench_bcast.py --mib 16,256,1024   # and again with -n 2
    mpiexec -n 4 .venv/bin/python scripts/bench/bench_bcast.py --profile          # where the time goes

Rank 0 writes a synthetic dataset (float32 images (N, 1, 64, 64), int64 labels, explicit
train/val/test splits) of each size into a temporary folder. The contenders run interleaved, rep by
rep (rep 1: A B C ..., rep 2: A B C ...), so that drift on a shared machine hits them alike. Each is
timed from a barrier to the barrier after every rank holds the data ("time to ready": the root's
read of the file and the delivery together); the maximum over ranks is taken, then the median over
reps. Every rep checks each rank's arrays against the root's reference (names, shapes, dtypes and
CRC-32 of the bytes); a mismatch stops the benchmark without figures.

B1, delivery to every rank into private buffers (bytes really move to every rank):

  stream_private   evens' own path: ``broadcast_dataset(shared=False)``, i.e. ``_stream``: the root
                   reads chunk k+1 while chunk k travels (Ibcast), CRC-32 per chunk checked on arrival.
  pickle           what a naive user writes: the root reads the arrays (``load_dataset``), then
                   ``comm.bcast(arrays)`` of the dict of numpy arrays (mpi4py pickles in-band with
                   protocol 5: one serialized copy on the root, one unpickled copy on each receiver).
  whole            the root reads the arrays (``load_dataset``), then one buffer ``Bcast`` per array
                   (no chunking, no overlap, no CRC).

  ``bcast_vs_pickle`` and ``bcast_vs_whole`` are the other's time to ready over stream_private's.
  ``*_delivery`` ratios use the time beyond the root's read instead (time to ready minus the root's
  read seconds; for the stream that is the part of the delivery the overlap did not hide).
  ``root_peak_mib`` is the root's peak RSS growth during the load (VmHWM), which includes the root's
  own copy of the data; ``root_extra_mib`` is that minus the payload: what loading holds beyond it.

B2, memory: ``shm_memory_ratio`` is Pss summed over the ranks after the load, stream_private over
  stream_shared (evens' default: one MPI-3 shared window per node).

B3, file-system fan-in: opens of the dataset file (h5py.File calls, counted) and bytes read through
  read syscalls (/proc/self/io rchar; the file is in the page cache here, so these are not disk
  reads), stream against ``every_rank_reads`` (every rank calls ``load_dataset`` itself).
  ``model_speedup_27648`` is a MODEL, NOT A MEASUREMENT: load time for 27,648 ranks (4 a node) on a
  parallel file system of 2.5 TB/s with 25 GB/s node links. Every rank reading is bound by the file
  system: ranks x bytes / 2.5 TB/s. Streaming reads once and pipelines chunks down a binomial tree of
  node leaders: bytes / 25 GB/s + log2(nodes) x chunk / 25 GB/s.

Time to ready, shared window against private buffers: stream_shared against stream_private, with
  page faults (minflt from /proc/self/stat) summed over the ranks.

EXPERIMENT (``--experiments``, on by default; ``x_`` in the name):

  x_h5py_reads     stream_private with the root's raw reads turned off (monkeypatched in this process:
                   ``RowReader.raw_offset`` answers None), so every chunk is read through h5py, one
                   read at a time, as before raw reads: what reading the file's own bytes on several
                   threads gives, side by side in the same launch.

The contenders and the dataset are in bcast_contenders.py, beside this script.

``--profile`` prints where the time goes instead (profile_bcast.py, beside this script): memcpy, CRC-32 (zlib and isal),
  isfinite, the h5py read both ways, page-fault cost of fresh private memory against a fresh shared window (one rank
  touching all of it, or every rank of the node its share), and stream_private (and x_h5py_reads) over chunk sizes.
"""
from __future__ import annotations

import gc
import math
import shutil
import statistics
import tempfile
import time

import harness
import numpy as np
from bcast_contenders import OPENS, contenders, digest, fixed_mmap_threshold, isal_zlib, make_file, minflt, proc_kb, rchar, reset_peak
from mpi4py import MPI
from profile_bcast import profile

from data_bcast import load_dataset


def model_speedup(payload: float, chunk: float, ranks: int = 27648, per_node: int = 4, fs: float = 2.5e12,
                  link: float = 25e9) -> float:
    every = ranks * payload / fs
    nodes = ranks // per_node
    ours = payload / min(fs, link) + math.log2(nodes) * min(chunk, payload) / link
    return every / ours


# ---------------------------------------------------------------------------------------------------------
# B1-B3 and time to ready


def measure(comm, path, ref, payload, chunk, reps, runs) -> dict:
    keys = ("t", "read", "held", "root_peak", "opens", "rchar", "minflt", "root_minflt")
    rows = {name: {k: [] for k in keys} for name in runs}
    for rep in range(reps):
        for name, run in runs.items():
            gc.collect()
            comm.Barrier()
            pss0, rss0 = proc_kb("/proc/self/smaps_rollup", "Pss"), proc_kb("/proc/self/status", "VmRSS")
            reset_peak()
            opens0, rchar0, flt0 = OPENS["n"], rchar(), minflt()
            comm.Barrier()
            t0 = time.perf_counter()
            arrays, close, read_s = run(comm, path, chunk)
            comm.Barrier()
            t = time.perf_counter() - t0
            flt = minflt() - flt0
            peak = (proc_kb("/proc/self/status", "VmHWM") - rss0) * 1024
            held = (proc_kb("/proc/self/smaps_rollup", "Pss") - pss0) * 1024
            opens, nread = OPENS["n"] - opens0, rchar() - rchar0
            ok = digest(arrays) == ref
            del arrays
            close()
            if not all(comm.allgather(ok)):
                raise RuntimeError(f"{name}, rep {rep}: a rank received wrong data; no figures reported")
            t = comm.reduce(t, op=MPI.MAX, root=0)
            sums = comm.reduce(np.array([held, opens, nread, flt], dtype=np.float64), op=MPI.SUM, root=0)
            if comm.rank == 0:
                for k, v in zip(keys, (t, read_s or 0.0, sums[0], peak, sums[1], sums[2], sums[3], flt)):
                    rows[name][k].append(v)
    if comm.rank != 0:
        return {}
    med = {name: {k: statistics.median(v) for k, v in r.items()} for name, r in rows.items()}
    per = {name: {"seconds": m["t"], "min_seconds": min(rows[name]["t"]), "all_seconds": rows[name]["t"], "gb_per_s": payload / 1e9 / m["t"],
                  "root_read_s": m["read"], "beyond_read_s": m["t"] - m["read"], "held_mib": m["held"] / 2**20,
                  "root_peak_mib": m["root_peak"] / 2**20, "opens": m["opens"], "read_mib": m["rchar"] / 2**20,
                  "minflt": m["minflt"], "root_minflt": m["root_minflt"]} for name, m in med.items()}
    out = {"mib": payload / 2**20, "per_contender": per}
    if not {"stream_private", "pickle", "whole", "stream_shared", "every_rank_reads"} <= set(med):
        return out  # --only: the table, no ratios
    sp = med["stream_private"]
    ratio = lambda a, b: a / b if b > 0 else float("nan")
    out |= {
        "bcast_vs_pickle": med["pickle"]["t"] / sp["t"],
        "bcast_vs_whole": med["whole"]["t"] / sp["t"],
        "bcast_vs_pickle_min": per["pickle"]["min_seconds"] / per["stream_private"]["min_seconds"],
        "bcast_vs_whole_min": per["whole"]["min_seconds"] / per["stream_private"]["min_seconds"],
        "bcast_vs_pickle_delivery": ratio(per["pickle"]["beyond_read_s"], per["stream_private"]["beyond_read_s"]),
        "bcast_vs_whole_delivery": ratio(per["whole"]["beyond_read_s"], per["stream_private"]["beyond_read_s"]),
        "root_peak_mib": sp["root_peak"] / 2**20,
        "root_extra_mib": (sp["root_peak"] - payload) / 2**20,
        "pickle_root_extra_mib": (med["pickle"]["root_peak"] - payload) / 2**20,
        "shm_memory_ratio": sp["held"] / med["stream_shared"]["held"],
        "opens_ratio": med["every_rank_reads"]["opens"] / max(1, sp["opens"]),
        "read_bytes_ratio": ratio(med["every_rank_reads"]["rchar"], sp["rchar"]),
        "model_speedup_27648": model_speedup(payload, chunk),
        "shared_vs_private_ready": med["stream_shared"]["t"] / sp["t"],
    }
    if "x_h5py_reads" in med:
        out |= {"raw_reads_speedup": med["x_h5py_reads"]["t"] / sp["t"],
                "x_h5py_reads_vs_pickle": med["pickle"]["t"] / med["x_h5py_reads"]["t"]}
    return out


def report(comm, nodes, args, chunk, reps, results, experiments) -> None:
    print(harness.machine_line("bench_bcast", f"ranks={comm.size}  nodes={nodes}  chunk={chunk / 2**20:g} MiB  reps={reps} (interleaved)  "
                               f"pickle protocol {MPI.pickle.PROTOCOL} in-band  isal={'yes' if isal_zlib else 'no'}  "
                               f"{MPI.Get_library_version().splitlines()[0].strip()}"))
    print("# time to ready = the root's read + delivery, barrier to barrier, max over ranks, median over reps; "
          "x_h5py_reads is an EXPERIMENT: the stream with raw reads off (monkeypatched in this process)")
    for r in results:
        print(f"\n## {r['mib']:.1f} MiB")
        print(f"{'contender':<18} {'ready s':>8} {'min s':>6} {'(reps)':>20} {'GB/s':>6} {'root read s':>11} {'beyond read s':>13} "
              f"{'Pss sum MiB':>11} {'root peak MiB':>13} {'opens':>5} {'read MiB':>9} {'minflt sum':>10} {'root minflt':>11}")
        for name, c in r["per_contender"].items():
            allt = ",".join(f"{x:.2f}" for x in c["all_seconds"])
            print(f"{name:<18} {c['seconds']:>8.3f} {c['min_seconds']:>6.2f} {allt:>20} {c['gb_per_s']:>6.2f} {c['root_read_s']:>11.3f} {c['beyond_read_s']:>13.3f} "
                  f"{c['held_mib']:>11.1f} {c['root_peak_mib']:>13.1f} {c['opens']:>5.0f} {c['read_mib']:>9.1f} {c['minflt']:>10.0f} "
                  f"{c['root_minflt']:>11.0f}")
        if "bcast_vs_pickle" not in r:
            continue
        print(f"B1 bcast_vs_pickle {r['bcast_vs_pickle']:.2f} (target >= 5)  bcast_vs_whole {r['bcast_vs_whole']:.2f} (target >= 1.0)  "
              f"delivery only (beyond the root's read): vs pickle {r['bcast_vs_pickle_delivery']:.2f}, vs whole "
              f"{r['bcast_vs_whole_delivery']:.2f}  root_peak_mib {r['root_peak_mib']:.1f} = own copy + {r['root_extra_mib']:.1f} "
              f"(pickle: + {r['pickle_root_extra_mib']:.1f})")
        print(f"B2 shm_memory_ratio {r['shm_memory_ratio']:.2f} (target >= {0.9 * comm.size / nodes:.1f})   "
              f"B3 opens_ratio {r['opens_ratio']:.1f}  read_bytes_ratio {r['read_bytes_ratio']:.1f}  "
              f"MODEL (not measured) speedup at 27,648 ranks {r['model_speedup_27648']:.0f}x   "
              f"ready: shared/private {r['shared_vs_private_ready']:.2f}")
        if "raw_reads_speedup" in r:
            print(f"EXPERIMENT  x_h5py_reads / stream_private {r['raw_reads_speedup']:.2f} (what raw reads give)  "
                  f"pickle / x_h5py_reads {r['x_h5py_reads_vs_pickle']:.2f}")
    last = results[-1]
    harness.emit({k: round(v, 4) if isinstance(v, float) else v for k, v in last.items() if k != "per_contender"}
                 | {"ranks": comm.size, "nodes": nodes, "quick": args.quick, "chunk_mib": chunk / 2**20,
                    "sizes_mib": [round(r["mib"], 1) for r in results]})


# ---------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = harness.parser(__doc__, quick="16 MiB, 3 reps: under a minute")
    parser.add_argument("--mib", default="16,256,1024", help="dataset sizes in MiB, comma-separated (default 16,256,1024)")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    parser.add_argument("--chunk-mib", type=float, default=64, help="chunk size in MiB (default 64, evens' data.chunk_mb)")
    parser.add_argument("--no-experiments", dest="experiments", action="store_false", help="leave out the x_h5py_reads experiment")
    parser.add_argument("--only", default="", help="run only these contenders (comma-separated names; B1-B3 ratios need "
                        "stream_private, pickle, whole, stream_shared and every_rank_reads)")
    parser.add_argument("--profile", action="store_true", help="where the time goes (256 MiB unless --mib names one size)")
    args = parser.parse_args()
    fixed_mmap_threshold()
    comm = MPI.COMM_WORLD
    sizes = [16.0] if args.quick else [float(m) for m in args.mib.split(",")]
    if args.profile and args.mib == parser.get_default("mib"):
        sizes = [256.0]
    chunk = int(args.chunk_mib * 2**20)
    nodes = comm.allreduce(int(comm.Split_type(MPI.COMM_TYPE_SHARED).rank == 0))
    runs = contenders(args.experiments)
    if args.only:
        runs = {name: runs[name] for name in args.only.split(",")}
    results = []
    for mib in sizes:
        tmp = tempfile.mkdtemp(prefix="bench_bcast_") if comm.rank == 0 else None
        try:
            path = ref = None
            if comm.rank == 0:
                path = make_file(tmp, mib)
                ref = digest(load_dataset(path)[1])
            path, ref = comm.bcast((path, ref), root=0)
            payload = float(sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d, _ in ref.values()))
            if args.profile:
                profile(comm, path, payload, args.reps)
            else:
                results.append(measure(comm, path, ref, payload, chunk, args.reps, runs))
        finally:
            if comm.rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)
    if comm.rank == 0 and results:
        report(comm, nodes, args, chunk, args.reps, results, args.experiments)


if __name__ == "__main__":
    main()
