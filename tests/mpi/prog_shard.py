"""Under mpiexec: stream a dataset in shard mode and report, from every rank, what its node got.

Usage: prog_shard.py DATA.h5 shared|private CHUNK_BYTES ROOT_TRAINS(1|0)
Rank 0 prints one JSON line: per rank, its node (the world rank of its leader), its shard, the rows of
the split that the shard holds, a CRC-32 of each array, the files it tried to open and how much the
load raised its peak memory; and the stats.
The test judges it; this program only checks that every rank got through.
"""
import json
import resource
import sys
import zlib

import h5py
from mpi4py import MPI
from node_checks import leader_write_is_seen

from data_bcast.broadcast import LoadOptions, broadcast_dataset, node_communicator

path, mode, chunk, root_trains = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
comm = MPI.COMM_WORLD
opened = []
if comm.rank != 0:  # record (and refuse) any attempt by a worker to open an HDF5 file
    def spy(name, *a, **k):
        opened.append(str(name))
        raise PermissionError("worker opened a file")

    h5py.File = spy

peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
options = LoadOptions(chunk_mb=chunk / (1 << 20), shared_memory=(mode == "shared"), mode="shard")
data = broadcast_dataset(comm, path if comm.rank == 0 else "/nonexistent/workers-must-not-read.h5", options, root_trains=root_trains)
peak_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) * 1024
node = node_communicator(comm)
leader = node.bcast(comm.rank, root=0)

# One host copy per node: a write by the node leader is seen by every rank of the node (shared mode).
sees_leader_write = leader_write_is_seen(comm, node, data.arrays["val/x"])

fact = {
    "rank": comm.rank,
    "node": leader,
    "shard": data.shard.index,
    "shards": data.shard.count,
    "members": data.shard.members().tolist(),
    "shapes": {name: list(a.shape) for name, a in data.arrays.items()},
    "checksums": {name: zlib.crc32(a.tobytes()) for name, a in sorted(data.arrays.items())},
    "opened": opened,
    "sees_leader_write": sees_leader_write,
    "peak_growth_bytes": peak_growth,  # how far the load raised this rank's peak resident memory
}
facts = comm.gather(fact, root=0)
if comm.rank == 0:
    print(json.dumps({"ranks": facts, "stats": data.stats}))
data.close()
node.Free()
