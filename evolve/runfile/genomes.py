"""The genomes of networks paused at a rung (successive halving), kept out of the master's memory.

A promotion trains a paused network on, so the master must give it the network's genome again, however long
ago the network paused; and with ``search.promotion`` most networks pause below a rung's top for good. Keeping
every paused network's genome in memory costs about 110 bytes a result (a million results: 110 MB, growing), and
writing them into every checkpoint's memory group costs as much on disk each time. So with a run directory they
live in ``checkpoint.genomes`` beside the state file (a side file, evolve.runfile.sidefile):

* a 32-byte header: ``EVGENOME``, a format version and the number of genes (uint32 each), and a random 16-byte
  token that the checkpoints' memory names, so a resume knows the file is this run's;
* then a row per network id at ``32 + id * (8 + 8 * genes)``: the id plus one (an int64; 0 where no row was
  written, as a file's holes read) and the genome as float64. A network's genome never changes across its stages,
  so a row, once written, is final: a row written after the last checkpoint is harmless to a resume.

A network's row is written (``pwrite``) when its first stage pauses, read (``pread``, from the page cache) on
its promotion, and the file is synced before each checkpoint is committed, so every network a checkpoint holds
paused has its row on disk. Nothing in the file is executed; a row read back is checked against its id. A resume
whose file is missing, another run's, or shorter than the checkpoint says (:func:`usable`) reads the history
instead, which writes a new file.

Without a run directory (a search in one process, the benchmarks' loopback), evolve.engine.promotion's
:class:`~evolve.engine.promotion.Genomes` keeps them in memory, and the checkpoint's memory holds them.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from evolve.engine.promotion import Genomes

from .sidefile import HEADER, SideFile

GENOMES_SUFFIX = ".genomes"
TOKEN = "genome_token"  # the memory's name for the token (with the halving's prefix: evolve.engine.promotion)
ROWS = "genome_rows"  # ... and for the rows the file must hold at least (the highest id written, plus one)


def genomes_path(path: str) -> str:
    """The genome file beside the state file ``path``: ``checkpoint.h5`` -> ``checkpoint.genomes``."""
    return os.path.splitext(path)[0] + GENOMES_SUFFIX


class GenomeFile(SideFile, Genomes):
    """The paused networks' genomes in ``checkpoint.genomes`` (see the module's note); only ids in memory."""

    MAGIC, VERSION, WHAT = b"EVGENOME", 1, "the paused networks' genomes"
    in_memory = False

    def __init__(self, path: str, genes: int, token: bytes | None = None):
        """A new file at ``path`` for genomes of ``genes`` genes (replacing any there), or with ``token`` the existing
        one that token names (:func:`usable` said so)."""
        Genomes.__init__(self)
        SideFile.__init__(self, path, genes, token)
        self.genes = genes
        self._row = struct.Struct(f"<q{genes}d")
        self.rows = _rows_in(self.size, genes)

    def _at(self, network: int) -> int:
        return HEADER.size + network * self._row.size

    def put(self, network: int, genome) -> None:
        self.pwrite(self._row.pack(network + 1, *genome), self._at(network))
        self.rows = max(self.rows, network + 1)

    def get(self, network: int) -> list[float] | None:
        data = self.pread(self._row.size, self._at(network))
        if len(data) < self._row.size:
            return None
        ident, *genome = self._row.unpack(data)
        return genome if ident == network + 1 else None

    def drop(self, network: int) -> None:
        pass  # a row is final: it stays, unread

    def items(self):
        return ()

    def memory(self) -> dict[str, np.ndarray]:
        """What the checkpoint's memory says of the file: its token and the rows it must hold."""
        return {TOKEN: np.frombuffer(self.token, dtype=np.uint8).copy(), ROWS: np.asarray([self.rows], dtype=np.int64)}


def _rows_in(size: int, genes: int) -> int:
    return max(0, (size - HEADER.size) // (8 + 8 * genes))


def usable(path: str, memory: dict[str, np.ndarray], genes: int) -> bool:
    """Is ``path`` (a genome file) the one the checkpoint's halving ``memory`` counts on, and whole? True where the
    memory counts on none (its genomes are in it, or the search has no promotion)."""
    if TOKEN not in memory:
        return True
    size = GenomeFile.matches(path, bytes(memory[TOKEN]), genes)
    return size is not None and _rows_in(size, genes) >= int(memory[ROWS][0])


def open_for(path: str, memory: dict[str, np.ndarray], genes: int) -> GenomeFile:
    """The genome file of a session: the checkpoint's own (its ``memory`` names it, and :func:`usable` has checked it),
    else a new one."""
    return GenomeFile(path, genes, bytes(memory[TOKEN]) if TOKEN in memory else None)
