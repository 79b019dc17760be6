"""The run's checkpoint: one HDF5 file with everything needed to resume, report and predict.

Layout::

    /                attrs: format, format_version, evens_version, config (JSON),
                     gene_names (JSON), data (JSON: shapes, problem, sizes), next_id,
                     busy_seconds, capacity_seconds, wall_seconds, sessions,
                     strategy (JSON: the strategy's population and its own state),
                     dispatch (JSON: what each worker trained and held queued at the save,
                     for evens status; see Dispatcher.view), crc32
    /rng             the master's random.Random state (uint32[625]; attrs version, gauss_next)
    /segments        name, rows, crc32 of the evaluation segments that count, in order
                     (attrs last_id, crc32); the segments themselves, one column per field of
                     :class:`~evolve.search.records.Record`, are files in checkpoint.evaluations/
                     (see :mod:`evolve.runfile.segments`)
    /pending/*       individuals sent out but not finished: one column per field of
                     :class:`~evolve.search.records.Pending` (see :mod:`evolve.runfile.columns`); attr crc32
    /folds           with data.folds: the fold trainings pending networks have back, with their
                     predictions and weights (see :mod:`evolve.runfile.folding`); attr crc32
    /ensemble        the hall of fame with weights, the labels, and the chosen ensemble
                     (written by :mod:`ensemble.store`, which documents it)

Only numbers, strings and JSON are stored: loading executes nothing, and every
segment is checked against its CRC32. Every byte that loading trusts is under a
checksum: ``crc32`` on ``/``, ``/segments`` and ``/pending`` seals their attributes and
datasets (``/`` holds ``/rng``; see :func:`ensemble.store.seal`), and the ensemble group
seals its own. There is one format version: a file of another is refused. A
checkpoint appends the records that finished since the last one as a new segment, then writes the state file to a temporary name, syncs it
and renames it over the old one: the rename is the commit, so a crash at any
moment leaves the previous checkpoint, whole.
"""
from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass

import h5py
import numpy as np

from ensemble import store
from ensemble.problem import problem_from_dict
from ensemble.results import kinds
from ensemble.store import GROUP, RUN_FILE_NAME, StoredEnsemble, add_members, checksummed, read_ensemble, write_ensemble, write_header
from evolve.config.schema import Config, config_from_dict
from evolve.engine.state import SearchState
from evolve.errors import ConfigError, RunDirError
from evolve.search.records import Pending, Record
from evolve.search.tally import Tally
from evolve.search.space import SearchSpace

from . import columns as table
from . import proposed
from .folding import read_folding, write_folding
from .inflight import InFlightLog, inflight_path, merge_into  # noqa: F401 (InFlightLog, inflight_path: the run's API)
from .segments import Segment, append, merged, read_columns, read_segment, remove_unlisted, snapshot, write_columns
from .tempfiles import exclusive_temp

FORMAT = "evens-checkpoint"
FORMAT_VERSION = 17  # the one format this evens reads; every change to the run file bumps it (17: /master's population without the loss)
# The record layouts this format stores (each field's kind: see evolve.runfile.columns). A new field changes
# the run file: tests/test_segments.py pins this to FORMAT_VERSION, so the version moves with it.
SCHEMA = {"record": kinds(Record), "pending": kinds(Pending)}
CHECKPOINT_NAME = RUN_FILE_NAME
ROOT_OWN = ("segments", "pending", "folds", "master", "best", GROUP)  # what the seal of / leaves to their own seals (so it covers the attributes and /rng)


@dataclass
class RunInfo:
    """The run-level facts stored beside the search state."""

    config: Config
    gene_names: list[str]
    data: dict  # path, sample_shape, x_dtype, sizes, problem, fingerprint (see evolve.app.run.prepare.data_facts)
    val_y: np.ndarray  # labels or targets of the validation split
    test_y: np.ndarray
    wall_seconds: float = 0.0
    sessions: int = 0
    version: str = ""
    preset: dict | None = None  # the preset the search space was made from, and why (None: the config's own space)

    def space(self) -> SearchSpace:
        """The search space the run searches: the config's, without the families its data rules out."""
        return self.config.space.for_data(tuple(self.data["sample_shape"]), self.data["problem"]["kind"])


def stored_ensemble(state: SearchState, info: RunInfo) -> StoredEnsemble:
    """The ensemble group's content for this state. A selection naming a member that has left the hall of fame since it
    was chosen is not stored (evens run chooses again before each checkpoint, evolve.app.run.session.Checkpointer; a caller
    that does not gets a run file without a selection, not one that its loader refuses)."""
    selection = state.selection
    if selection is not None and not set(selection.ids) <= set(state.hall_of_fame.ids):
        selection = None
    return StoredEnsemble(
        problem=problem_from_dict(info.data["problem"]),
        sample_shape=tuple(info.data["sample_shape"]),
        x_dtype=info.data["x_dtype"],
        val_y=np.asarray(info.val_y),
        test_y=np.asarray(info.test_y),
        hall_of_fame=state.hall_of_fame,
        selection=selection,
    )


def segments_folder(path: str) -> str:
    """Where the segments of the state file ``path`` live: ``checkpoint.h5`` -> ``checkpoint.evaluations/``."""
    return os.path.splitext(path)[0] + ".evaluations"


def _segments_in(group: h5py.Group) -> list[Segment]:
    """The listing a state file's ``/segments`` holds, in order."""
    return [Segment(str(n), int(r), int(c)) for n, r, c in zip(group["name"].asstr()[...], group["rows"][...], group["crc32"][...])]


def _listed(path: str) -> tuple[list[Segment], int]:
    """The segments the state file at ``path`` lists now, and the id of the last record they hold."""
    try:
        with h5py.File(path, "r") as f:
            seg = f["segments"]
            if not store.seal_holds(seg):
                return [], -1  # damaged: the next checkpoint writes the log whole
            listed = _segments_in(seg)
            return listed, int(seg.attrs["last_id"])
    except (OSError, KeyError, ValueError, RuntimeError):
        return [], -1


def listing(path: str) -> list[Segment]:
    """The segments the state file at ``path`` lists now, in order (what :class:`evolve.runfile.history.History` opens);
    ``ValueError`` if its listing is damaged."""
    with h5py.File(path, "r") as f:
        return listed_in(f)


def listed_in(f: h5py.File) -> list[Segment]:
    """The segments the open state file ``f`` lists, in order; ``ValueError`` if its listing is damaged."""
    store.check_seal(f["segments"], "/segments")
    return _segments_in(f["segments"])


# The state file this process last wrote, by path. If that file is still in place, the next checkpoint
# takes its segment listing from here instead of reading it, and copies its ensemble group with HDF5's own
# object copy (in C, far cheaper than writing every member again): the members that left the hall are
# deleted from the copy and only those that entered are written.
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
    one of the whole group, a deletion less (scripts/bench/bench_checkpoint.py, docs/benchmarks.md)."""
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
            group = f.create_group(GROUP)
            previous.copy(old["labels"], group, "labels")
            kept = group.create_group("members")
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
    segments, recent = _append_records(path, folder, state, len(info.gene_names))
    stored = stored_ensemble(state, info)
    previous = _previous(path)
    copy = previous if previous is not None and _group_reusable(previous, stored) else None  # (the state file is untouched since)
    _written.pop(os.path.abspath(path), None)  # until this write is complete
    last_id = state.records[-1].id if state.records else state.dropped_last_id
    tmp = exclusive_temp(path)  # unpredictable, created exclusively: a planted symlink is never followed
    try:
        with h5py.File(tmp, "w") as f:
            _write_state(f, state, info, segments, last_id, recent)
            if copy is not None:
                _copy_group(path, f, stored, copy[2])
            else:
                write_ensemble(f.create_group(GROUP), stored)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        _sync_directory(folder)  # the segments are in place before the file that lists them
        os.replace(tmp, path)
        _sync_directory(os.path.dirname(os.path.abspath(path)))  # make the rename itself durable
        _written[os.path.abspath(path)] = (_identity(path), _signature(stored), tuple(m.id for m in stored.hall_of_fame),
                                           stored.val_y.copy(), stored.test_y.copy(), (tuple(segments), last_id))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    remove_unlisted(folder, segments)


def _append_records(path: str, folder: str, state: SearchState, n_genes: int) -> tuple[list[Segment], list[int]]:
    """The segments that hold every record of ``state``: those listed now, with the records since appended; and the
    ids of those appended (a resume that reads no history checks the in-flight log against them)."""
    previous = _previous(path)
    segments, last_id = (list(previous[5][0]), previous[5][1]) if previous is not None else _listed(path)
    committed = sum(s.rows for s in segments)
    if state.dropped:  # a master that let go of what the log holds: it must be this log, and is appended to
        at = committed - state.dropped  # how many of the records in memory it holds already
        if at < 0 or at > len(state.records) or last_id != (state.records[at - 1].id if at else state.dropped_last_id):
            raise RunDirError(f"{path}: its evaluations are not the first {state.dropped} of this search's, which it let go "
                              "of after an earlier checkpoint; a search that kept only its last records is saved only where it was")
    else:
        at = committed
        if committed > len(state.records) or (committed and state.records[committed - 1].id != last_id):
            segments, at = [], 0  # not this state's log: write it whole
    new = state.records[at:]
    return (append(folder, segments, new, n_genes) if new else merged(folder, segments)), [r.id for r in new]


def _write_state(f: h5py.File, state: SearchState, info: RunInfo, segments: list[Segment], last_id: int, recent: list[int]) -> None:
    """Everything in the state file but the ensemble group."""
    attrs = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "evens_version": info.version,
        "config": info.config.to_json(),
        "gene_names": json.dumps(info.gene_names),
        "data": json.dumps(info.data, sort_keys=True),
        "next_id": state.next_id,
        "busy_seconds": state.busy_seconds,
        "capacity_seconds": state.capacity_seconds,
        "wall_seconds": info.wall_seconds,
        "sessions": info.sessions,
        "strategy": json.dumps(state.strategy),
        "schema": json.dumps(SCHEMA),
        "preset": json.dumps(info.preset),
        "dispatch": json.dumps(state.dispatch),
    }
    if state.tally is not None:  # the account of every record (evolve.search.tally), its best record in /best
        attrs["tally"] = json.dumps(state.tally.to_state())
    f.attrs.update(attrs)
    version, internal, gauss = state.rng.getstate()
    checksummed(f, "rng", np.asarray(internal, dtype=np.uint32))
    f["rng"].attrs.update(version=version, gauss_next=np.nan if gauss is None else gauss)
    seg = f.create_group("segments")
    seg.create_dataset("name", data=[s.name for s in segments], dtype=h5py.string_dtype())
    checksummed(seg, "rows", np.asarray([s.rows for s in segments], dtype=np.int64))
    checksummed(seg, "crc32", np.asarray([s.crc32 for s in segments], dtype=np.uint32))
    seg.attrs["last_id"] = last_id
    checksummed(seg, "recent_ids", np.asarray(recent, dtype=np.int64))
    store.seal(seg)
    if state.tally is not None and state.tally.best is not None:
        best = f.create_group("best")
        write_columns(best, table.encode([state.tally.best], Record, len(info.gene_names)))
        store.seal(best)
    master = f.create_group("master")  # evolve.engine.memory: what a resume needs besides this file's attributes, as arrays
    for name, array in proposed.stored(state.memory).items():
        checksummed(master, name, np.asarray(array))
    store.seal(master)
    pending = f.create_group("pending")
    for name, column in table.encode(state.pending, Pending, len(info.gene_names)).items():
        checksummed(pending, name, column)
    store.seal(pending)
    write_folding(f, state.folding)
    store.seal(f, ROOT_OWN, attrs=attrs)


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


def load(path: str, weights: bool = True, say: Callable[[str], None] | None = None, history: bool = True,
         memory: bool = True, proposed_hashes: bool = True) -> tuple[SearchState, RunInfo]:
    """Read a checkpoint written by :func:`save`. Raises :class:`RunDirError` if it is not one.

    ``weights=False`` leaves the hall of fame's weights on disk (reports and selection need
    only the predictions). A damaged member leaves the hall of fame, and ``say`` (default: a warning
    on the "evens" logger) is told which and why, in one line: the run goes on with the rest.

    ``history=False`` reads the state file alone, not the segments: the state has no records, ``dropped`` counts
    them, and ``memory`` is what the master's parts need to carry on (evolve.engine.memory), so a resume's
    time does not grow with the history. ``memory=False`` leaves that memory on disk too (``evens status``);
    ``proposed_hashes=False`` leaves the networks proposed in ``checkpoint.proposed`` (the memory as the state file holds
    it, for ``evens select`` to write back), where a resume reads them into the memory.
    """
    with open_state_file(path) as f:
        return load_open(f, path, weights, say, history, memory, proposed_hashes)


def open_state_file(path: str) -> h5py.File:
    """The state file at ``path``, open for reading; :class:`RunDirError` if it cannot be opened."""
    try:
        return h5py.File(path, "r")
    except (OSError, FileNotFoundError) as exc:
        raise RunDirError(f"{path}: not a readable checkpoint ({exc})") from None


def load_open(f: h5py.File, path: str, weights: bool = True, say: Callable[[str], None] | None = None, history: bool = True,
              memory: bool = True, proposed_hashes: bool = True, segments=None) -> tuple[SearchState, RunInfo]:
    """:func:`load` from the state file ``f``, open (at ``path``); with ``history``, the records from ``segments`` (a
    :class:`evolve.runfile.history.History` of the segments ``f`` lists, open) where given, else from the files named."""
    dropped: list[str] = []
    try:
        check_format(f, path)
        state, info = _read(f, weights, dropped, history, memory, segments)
        if memory and proposed_hashes and not history:  # the networks proposed, where the memory keeps them in their own file
            state.memory = proposed.filled(proposed.proposed_path(path), state.memory)
        merge_into(path, state, len(info.gene_names))
        _check_consistent(state, info)
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, OSError, RuntimeError) as exc:  # (h5py: RuntimeError for some damaged headers)
        raise RunDirError(f"{path}: damaged checkpoint ({type(exc).__name__}: {exc})") from None
    if dropped:
        (say or logging.getLogger("evens").warning)(_dropped_line(path, dropped, len(state.hall_of_fame)))
    return state, info


def _dropped_line(path: str, dropped: list[str], kept: int) -> str:
    """One line saying which members left the hall of fame and why (``dropped``: as read_ensemble notes them)."""
    members = [d for d in dropped if d.startswith("member ")]
    notes = "".join(f"; {d}" for d in dropped if not d.startswith("member "))
    return f"{path}: {'; '.join(members)}: dropped from the hall of fame, which keeps the other {kept} member{'s' * (kept != 1)}{notes}"


def check_format(f: h5py.File, path: str) -> None:
    """``RunDirError`` unless ``f`` is a run file of this format; ``ValueError`` if its seal fails (checked
    first where there is one: a damaged version is damage, not another format)."""
    sealed = store.SEAL in f.attrs
    if sealed:
        store.check_seal(f, "/ (the run's attributes and /rng)", ROOT_OWN)
    if f.attrs.get("format") != FORMAT:
        raise RunDirError(f"{path}: not an evens checkpoint")
    if "format_version" not in f.attrs:
        raise RunDirError(f"{path}: not an evens checkpoint (no format version)")
    version = int(f.attrs["format_version"])
    if version != FORMAT_VERSION or json.loads(f.attrs.get("schema", "null")) != SCHEMA:
        written = f"format {version}" if version != FORMAT_VERSION else f"format {version} with another record layout"
        raise RunDirError(f"{path}: a run file of {written}; this evens reads format {FORMAT_VERSION} only (start a new run)")
    if not sealed:
        raise ValueError("/ has lost its checksum")


def _check_consistent(state: SearchState, info: RunInfo) -> None:
    """``ValueError`` unless the parts of a loaded run fit together: what a hand-edited file gets wrong."""
    if info.config.space is None:
        raise ValueError("its config holds no search space")
    if list(info.config.space.names) != list(info.gene_names):
        raise ValueError("its gene names are not its config's search space")
    recorded = [r.id for r in state.records] or (state.recent_ids if state.dropped else [])  # no history read: the last checkpoint's
    out = [p.id for p in state.pending]
    if len(set(recorded)) != len(recorded) or len(set(out)) != len(out) or set(recorded) & set(out):
        raise ValueError("an evaluation id is recorded or pending twice")
    if set(state.folding) - set(out):
        raise ValueError(f"fold trainings are kept for evaluations {sorted(set(state.folding) - set(out))[:5]} that are not pending")
    if state.next_id <= max(recorded + out, default=-1):
        raise ValueError(f"next_id {state.next_id} is not past every evaluation id")
    named = {key: state.strategy.get(key, []) for key in ("population", "told", "front")}
    unknown = sorted({i for ids in named.values() for i in ids} - set(recorded)) if state.records or not state.dropped else []
    if unknown:
        raise ValueError(f"the strategy's state names evaluations {unknown[:5]} that are not recorded")


def _config(text: str) -> Config:
    try:
        return config_from_dict(json.loads(text))
    except ConfigError as exc:
        raise ValueError(f"its config: {exc}") from None


def _tally(f: h5py.File, n_genes: int) -> Tally | None:
    """The account of every record the state file holds (None in a run file from before it was kept)."""
    if "tally" not in f.attrs:
        return None
    best = None
    if "best" in f:
        store.check_seal(f["best"], "/best")
        [best] = table.decode(read_columns(f["best"]), Record, n_genes)
    return Tally.from_state(json.loads(f.attrs["tally"]), best)


def _read(f: h5py.File, weights: bool, dropped: list[str], history: bool = True, master: bool = True,
          segments=None) -> tuple[SearchState, RunInfo]:
    """The run in ``f`` (whose format and seal :func:`check_format` checked); damaged members are left out and
    named in ``dropped``. Without ``history``, no records: see :func:`load`; ``segments``: see :func:`load_open`."""
    seg = f["segments"]
    folder = segments_folder(f.filename)
    listed = listed_in(f)
    if segments is not None and segments.listed != listed:
        raise ValueError("the segments given are not the ones this state file lists")
    # the segments' bytes first, while a job writing the run has not yet removed what this file lists
    data = (snapshot(folder, listed) if segments is None else segments.contents()) if history else []
    memory: dict[str, np.ndarray] = {}
    if master and "master" in f:
        store.check_seal(f["master"], "/master")
        memory = {name: item[...] for name, item in f["master"].items()}
    store.check_seal(f["pending"], "/pending")
    rng = random.Random()
    gauss = float(f["rng"].attrs["gauss_next"])
    rng.setstate((int(f["rng"].attrs["version"]), tuple(int(v) for v in f["rng"][...]), None if np.isnan(gauss) else gauss))

    pending = table.decode(read_columns(f["pending"]), Pending, len(json.loads(f.attrs["gene_names"])))
    stored = read_ensemble(f[GROUP], "all" if weights else "none", dropped)
    records: list[Record] = []
    genes = len(json.loads(f.attrs["gene_names"]))
    for segment, raw in zip(listed, data):
        records += read_segment(folder, segment, genes, raw)
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
        dispatch=json.loads(f.attrs["dispatch"]),
        folding=read_folding(f),
        memory=memory,
        tally=_tally(f, genes),
        recent_ids=[int(i) for i in seg["recent_ids"][...]] if "recent_ids" in seg else [],
    )
    if not history:
        state.dropped, state.dropped_last_id = sum(s.rows for s in listed), int(seg.attrs["last_id"])
    info = RunInfo(
        config=_config(f.attrs["config"]),
        gene_names=json.loads(f.attrs["gene_names"]),
        data=json.loads(f.attrs["data"]),
        val_y=stored.val_y,
        test_y=stored.test_y,
        wall_seconds=float(f.attrs["wall_seconds"]),
        sessions=int(f.attrs["sessions"]),
        version=str(f.attrs["evens_version"]),
        preset=json.loads(f.attrs["preset"]),
    )
    return state, info
