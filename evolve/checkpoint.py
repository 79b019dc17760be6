"""The run's checkpoint: one HDF5 file with everything needed to resume, report and predict.

Layout::

    /                attrs: format, format_version, evens_version, config (JSON),
                     gene_names (JSON), data (JSON: shapes, problem, sizes), next_id,
                     busy_seconds, capacity_seconds, wall_seconds, sessions,
                     strategy (JSON: the strategy's population and its own state)
    /rng             the master's random.Random state (uint32[625]; attrs version, gauss_next)
    /evaluations/*   one column per field of :class:`~evolve.master.Record` (genome and
                     parents as 2-D arrays), and /evaluations/metrics/<name> per metric
                     (NaN where an evaluation has none)
    /pending/*       individuals sent out but not finished: id, genome, parents, operators
    /ensemble        the hall of fame with weights, the labels, and the chosen ensemble
                     (written by :mod:`ensemble.store`, which documents it)

Only numbers, strings and JSON are stored: loading executes nothing. Writes go
to a temporary file in the same directory, are synced, and then renamed over
the old checkpoint, so a crash leaves either the old or the new file, whole.
"""
from __future__ import annotations

import json
import math
import os
import random
import typing
from dataclasses import dataclass, fields

import h5py
import numpy as np

from ensemble.problem import problem_from_dict
from ensemble.store import GROUP, RUN_FILE_NAME, StoredEnsemble, read_ensemble, write_ensemble

from .errors import RunDirError
from .master import SearchState
from .records import Pending, Record

FORMAT = "evens-checkpoint"
FORMAT_VERSION = 4
CHECKPOINT_NAME = RUN_FILE_NAME
_STR = h5py.string_dtype()
_CURVE = h5py.vlen_dtype(np.float64)  # one float per epoch trained, a row per evaluation


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


# Record fields by type: how each is stored as a column, and read back.
_RECORD_TYPES = typing.get_type_hints(Record)
_SCALARS = {int: (np.int64, int), float: (np.float64, float)}


def _write_records(group: h5py.Group, records: list[Record], n_genes: int) -> None:
    n = len(records)
    for f in fields(Record):
        values = [getattr(r, f.name) for r in records]
        kind = _RECORD_TYPES[f.name]
        if f.name == "genome":
            group[f.name] = np.asarray(values, dtype=np.float64).reshape(n, n_genes)
        elif f.name == "parents":
            group[f.name] = np.asarray(values, dtype=np.int64).reshape(n, 2)
        elif f.name == "curve":
            rows = np.empty(n, dtype=object)  # filled one by one: numpy would stack rows of equal length into 2-D
            for i, v in enumerate(values):
                rows[i] = np.asarray(v, dtype=np.float64)
            group.create_dataset(f.name, (n,), dtype=_CURVE, data=rows if n else None)
        elif f.name == "metrics":
            metrics = group.create_group("metrics")
            for name in sorted({k for r in records for k in r.metrics}):
                metrics[name] = np.asarray([r.metrics.get(name, math.nan) for r in records], dtype=np.float64)
        elif kind is str:
            group.create_dataset(f.name, data=np.asarray(values, dtype=object), dtype=_STR)
        else:
            group[f.name] = np.asarray(values, dtype=_SCALARS[kind][0])


def _read_records(group: h5py.Group) -> list[Record]:
    columns = {}
    for f in fields(Record):
        kind = _RECORD_TYPES[f.name]
        if f.name == "genome":
            columns[f.name] = [[float(g) for g in row] for row in group[f.name][...]]
        elif f.name == "parents":
            columns[f.name] = [(int(a), int(b)) for a, b in group[f.name][...]]
        elif f.name == "curve":
            columns[f.name] = [[float(v) for v in row] for row in group[f.name][...]]
        elif f.name == "metrics":
            named = {name: group["metrics"][name][...] for name in group["metrics"]}
            n = len(group["id"])
            columns[f.name] = [{k: float(v[i]) for k, v in named.items() if not math.isnan(v[i])} for i in range(n)]
        elif kind is str:
            columns[f.name] = [str(v) for v in group[f.name].asstr()[...]]
        else:
            columns[f.name] = [_SCALARS[kind][1](v) for v in group[f.name][...]]
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"the evaluation columns have different lengths ({lengths})")
    return [Record(**dict(zip(columns, row))) for row in zip(*columns.values())]


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


def save(path: str, state: SearchState, info: RunInfo) -> None:
    """Write the checkpoint atomically (temporary file, fsync, rename)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    n_genes = len(info.gene_names)
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs.update(
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
            rng = f.create_dataset("rng", data=np.asarray(internal, dtype=np.uint32))
            rng.attrs["version"] = version
            rng.attrs["gauss_next"] = np.nan if gauss is None else gauss

            _write_records(f.create_group("evaluations"), state.records, n_genes)
            pend = f.create_group("pending")
            pend["id"] = np.asarray([p.id for p in state.pending], dtype=np.int64)
            pend["genome"] = np.asarray([p.genome for p in state.pending], dtype=np.float64).reshape(len(state.pending), n_genes)
            pend["parents"] = np.asarray([p.parents for p in state.pending], dtype=np.int64).reshape(len(state.pending), 2)
            pend.create_dataset("operators", data=np.asarray([p.operators for p in state.pending], dtype=object), dtype=_STR)
            write_ensemble(f.create_group(GROUP), stored_ensemble(state, info))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _sync_directory(os.path.dirname(os.path.abspath(path)))  # make the rename itself durable
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


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
        if version < FORMAT_VERSION:
            raise RunDirError(f"{path}: checkpoint format {version} is from an older evens; start a new run")
        try:
            return _read(f, weights)
        except (KeyError, ValueError, TypeError, IndexError, AttributeError, OSError) as exc:
            raise RunDirError(f"{path}: damaged checkpoint ({type(exc).__name__}: {exc})") from None


def _read(f: h5py.File, weights: bool) -> tuple[SearchState, RunInfo]:
    rng = random.Random()
    gauss = float(f["rng"].attrs["gauss_next"])
    rng.setstate((int(f["rng"].attrs["version"]), tuple(int(v) for v in f["rng"][...]), None if np.isnan(gauss) else gauss))

    pend = f["pending"]
    pending = [
        Pending(int(i), [float(g) for g in genome], (int(p[0]), int(p[1])), str(ops))
        for i, genome, p, ops in zip(pend["id"][...], pend["genome"][...], pend["parents"][...], pend["operators"].asstr()[...])
    ]
    stored = read_ensemble(f[GROUP], "all" if weights else "none")
    state = SearchState(
        rng=rng,
        records=_read_records(f["evaluations"]),
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
