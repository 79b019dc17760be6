"""The in-flight log: what went out, and what came back, since the last checkpoint.

A job that dies (a worker killed by the out-of-memory killer ends the whole MPI job, or the master is
killed) leaves in ``checkpoint.inflight`` the individuals that were out when it died, though they went
out after the last checkpoint; :func:`merge_into` adds them to the pending ones with their attempts
counted, so a network that kills its worker is not proposed again as new and sent out forever. Those
whose results came back after the last checkpoint are added too, with no attempt counted: their
results died with the master, and they are redone.

The master writes it for every evaluation, so it is binary and written in as few ``write`` calls as
the guarantee allows: entries are noted in memory (:meth:`InFlightLog.sent`, :meth:`InFlightLog.done`)
and written by :meth:`InFlightLog.flush`, which the master calls before any task it noted goes out
and before it waits for results. So a task is in the file before it leaves the master, always; a
loop turn that took several results and sends their workers several tasks writes them all at once,
in one ``write`` to a file opened for appending, without a sync. The entries survive the death of
the process (they are in the kernel's cache), not that of the machine.

Layout: frames of ``<u32 length, u32 crc32>`` and that many bytes of entries; an entry is ``D`` and
an int64 id (came back), or ``S`` and a :class:`~evolve.search.records.Pending` laid out from its
declared fields (went out): a fixed head (an int64 for an integer field, two for a pair, a uint16
count for a vector or byte length for a label), then the vectors' values as float64 and the labels
as UTF-8, in field order. A frame cut short
or failing its CRC (a write the dying machine never finished) ends the log. Reading executes
nothing.
"""
from __future__ import annotations

import os
import stat
import struct
import zlib

from ensemble.results import kinds
from evolve.errors import RunDirError
from evolve.search.records import Pending

_FRAME = struct.Struct("<II")
_DONE = struct.Struct("<cq")
_FIELDS = tuple(kinds(Pending).items())
_CODES = {"integer": "q", "pair": "qq", "vector": "H", "label": "H"}  # a Pending's fields in the head (see the module docstring)
_SENT = struct.Struct("<c" + "".join(_CODES[kind] for _, kind in _FIELDS))
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

    def _write(self, entries: bytes) -> None:
        os.write(self._fd, _FRAME.pack(len(entries), zlib.crc32(entries)) + entries)

    def sent(self, individual: Pending, attempts: int | None = None) -> None:
        """``individual`` goes out (noted; written by the next :meth:`flush`, which must come before it
        leaves); its attempts (``attempts``, default its own) count this job as one it is out at."""
        head, tail = [], []
        for name, kind in _FIELDS:
            value = attempts if name == "attempts" and attempts is not None else getattr(individual, name)
            if kind == "integer":
                head.append(value)
            elif kind == "pair":
                head += value
            elif kind == "vector":
                head.append(len(value))
                tail.append(struct.pack(f"<{len(value)}d", *value))
            else:  # label
                tail.append(value.encode())
                head.append(len(tail[-1]))
        self._held.append(b"".join((_SENT.pack(b"S", *head), *tail)))

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


def read_log(data: bytes, n_genes: int, returned: dict[int, Pending] | None = None) -> dict[int, Pending]:
    """The individuals ``data`` (an in-flight log's bytes) says went out and never came back, by id; ``returned``, if
    given, gets those that came back (recorded by the job after the checkpoint the log follows), each with the
    attempts it had before it went out (it finished: no job death counts against it)."""
    sent: dict[int, Pending] = {}
    returned = {} if returned is None else returned
    at = 0
    while at + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, at)
        frame = data[at + _FRAME.size: at + _FRAME.size + length]
        if len(frame) < length or zlib.crc32(frame) != crc:
            break  # a write the dying machine never finished: nothing after it counts
        at += _FRAME.size + length
        try:
            _read_frame(frame, n_genes, sent, returned)
        except (struct.error, UnicodeDecodeError, ValueError):
            break  # whole and checksummed, yet not ours: trust nothing after it
    return sent


def _read_frame(frame: bytes, n_genes: int, sent: dict[int, Pending], returned: dict[int, Pending]) -> None:
    at = 0
    while at < len(frame):
        kind = frame[at:at + 1]
        if kind == b"D":
            _, ident = _DONE.unpack_from(frame, at)
            back = sent.pop(ident, None)
            if back is not None:  # its last entry counted the job it trained in; it finished there
                back.attempts = max(0, back.attempts - 1)
                returned[ident] = back
            at += _DONE.size
        elif kind == b"S":
            individual, at = _read_sent(frame, at + 1)
            if len(individual.genome) == n_genes:
                sent[individual.id] = individual
                returned.pop(individual.id, None)
        else:
            raise ValueError(f"unknown entry {kind!r}")


def _read_sent(frame: bytes, at: int) -> tuple[Pending, int]:
    """The Pending of an ``S`` entry whose head starts at ``at``, and where the entry ends."""
    head = list(_SENT.unpack_from(frame, at - 1)[1:])
    at += _SENT.size - 1
    values = {}
    for name, kind in _FIELDS:
        if kind == "integer":
            values[name] = head.pop(0)
        elif kind == "pair":
            values[name] = (head.pop(0), head.pop(0))
        elif kind == "vector":
            n = head.pop(0)
            values[name] = list(struct.unpack_from(f"<{n}d", frame, at))
            at += 8 * n
        else:
            n = head.pop(0)
            values[name] = frame[at:at + n].decode()
            at += n
    if at > len(frame):
        raise ValueError("an entry runs past its frame")
    return Pending(**values), at


def merge_into(path: str, state, n_genes: int) -> None:
    """Add to ``state.pending`` what the in-flight log beside ``path`` says was out and never came back, and what came
    back after the checkpoint and is not in it (a SIGKILL between checkpoints: redone, not lost). An individual
    already pending keeps the larger of the two attempt counts."""
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
    returned: dict[int, Pending] = {}
    sent = read_log(data, n_genes, returned)
    sent.update((ident, individual) for ident, individual in returned.items() if ident not in sent)  # recorded, not saved
    if not sent:
        return
    # what the checkpoint recorded: every record, or without its history read the last checkpoint's, the only ones
    # the log can name (it is emptied at each checkpoint, so it names what was out at the one before, or sent since)
    recorded = {r.id for r in state.records} | set(state.recent_ids)
    pending = {p.id: p for p in state.pending}
    for ident, individual in sent.items():
        if ident in recorded:
            continue
        if ident in pending:
            pending[ident].attempts = max(pending[ident].attempts, individual.attempts)
        else:
            state.pending.append(individual)
            state.next_id = max(state.next_id, ident + 1)
