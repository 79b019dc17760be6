"""Under mpiexec: broadcast a dataset and check, on every rank, what each rank got; that the node's
copy has no name left in /dev/shm; and that a process handed the copy's descriptor (as a training
process is) sees the same arrays.

Usage: prog_broadcast.py DATA.h5 shared|private CHUNK_BYTES
Exit status 0 only if every check held on every rank; rank 0 prints a JSON report.
"""
import glob
import json
import os
import subprocess
import sys
import zlib

import h5py
from mpi4py import MPI
from node_checks import leader_write_is_seen

from data_bcast import load_dataset
from data_bcast.broadcast import LoadOptions, broadcast_dataset, node_communicator

path, mode, chunk = sys.argv[1], sys.argv[2], int(sys.argv[3])
comm = MPI.COMM_WORLD
opened = []
if comm.rank != 0:  # record (and refuse) any attempt by a worker to open an HDF5 file
    real_file = h5py.File

    def spy(name, *a, **k):
        opened.append(str(name))
        raise PermissionError("worker opened a file")

    h5py.File = spy

options = LoadOptions(chunk_mb=chunk / (1 << 20), shared_memory=(mode == "shared"))
data = broadcast_dataset(comm, path if comm.rank == 0 else "/nonexistent/workers-must-not-read.h5", options, handable=True)
checksums = {name: zlib.crc32(a.tobytes()) for name, a in sorted(data.arrays.items())}

# One host copy per node: a write by the node leader is seen by every rank of the node.
node = node_communicator(comm)  # the real node, or a pretend one under EVENS_SIMULATED_NODES
sees_leader_write = leader_write_is_seen(comm, node, data.arrays["train/x"])

# The copy is unlinked once every rank of the node holds it: no name of this job is left to clean up.
leaders = comm.gather(os.getpid() if data.node_rank == 0 else None, root=0)
named = sorted(glob.glob("/dev/shm/evens-data-*")) if comm.rank == 0 else []
named = [n for n in named if int(n.split("-")[2]) in (leaders or [])]

# A process handed the descriptor (and nothing else) maps the same pages, read-only.
child = subprocess.run(
    [sys.executable, "-c",
     "import json, sys, zlib\n"
     "from data_bcast.layout import unpack_arrays\n"
     "from data_bcast.memory import mapped\n"
     "fd, size, spec = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])\n"
     "arrays = unpack_arrays(spec, mapped(fd, size).buffer)\n"
     "print(json.dumps({n: zlib.crc32(a.tobytes()) for n, a in sorted(arrays.items())}))",
     str(data.memory.fd), str(data.memory.size), json.dumps(data.specs())],
    pass_fds=(data.memory.fd,), capture_output=True, text=True, timeout=60, env={k: v for k, v in os.environ.items() if not k.startswith(("PMI", "PMIX", "HYDRA", "MPI"))})
handed = json.loads(child.stdout) if child.returncode == 0 else child.stderr
facts = comm.gather({"rank": comm.rank, "checksums": checksums, "opened": opened, "sees": sees_leader_write, "node_rank": data.node_rank,
                     "handed": handed == checksums}, root=0)
ok = True
if comm.rank == 0:
    _, truth = load_dataset(path)
    expected = {name: zlib.crc32(a.tobytes()) for name, a in sorted(truth.items())}
    report = {
        "same_data": all(f["checksums"] == expected for f in facts),
        "worker_opens": sum(len(f["opened"]) for f in facts),
        "shared_view": [f["sees"] for f in facts],
        "stats": data.stats,
        "leaders": sum(1 for f in facts if f["node_rank"] == 0),
        "named_left": named,
        "handed_same": [f["handed"] for f in facts],
    }
    want_shared = mode == "shared"
    ok = (report["same_data"] and report["worker_opens"] == 0 and all(s == want_shared for s in report["shared_view"][1:])
          and not named and all(report["handed_same"]))
    print(json.dumps(report))
ok = comm.bcast(ok, root=0)
data.close()
sys.exit(0 if ok else 1)
