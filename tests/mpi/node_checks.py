"""Checks shared by the MPI test programs (imported from beside them)."""
from mpi4py import MPI


def leader_write_is_seen(comm: MPI.Comm, node: MPI.Comm, x) -> bool:
    """Collective: the node leader writes a mark into ``x`` and every rank looks; True on a rank that
    sees it (one host copy per node, in shared mode). ``x`` is restored before returning."""
    before = x.flat[0]
    mark = 123 if x.dtype.kind == "u" else 12345.0
    comm.Barrier()
    if node.rank == 0:
        x.flat[0] = mark
    comm.Barrier()
    seen = bool(x.flat[0] == mark and before != mark)
    comm.Barrier()
    if node.rank == 0:
        x.flat[0] = before
    comm.Barrier()
    return seen
