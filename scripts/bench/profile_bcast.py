"""Where the time of loading a dataset onto every rank goes: ``scripts/bench/bench_bcast.py --profile``.

One process alone: memcpy into warm and fresh memory, first touch, CRC-32 (zlib, and isal if
installed), ``isfinite``, and the h5py read both ways (copy and ``read_direct``), per byte. Then MPI
alone: one ``Bcast`` of 256 MiB and 64 MiB ``Ibcast`` chunks, into warm or fresh buffers; the page
faults of a fresh shared window, touched by the root alone or by every rank of the node; and
``stream_private`` (and ``x_h5py_reads``) over chunk sizes. Run through bench_bcast.py, which writes
the dataset; the contenders and counters are bcast_contenders.py's.
"""
from __future__ import annotations

import gc
import statistics
import time
import zlib

import bcast_contenders as bc
import harness
import numpy as np
from mpi4py import MPI

from data_bcast import load_dataset
from data_bcast.broadcast import prefault


def best_of(f, n=3) -> float:
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def profile(comm, path, payload, reps) -> None:
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    n = 256 << 20
    line = {}
    if comm.rank == 0:  # one process alone: the costs of the streaming loop's steps, per byte
        src = np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8)
        dst = np.ones(n, np.uint8)
        f32 = src.view(np.float32)

        def fresh_copy():
            np.copyto(np.empty(n, np.uint8), src)

        def fresh_touch():
            np.empty(n, np.uint8)[::bc.PAGE] = 0
        line |= {"memcpy_warm": n / 1e9 / best_of(lambda: np.copyto(dst, src)),
                 "memcpy_into_fresh_private": n / 1e9 / best_of(fresh_copy),
                 "first_touch_fresh_private": n / 1e9 / best_of(fresh_touch),
                 "zlib_crc32": n / 1e9 / best_of(lambda: zlib.crc32(src)),
                 "isal_crc32": n / 1e9 / best_of(lambda: bc.isal_zlib.crc32(src)) if bc.isal_zlib else None,
                 "isfinite_all": n / 1e9 / best_of(lambda: np.isfinite(f32).all())}
        with bc.real_h5py_file(path, "r") as f:
            ds = f["train"]["x"]
            out = np.empty(ds.shape, ds.dtype)
            step = max(1, (64 << 20) // out[:1].nbytes)
            blocks = [(a, min(len(out), a + step)) for a in range(0, len(out), step)]
            line["h5py_copy_read"] = out.nbytes / 1e9 / best_of(lambda: [out.__setitem__(slice(a, b), ds[a:b]) for a, b in blocks])
            line["h5py_read_direct"] = out.nbytes / 1e9 / best_of(
                lambda: [ds.read_direct(out, np.s_[a:b], np.s_[a:b]) for a, b in blocks])
        line["pickle_dumps_in_band"] = n / 1e9 / best_of(lambda: MPI.pickle.dumps(src))
        blob = MPI.pickle.dumps(src)
        line["pickle_loads_in_band"] = n / 1e9 / best_of(lambda: MPI.pickle.loads(blob))
        del blob
    # MPI alone, no file: one Bcast of 256 MiB into warm (already touched) or fresh buffers, and the
    # same in 64 MiB Ibcast chunks (one in flight); payload GB/s, best of 3
    warm = np.ones(n, np.uint8)

    def bcast(fresh, chunk):
        buf = np.empty(n, np.uint8) if fresh and comm.rank else warm
        reqs = []
        for a in range(0, n, chunk):
            if reqs:
                reqs.pop().Wait()
            reqs.append(comm.Ibcast([buf[a : a + chunk], MPI.BYTE], root=0))
        MPI.Request.Waitall(reqs)

    for key, fresh, chunk in (("mpi_bcast_warm", False, n), ("mpi_bcast_fresh", True, n),
                              ("mpi_ibcast_64MiB_warm", False, 64 << 20), ("mpi_ibcast_64MiB_fresh", True, 64 << 20)):
        ts = []
        for _ in range(3):
            comm.Barrier()
            t = time.perf_counter()
            bcast(fresh, chunk)
            comm.Barrier()
            ts.append(comm.allreduce(time.perf_counter() - t, op=MPI.MAX))
        line[key] = n / 1e9 / min(ts)
    warm = None  # (frees it; a del would leave bcast a name that is gone)
    # a fresh shared window: the root touching all of it, or each rank of the node its share
    for who in ("root alone", "every node rank its share"):
        ts, fl = [], []
        for _ in range(3):
            comm.Barrier()
            t = time.perf_counter()
            f0 = bc.minflt()
            win = MPI.Win.Allocate_shared(n if node.rank == 0 else 0, 1, comm=node)
            t_alloc = time.perf_counter() - t
            if who == "root alone":
                mem, _ = win.Shared_query(0)
                if node.rank == 0:
                    np.frombuffer(mem, np.uint8)[::bc.PAGE] = 0
                node.Barrier()
            else:
                mem, _ = win.Shared_query(0)
                prefault(np.frombuffer(mem, np.uint8), node)
            t = comm.reduce(time.perf_counter() - t, op=MPI.MAX, root=0)
            f = comm.reduce(bc.minflt() - f0, op=MPI.SUM, root=0)
            win.Free()
            if comm.rank == 0:
                ts.append(t)
                fl.append(f)
        if comm.rank == 0:
            line[f"shared_window_touch_{who.split()[0]}"] = n / 1e9 / min(ts)
            line[f"shared_window_minflt_{who.split()[0]}"] = min(fl)
            line["shared_window_alloc_s"] = t_alloc
    # the chunk size of the stream
    sizes = [1, 4, 16, 64, 256]
    runs = {f"stream_private@{c}MiB": bc.run_stream(False, chunk=c << 20) for c in sizes}
    runs |= {f"x_h5py_reads@{c}MiB": bc.run_stream(False, chunk=c << 20, h5py_reads=True) for c in (4, 64)}
    ref = bc.digest(load_dataset(path)[1]) if comm.rank == 0 else None
    ref = comm.bcast(ref, root=0)
    res = measure_simple(comm, path, ref, runs, reps)
    if comm.rank == 0:
        print(harness.machine_line("bench_bcast --profile", f"ranks={comm.size}  page={bc.PAGE} B"))
        print("# GB/s, one process, 256 MiB, best of 3:")
        for k, v in line.items():
            if v is not None and "minflt" not in k and "alloc" not in k:
                print(f"  {k:<40} {v:7.2f} GB/s  ({v * 1e9 / bc.PAGE / 1e3:.0f} thousand {bc.PAGE} B pages a second)"
                      if "shared_window_touch" in k else f"  {k:<40} {v:7.2f} GB/s")
            elif v is not None:
                print(f"  {k:<40} {v:10.3f}")
        print(f"# stream_private over chunk sizes, {payload / 2**20:.1f} MiB, time to ready (median of {reps}):")
        for name, (t, allt, read_s) in res.items():
            print(f"  {name:<22} {t:7.3f} s  ({', '.join(f'{x:.2f}' for x in allt)})  {payload / 1e9 / t:5.2f} GB/s  root read {read_s:.3f} s")
        harness.emit({"profile": {k: round(v, 3) for k, v in line.items() if v is not None},
                      "chunk_sweep_s": {k: round(v[0], 3) for k, v in res.items()}})
    node.Free()


def measure_simple(comm, path, ref, runs, reps) -> dict:
    times = {name: ([], []) for name in runs}
    for _ in range(reps):
        for name, run in runs.items():
            gc.collect()
            comm.Barrier()
            t0 = time.perf_counter()
            arrays, close, read_s = run(comm, path, None)
            comm.Barrier()
            t = comm.reduce(time.perf_counter() - t0, op=MPI.MAX, root=0)
            ok = bc.digest(arrays) == ref
            del arrays
            close()
            if not all(comm.allgather(ok)):
                raise RuntimeError(f"{name}: a rank received wrong data; no figures reported")
            if comm.rank == 0:
                times[name][0].append(t)
                times[name][1].append(read_s or 0.0)
    if comm.rank != 0:
        return {}
    return {name: (statistics.median(t), t, statistics.median(r)) for name, (t, r) in times.items()}
