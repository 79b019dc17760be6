"""The in-flight log: what went out, and what came back, since the last checkpoint.

A job that dies (a worker killed by the out-of-memory killer ends the whole MPI job) leaves in
``checkpoint.inflight`` the individuals that were out when it died, though they went out after the
last checkpoint; :func:`merge_into` adds them to the pending ones with their attempts counted, so a
network that kills its worker is not proposed again as new and sent out forever.

The master writes it for every evaluation, so it is binary and written in as few ``write`` calls as
the guarantee allows: entries are noted in memory (:meth:`InFlightLog.sent`, :meth:`InFlightLog.done`)
and written by :meth:`InFlightLog.flush`, which the master calls before any task it noted goes out
and before it waits for results. So a task is in the file before it leaves the master, always; a
loop turn that took several results and sends their workers several tasks writes them all at once,
in one ``write`` to a file opened for appending, without a sync. The entries survive the death of
the process (they are in the kernel's cache), not that of the machine. At np=4 on 2 cores (a write
every third evaluation) about 3 us an evaluation, where a write per evaluation cost 5 and a JSON
line per event 20 (two ``json.dumps`` and two writes).

Layout: frames of ``<u32 length, u32 crc32>`` and that many bytes of entries; an entry is ``D`` and
an int64 id (came back), or ``S``, int64 id, int64 parents[2], int32 attempts, uint16 genes,
uint16 operator bytes, the genes as float64 and the operators as UTF-8 (went out). A frame cut short
or failing its CRC (a write the dying machine never finished) ends the log. Reading executes
nothing. A log of JSON lines, as evens wrote it before this layout, is still read.
"""
from __future__ import annotations

import json
import os
import stat
import struct
import zlib

from .errors import RunDirError
from .records import Pending

_FRAME = struct.Struct("<II")
_DONE = struct.Struct("<cq")
_SENT = struct.Struct("<cqqqiHH")
_MAX_BYTES = 64 << 20  # more than any run writes between two checkpoints; a larger file is not ours to trust


def inflight_path(path: str) -> str:
    """The in-flight log beside the state file ``path``: ``checkpoint.h5`` -> ``checkpoint.inflight``."""
    return os.path.splitext(path)[0] + ".inflight"


class InFlightLog:
    """Appends to the in-flight log beside the state file ``path``; :meth:`reset` empties it after each checkpoint."""

    def __init__(self, path: str):
        self.path = inflight_path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        self._held: list[bytes] = []  # entries noted, not yet written
        self._genomes: dict[int, struct.Struct] = {}

    def _write(self, entries: bytes) -> None:
        os.write(self._fd, _FRAME.pack(len(entries), zlib.crc32(entries)) + entries)

    def sent(self, individual: Pending, attempts: int | None = None) -> None:
        """``individual`` goes out (noted; written by the next :meth:`flush`, which must come before it
        leaves); its attempts (``attempts``, default its own) count this job as one it is out at."""
        genome, operators = individual.genome, individual.operators.encode()
        packer = self._genomes.get(len(genome))
        if packer is None:  # _SENT and the genes, in one struct
            packer = self._genomes[len(genome)] = struct.Struct(_SENT.format + f"{len(genome)}d")
        parents = individual.parents
        self._held.append(packer.pack(b"S", individual.id, parents[0], parents[1], individual.attempts if attempts is None else attempts,
                                      len(genome), len(operators), *genome) + operators)

    def done(self, ident: int) -> None:
        """The result of ``ident`` came back (noted; written by the next :meth:`flush`)."""
        self._held.append(_DONE.pack(b"D", ident))

    def flush(self) -> None:
        """Write what is noted, in one frame (tasks noted are about to go out, or the master is about to wait)."""
        if self._held:
            self._write(b"".join(self._held))
            self._held.clear()

    def reset(self) -> None:
        """Forget everything: a checkpoint now holds it."""
        self._held.clear()
        os.ftruncate(self._fd, 0)

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            os.close(self._fd)
            self._fd = -1


def read_log(data: bytes, n_genes: int) -> dict[int, Pending]:
    """The individuals ``data`` (an in-flight log's bytes) says went out and never came back, by id."""
    if data[:1] == b"{":
        return _read_json_lines(data, n_genes)
    sent: dict[int, Pending] = {}
    at = 0
    while at + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, at)
        frame = data[at + _FRAME.size: at + _FRAME.size + length]
        if len(frame) < length or zlib.crc32(frame) != crc:
            break  # a write the dying machine never finished: nothing after it counts
        at += _FRAME.size + length
        try:
            _read_frame(frame, n_genes, sent)
        except (struct.error, UnicodeDecodeError, ValueError):
            break  # whole and checksummed, yet not ours: trust nothing after it
    return sent


def _read_frame(frame: bytes, n_genes: int, sent: dict[int, Pending]) -> None:
    at = 0
    while at < len(frame):
        kind = frame[at:at + 1]
        if kind == b"D":
            _, ident = _DONE.unpack_from(frame, at)
            sent.pop(ident, None)
            at += _DONE.size
        elif kind == b"S":
            _, ident, p0, p1, attempts, genes, op_bytes = _SENT.unpack_from(frame, at)
            at += _SENT.size
            genome = list(struct.unpack_from(f"<{genes}d", frame, at))
            at += 8 * genes
            operators = frame[at:at + op_bytes].decode()
            at += op_bytes
            if at > len(frame):
                raise ValueError("an entry runs past its frame")
            if genes == n_genes:
                sent[ident] = Pending(ident, genome, (p0, p1), operators, attempts)
        else:
            raise ValueError(f"unknown entry {kind!r}")


def _read_json_lines(data: bytes, n_genes: int) -> dict[int, Pending]:
    """The log as evens wrote it before: one JSON object a line."""
    sent: dict[int, Pending] = {}
    for line in data.splitlines():
        try:
            entry = json.loads(line)
            if "done" in entry:
                sent.pop(int(entry["done"]), None)
                continue
            genome = [float(g) for g in entry["genome"]]
            parents = tuple(int(p) for p in entry["parents"])
            if len(genome) != n_genes or len(parents) != 2:
                continue
            sent[int(entry["sent"])] = Pending(int(entry["sent"]), genome, parents, str(entry["operators"]), int(entry["attempts"]))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short: its write never finished
    return sent


def merge_into(path: str, state, n_genes: int) -> None:
    """Add what the in-flight log beside ``path`` says was out and never came back to ``state.pending``
    (an individual already pending keeps the larger of the two attempt counts)."""
    try:
        fd = os.open(inflight_path(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RunDirError(f"{inflight_path(path)}: cannot read the in-flight log ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise RunDirError(f"{inflight_path(path)}: not a regular file")
        data = fh.read(_MAX_BYTES)
    sent = read_log(data, n_genes)
    if not sent:
        return
    recorded = {r.id for r in state.records}
    pending = {p.id: p for p in state.pending}
    for ident, individual in sent.items():
        if ident in recorded:
            continue
        if ident in pending:
            pending[ident].attempts = max(pending[ident].attempts, individual.attempts)
        else:
            state.pending.append(individual)
            state.next_id = max(state.next_id, ident + 1)
