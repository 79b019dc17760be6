"""Benchmark: ship a dataset from rank 0 to every rank, three ways, in one MPI launch.

Run from the repository root::

    mpiexec -n 4 python scripts/bench_broadcast.py --mb 256 --reps 5 [--chunk-mb 64]

Rank 0 writes a synthetic dataset of about ``--mb`` MB with ``write_dataset`` (float32 x of
shape (N, 1, 64, 64), int64 y, explicit train/val/test) into a temporary directory, and
removes it at the end. The contenders run interleaved (rep 1: A B C, rep 2: A B C, ...) so
that drift on a noisy, shared machine hits all of them alike:

  pickle_bcast   rank 0 reads the file into a dict of numpy arrays; lowercase ``comm.bcast(arrays)``
  Bcast_private  ``broadcast_dataset(shared=False)``: chunked ``Bcast`` into a private copy per rank
  Bcast_shared   ``broadcast_dataset(shared=True)``: one shared window per node, leaders ``Bcast``

Timed: only the data movement after rank 0 has read the file. Every contender has rank 0
read the file in every rep, untimed (its median is shown as "read s"). pickle_bcast:
``Barrier``, then ``comm.bcast``. broadcast_dataset: its own ``stats["broadcast_seconds"]``
(the chunked ``Bcast`` loop plus the node barrier; it starts when the collective that follows
the read returns, so ranks start together). Each rep's time is the max over ranks; the table
shows the median over reps, GB/s = payload bytes / 1e9 / median, and speedup = pickle_bcast
median / contender median.

Host memory, per contender and rep, summed over ranks: "held MB" is the growth of each
rank's Pss (/proc/self/smaps_rollup) from before rank 0's read to just after the data has
arrived. Pss divides a shared page among the processes that map it, so a shared window
counts once. "peak MB" is the growth of each rank's peak RSS (VmHWM, reset through
/proc/self/clear_refs) over the same span: it catches transient copies such as pickle's
serialized bytes, but RSS counts a shared page in every rank that touched it.

Every rep is checked: each rank's arrays must match rank 0's reference read (names, shapes,
dtypes, CRC32 of the bytes), or every rank raises and nothing is reported.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import gc
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
import zlib

import numpy as np
from mpi4py import MPI

from data_bcast import load_dataset, write_dataset
from data_bcast.broadcast import broadcast_dataset


def make_file(directory: str, mb: float, seed: int = 0) -> str:
    """A synthetic dataset of about ``mb`` MB: float32 images (N, 1, 64, 64), 10 classes."""
    n = max(20, int(mb * 2**20) // (64 * 64 * 4 + 8))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 1, 64, 64), dtype=np.float32)
    y = rng.integers(0, 10, n)
    a, b = int(n * 0.7), int(n * 0.85)
    path = os.path.join(directory, "bench.h5")
    write_dataset(path, {"train": (x[:a], y[:a]), "val": (x[a:b], y[a:b]), "test": (x[b:], y[b:])})
    return path


def digest(arrays: dict[str, np.ndarray]) -> dict:
    return {k: (a.shape, str(a.dtype), zlib.crc32(np.ascontiguousarray(a).reshape(-1).view(np.uint8)))
            for k, a in sorted(arrays.items())}


def proc_kb(path: str, key: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def fixed_mmap_threshold() -> None:
    """Make glibc mmap every block >= 128 KiB and unmap it on free (no dynamic threshold), so that
    freed arrays leave the process and each rep's Pss growth is not hidden by reused heap pages."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 128 << 10)  # M_MMAP_THRESHOLD
    except OSError:
        pass


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
        return True
    except OSError:
        return False


# A contender returns (this rank's timed seconds, its arrays, root's read seconds, close).
def run_pickle(comm, path, chunk_bytes):
    t0, arrays, read_s = time.perf_counter(), None, None
    if comm.rank == 0:
        arrays = load_dataset(path)[1]
        read_s = time.perf_counter() - t0
    comm.Barrier()
    t0 = time.perf_counter()
    arrays = comm.bcast(arrays, root=0)
    return time.perf_counter() - t0, arrays, read_s, lambda: None


def run_broadcast_dataset(shared):
    def run(comm, path, chunk_bytes):
        comm.Barrier()
        data = broadcast_dataset(comm, path, chunk_bytes=chunk_bytes, shared=shared)
        return data.stats["broadcast_seconds"], data.arrays, data.stats.get("read_seconds"), data.close
    return run


CONTENDERS = {"pickle_bcast": run_pickle, "Bcast_private": run_broadcast_dataset(False), "Bcast_shared": run_broadcast_dataset(True)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", type=float, default=256, help="dataset size in MB (default 256)")
    p.add_argument("--reps", type=int, default=5, help="repetitions per contender (default 5)")
    p.add_argument("--chunk-mb", type=float, default=64, help="Bcast chunk size in MB (default 64)")
    args = p.parse_args()
    fixed_mmap_threshold()
    comm = MPI.COMM_WORLD
    chunk_bytes = int(args.chunk_mb * 2**20)
    nodes = comm.allreduce(int(comm.Split_type(MPI.COMM_TYPE_SHARED).rank == 0))
    tmpdir = tempfile.mkdtemp(prefix="bench_bcast_") if comm.rank == 0 else None
    try:
        path, ref = None, None
        if comm.rank == 0:
            path = make_file(tmpdir, args.mb)
            ref = digest(load_dataset(path)[1])
        path, ref = comm.bcast((path, ref), root=0)
        payload = sum(int(np.prod(shape)) * np.dtype(dt).itemsize for shape, dt, _ in ref.values())
        rows = {name: {"t": [], "read": [], "held": [], "peak": []} for name in CONTENDERS}
        peak_ok = True
        for rep in range(args.reps):
            for name, run in CONTENDERS.items():
                gc.collect()
                comm.Barrier()
                pss0, rss0 = proc_kb("/proc/self/smaps_rollup", "Pss"), proc_kb("/proc/self/status", "VmRSS")
                peak_ok &= reset_peak()
                t, arrays, read_s, close = run(comm, path, chunk_bytes)
                peak = proc_kb("/proc/self/status", "VmHWM") - rss0
                held = proc_kb("/proc/self/smaps_rollup", "Pss") - pss0
                ok = digest(arrays) == ref
                del arrays
                close()
                bad = [r for r, good in enumerate(comm.allgather(ok)) if not good]
                if bad:
                    raise RuntimeError(f"{name}, rep {rep}: rank(s) {bad} received wrong data; no figures reported")
                t = comm.reduce(t, op=MPI.MAX, root=0)
                held, peak = comm.reduce(held, op=MPI.SUM, root=0), comm.reduce(peak, op=MPI.SUM, root=0)
                if comm.rank == 0:
                    for key, val in (("t", t), ("read", read_s), ("held", held * 1024), ("peak", peak * 1024)):
                        rows[name][key].append(val)
        peak_ok = comm.allreduce(peak_ok, op=MPI.LAND)
        if comm.rank == 0:
            report(args, comm.size, nodes, payload, rows, peak_ok)
    finally:
        if comm.rank == 0:
            shutil.rmtree(tmpdir, ignore_errors=True)


def report(args, ranks, nodes, payload, rows, peak_ok) -> None:
    med = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in rows.items()}
    ref_t = med["pickle_bcast"]["t"]
    print(f"# bench_broadcast  {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}  "
          f"host={platform.node()}  cpus={os.cpu_count()}  {MPI.Get_library_version().splitlines()[0].strip()}")
    print(f"# ranks={ranks} nodes={nodes} payload={payload / 2**20:.1f} MiB ({payload} B) "
          f"chunk={args.chunk_mb:g} MiB reps={args.reps} (interleaved)")
    print("# timed: data movement only (after rank 0's HDF5 read), max over ranks, median over reps")
    print("# memory: held = sum over ranks of Pss growth while the data is held; "
          "peak = sum over ranks of peak-RSS growth" + ("" if peak_ok else " (UNAVAILABLE: clear_refs not writable)"))
    print(f"{'contender':<14} {'median s':>9} {'min s':>9} {'max s':>9} {'GB/s':>8} {'speedup':>8} "
          f"{'held MB':>9} {'copies':>7} {'peak MB':>9} {'read s':>7}")
    out = {"ranks": ranks, "nodes": nodes, "payload_bytes": payload, "chunk_mb": args.chunk_mb,
           "reps": args.reps, "timed": "data movement after root read", "contenders": {}}
    for name, m in med.items():
        t = rows[name]["t"]
        entry = {"median_s": m["t"], "min_s": min(t), "max_s": max(t), "gb_per_s": payload / 1e9 / m["t"],
                 "speedup_vs_pickle": ref_t / m["t"], "held_mb": m["held"] / 2**20, "copies": m["held"] / payload,
                 "peak_mb": m["peak"] / 2**20 if peak_ok else None, "root_read_s": m["read"], "all_s": t}
        out["contenders"][name] = entry
        print(f"{name:<14} {m['t']:>9.4f} {min(t):>9.4f} {max(t):>9.4f} {entry['gb_per_s']:>8.2f} "
              f"{entry['speedup_vs_pickle']:>7.1f}x {entry['held_mb']:>9.0f} {entry['copies']:>7.2f} "
              f"{(entry['peak_mb'] if peak_ok else float('nan')):>9.0f} {m['read']:>7.3f}")
    if nodes == 1:
        print("# note: one node, so Bcast_shared moves no bytes: rank 0 reads straight into the shared window and the "
              "timed phase is a node barrier; its GB/s and speedup are not a transfer rate")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
