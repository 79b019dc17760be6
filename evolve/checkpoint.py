"""The run's checkpoint: one HDF5 file with everything needed to resume, report and predict.

Layout::

    /                attrs: format, format_version, evens_version, config (JSON),
                     gene_names (JSON), data (JSON: shapes, problem, sizes), next_id,
                     busy_seconds, capacity_seconds, wall_seconds, sessions,
                     strategy (JSON: the strategy's population and its own state)
    /rng             the master's random.Random state (uint32[625]; attrs version, gauss_next)
    /segments        name, rows, crc32 of the evaluation segments that count, in order
                     (attr last_id); the segments themselves, one column per field of
                     :class:`~evolve.records.Record`, are files in checkpoint.evaluations/
                     (see :mod:`evolve.segments`)
    /pending/*       individuals sent out but not finished: id, genome, parents, operators,
                     attempts (job deaths each was out at; absent in older files: 0)
    /ensemble        the hall of fame with weights, the labels, and the chosen ensemble
                     (written by :mod:`ensemble.store`, which documents it)

Only numbers, strings and JSON are stored: loading executes nothing, and every
segment is checked against its CRC32. A checkpoint appends the records that
finished since the last one as a new segment, then writes the state file to a
temporary name, syncs it and renames it over the old one: the rename is the
commit, so a crash at any moment leaves the previous checkpoint, whole.
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass

import h5py
import numpy as np

from ensemble import h5write
from ensemble.problem import problem_from_dict
from ensemble.store import (GROUP, RUN_FILE_NAME, StoredEnsemble, add_members, checksummed, read_ensemble, write_ensemble,
                            write_header)

from .errors import RunDirError
from .inflight import InFlightLog, inflight_path, merge_into  # noqa: F401 (InFlightLog, inflight_path: the run's API)
from .master import SearchState
from .records import Pending, Record
from .tempfiles import exclusive_temp
from .segments import Segment, append, decoded, fixed, merged, read_segment, remove_unlisted

FORMAT = "evens-checkpoint"
FORMAT_VERSION = 8  # 8: messages flat in segments, pending operators fixed-width; 7: segments of plain arrays (fixed-width status and operators, flat curves); 6: typed genes
OLDEST_VERSION = 6  # the oldest format this evens reads (6: its segments are converted when next merged)
CHECKPOINT_NAME = RUN_FILE_NAME


@dataclass
class RunInfo:
    """The run-level facts stored beside the search state."""

    config: dict
    gene_names: list[str]
    data: dict  # path, sample_shape, x_dtype, sizes, problem (see evolve.app.driver.data_facts)
    val_y: np.ndarray  # labels or targets of the validation split
    test_y: np.ndarray
    wall_seconds: float = 0.0
    sessions: int = 0
    version: str = ""


def stored_ensemble(state: SearchState, info: RunInfo) -> StoredEnsemble:
    """The ensemble group's content for this state."""
    return StoredEnsemble(
        problem=problem_from_dict(info.data["problem"]),
        sample_shape=tuple(info.data["sample_shape"]),
        x_dtype=info.data["x_dtype"],
        val_y=np.asarray(info.val_y),
        test_y=np.asarray(info.test_y),
        hall_of_fame=state.hall_of_fame,
        selection=state.selection,
    )


def segments_folder(path: str) -> str:
    """Where the segments of the state file ``path`` live: ``checkpoint.h5`` -> ``checkpoint.evaluations/``."""
    return os.path.splitext(path)[0] + ".evaluations"


def _listed(path: str) -> tuple[list[Segment], int]:
    """The segments the state file at ``path`` lists now, and the id of the last record they hold."""
    try:
        with h5py.File(path, "r") as f:
            seg = f["segments"]
            listed = [Segment(str(n), int(r), int(c)) for n, r, c in zip(seg["name"].asstr()[...], seg["rows"][...], seg["crc32"][...])]
            return listed, int(seg.attrs["last_id"])
    except (OSError, KeyError, ValueError, RuntimeError):
        return [], -1


# The state file this process last wrote, by path. If that file is still in place, the next checkpoint
# takes its segment listing from here instead of reading it, and copies its ensemble group with HDF5's own
# object copy (C, a few ms) instead of writing every member again (some 50 ms for 32 small members): the
# members that left the hall are deleted from the copy and only those that entered are written.
_written: dict[str, tuple] = {}  # path -> (file identity, group signature, member ids, val labels, test labels, listing)


def _identity(path: str) -> tuple:
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _signature(stored: StoredEnsemble) -> tuple:
    """What the ensemble group holds besides the labels (compared apart) and the members (a member, once in
    the hall, never changes: the same id is the same trained network)."""
    return json.dumps(stored.problem.to_dict(), sort_keys=True), tuple(stored.sample_shape), stored.x_dtype


def _previous(path: str) -> tuple | None:
    """What this process wrote at ``path`` (its entry in ``_written``), if the file there is still that one."""
    last = _written.get(os.path.abspath(path))
    if last is None:
        return None
    try:
        if _identity(path) != last[0]:
            return None
    except OSError:
        return None
    return last


def _group_reusable(last: tuple, stored: StoredEnsemble) -> bool:
    """Does the ensemble group written with ``last`` differ from what ``stored`` makes in its members,
    capacity or selection at most (so that :func:`_copy_group` can make it from that one)?"""
    if any(m.weights is None for m in stored.hall_of_fame):
        return False  # (write_ensemble refuses members read without their weights: let it say so)
    return last[1] == _signature(stored) and all(a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
                                                 for a, b in ((last[3], stored.val_y), (last[4], stored.test_y)))


def _copy_group(previous_path: str, f: h5py.File, stored: StoredEnsemble, members: tuple) -> None:
    """The ensemble group ``stored`` makes, from the previous state file's (whose members are ``members``):
    copied, without the members that left, with those that entered written (as write_ensemble writes them).

    While most members stay, the whole group is copied (one call) and those that left are deleted; when
    most left, only the labels and the members that stayed are copied: a copy per member costs more than
    one of the whole group, a deletion less. When all 32 change, ``checkpoint.save`` takes 45.4 ms, against
    51.2 for copying them to delete them (scripts/bench_checkpoint.py, the 2-core VM)."""
    hall = stored.hall_of_fame
    before, now = set(members), {m.id for m in hall}
    entered = [m for m in hall if m.id not in before]
    with h5py.File(previous_path, "r") as previous:
        old = previous[GROUP]
        if 2 * len(before & now) >= len(before):
            previous.copy(old, f, GROUP)
            attrs = dict(old.attrs)
            group = f[GROUP]
            selection = json.dumps(stored.selection.to_dict()) if stored.selection else ""
            if not entered and [m.id for m in hall] == list(members) and attrs.get("capacity") == hall.capacity \
                    and attrs.get("selection") == selection:
                return  # the very same group
            for ident in before - now:
                del group["members"][str(ident)]
        else:
            group = h5write.group(f, GROUP)
            previous.copy(old["labels"], group, "labels")
            kept = h5write.group(group, "members")
            for ident in sorted(before & now):
                previous.copy(old["members"][str(ident)], kept, str(ident))
    add_members(group["members"], entered)
    write_header(group, stored)


def save(path: str, state: SearchState, info: RunInfo) -> None:
    """Checkpoint ``state``: append the records since the last checkpoint as a segment, then replace the
    state file atomically (temporary file, fsync, rename). Costs O(new records), O(log n) amortized with
    merges, and O(hall of fame) for the ensemble group (copied from the previous state file, in C, when it
    has not changed since this process wrote it); a crash at any moment leaves the previous checkpoint.
    """
    folder = segments_folder(path)
    os.makedirs(folder, exist_ok=True)
    n_genes = len(info.gene_names)
    previous = _previous(path)
    segments, last_id = (list(previous[5][0]), previous[5][1]) if previous is not None else _listed(path)
    committed = sum(s.rows for s in segments)
    if committed > len(state.records) or (committed and state.records[committed - 1].id != last_id):
        segments, committed = [], 0  # not this state's log: write it whole
    if len(state.records) > committed:
        segments = append(folder, segments, state.records[committed:], n_genes)
    else:
        segments = merged(folder, segments, n_genes)
    stored = stored_ensemble(state, info)
    copy = previous if previous is not None and _group_reusable(previous, stored) else None  # (the state file is untouched since)
    _written.pop(os.path.abspath(path), None)  # until this write is complete
    tmp = exclusive_temp(path)  # unpredictable, created exclusively: a planted symlink is never followed
    try:
        with h5py.File(tmp, "w") as f:
            h5write.attrs(
                f,
                format=FORMAT,
                format_version=FORMAT_VERSION,
                evens_version=info.version,
                config=json.dumps(info.config, sort_keys=True),
                gene_names=json.dumps(info.gene_names),
                data=json.dumps(info.data, sort_keys=True),
                next_id=state.next_id,
                busy_seconds=state.busy_seconds,
                capacity_seconds=state.capacity_seconds,
                wall_seconds=info.wall_seconds,
                sessions=info.sessions,
                strategy=json.dumps(state.strategy),
            )
            version, internal, gauss = state.rng.getstate()
            checksummed(f, "rng", np.asarray(internal, dtype=np.uint32))
            h5write.attrs(f["rng"], version=version, gauss_next=np.nan if gauss is None else gauss)

            seg = h5write.group(f, "segments")
            h5write.dataset(seg, "name", np.asarray([s.name for s in segments], dtype=object))
            checksummed(seg, "rows", np.asarray([s.rows for s in segments], dtype=np.int64))
            checksummed(seg, "crc32", np.asarray([s.crc32 for s in segments], dtype=np.uint32))
            h5write.attrs(seg, last_id=state.records[-1].id if state.records else -1)
            pend = h5write.group(f, "pending")
            checksummed(pend, "id", np.asarray([p.id for p in state.pending], dtype=np.int64))
            checksummed(pend, "genome", np.asarray([p.genome for p in state.pending], dtype=np.float64).reshape(len(state.pending), n_genes))
            checksummed(pend, "parents", np.asarray([p.parents for p in state.pending], dtype=np.int64).reshape(len(state.pending), 2))
            checksummed(pend, "attempts", np.asarray([p.attempts for p in state.pending], dtype=np.int64))
            # fixed-width (UTF-8), as in the segments, and checksummed like the columns beside it: at
            # 27,648 workers some 55,000 are out, which take 8 ms of every checkpoint this way, 20-40 ms
            # as variable-length strings (which cannot carry a checksum)
            checksummed(pend, "operators", fixed([p.operators for p in state.pending]))
            if copy is not None:
                _copy_group(path, f, stored, copy[2])
            else:
                write_ensemble(h5write.group(f, GROUP), stored)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        _sync_directory(folder)  # the segments are in place before the file that lists them
        os.replace(tmp, path)
        _sync_directory(os.path.dirname(os.path.abspath(path)))  # make the rename itself durable
        _written[os.path.abspath(path)] = (_identity(path), _signature(stored), tuple(m.id for m in stored.hall_of_fame),
                                           stored.val_y.copy(), stored.test_y.copy(), (tuple(segments), state.records[-1].id if state.records else -1))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    remove_unlisted(folder, segments)


def _sync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse to sync a directory; the rename still happened
        pass
    finally:
        os.close(fd)


def load(path: str, weights: bool = True) -> tuple[SearchState, RunInfo]:
    """Read a checkpoint written by :func:`save`. Raises :class:`RunDirError` if it is not one.

    ``weights=False`` leaves the hall of fame's weights on disk (reports and selection need
    only the predictions).
    """
    try:
        f = h5py.File(path, "r")
    except (OSError, FileNotFoundError) as exc:
        raise RunDirError(f"{path}: not a readable checkpoint ({exc})") from None
    with f:
        if f.attrs.get("format") != FORMAT:
            raise RunDirError(f"{path}: not an evens checkpoint")
        version = int(f.attrs["format_version"])
        if version > FORMAT_VERSION:
            raise RunDirError(f"{path}: checkpoint format {version} is newer than this evens reads")
        if version < OLDEST_VERSION:
            raise RunDirError(
                f"{path}: checkpoint format {version} is from an older evens and cannot be resumed or reported by this one; "
                "its ensemble still predicts (evens predict), or start a new run"
            )
        try:
            state, info = _read(f, weights)
            merge_into(path, state, len(info.gene_names))
            return state, info
        except (KeyError, ValueError, TypeError, IndexError, AttributeError, OSError, RuntimeError) as exc:  # (h5py: RuntimeError for some damaged headers)
            raise RunDirError(f"{path}: damaged checkpoint ({type(exc).__name__}: {exc})") from None


def _read(f: h5py.File, weights: bool) -> tuple[SearchState, RunInfo]:
    rng = random.Random()
    gauss = float(f["rng"].attrs["gauss_next"])
    rng.setstate((int(f["rng"].attrs["version"]), tuple(int(v) for v in f["rng"][...]), None if np.isnan(gauss) else gauss))

    pend = f["pending"]
    ids = pend["id"][...]
    attempts = pend["attempts"][...] if "attempts" in pend else np.zeros(len(ids), dtype=np.int64)  # older files: none counted
    pending = [
        Pending(int(i), [float(g) for g in genome], (int(p[0]), int(p[1])), str(ops), int(a))
        for i, genome, p, ops, a in zip(ids, pend["genome"][...], pend["parents"][...], decoded(pend["operators"][...]), attempts)
    ]
    stored = read_ensemble(f[GROUP], "all" if weights else "none")
    seg = f["segments"]
    folder = segments_folder(f.filename)
    records: list[Record] = []
    for name, rows, crc in zip(seg["name"].asstr()[...], seg["rows"][...], seg["crc32"][...]):
        records += read_segment(folder, Segment(str(name), int(rows), int(crc)))
    state = SearchState(
        rng=rng,
        records=records,
        strategy=json.loads(f.attrs["strategy"]),
        pending=pending,
        hall_of_fame=stored.hall_of_fame,
        selection=stored.selection,
        next_id=int(f.attrs["next_id"]),
        busy_seconds=float(f.attrs["busy_seconds"]),
        capacity_seconds=float(f.attrs["capacity_seconds"]),
    )
    info = RunInfo(
        config=json.loads(f.attrs["config"]),
        gene_names=json.loads(f.attrs["gene_names"]),
        data=json.loads(f.attrs["data"]),
        val_y=stored.val_y,
        test_y=stored.test_y,
        wall_seconds=float(f.attrs["wall_seconds"]),
        sessions=int(f.attrs["sessions"]),
        version=str(f.attrs["evens_version"]),
    )
    return state, info
