"""The run's checkpoint: one HDF5 file with everything needed to resume and report.

Layout::

    /                attrs: format, format_version, evens_version, config (JSON),
                     gene_names (JSON), data (JSON: shapes, classes), next_id,
                     busy_seconds, capacity_seconds, wall_seconds, sessions
    /rng             the master's random.Random state (uint32[625]; attrs version, gauss_next)
    /evaluations/*   one row per finished evaluation: id, genome, parents, status,
                     val_accuracy, val_loss, test_accuracy, seconds, epochs_done,
                     worker, started, finished, message
    /population      record ids in the current population
    /pending/*       individuals sent out but not finished: id, genome, parents
    /members/*       the best K so far: id, val_accuracy, val_probs, test_probs
    /labels/val, /labels/test   true classes, so reports need no data file

Only numbers, strings and JSON are stored: loading executes nothing. Writes go
to a temporary file in the same directory, are synced, and then renamed over
the old checkpoint, so a crash leaves either the old or the new file, whole.
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, fields

import h5py
import numpy as np

from .errors import RunDirError
from .master import Member, Pending, Record, SearchState

FORMAT = "evens-checkpoint"
FORMAT_VERSION = 1
CHECKPOINT_NAME = "checkpoint.h5"
_STR = h5py.string_dtype()


@dataclass
class RunInfo:
    """The run-level facts stored beside the search state."""

    config: dict
    gene_names: list[str]
    data: dict  # sample_shape, num_classes, x_dtype, sizes, path
    val_labels: np.ndarray
    test_labels: np.ndarray
    wall_seconds: float = 0.0
    sessions: int = 0
    version: str = ""


def _column(records: list, name: str):
    return [getattr(r, name) for r in records]


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
            )
            version, internal, gauss = state.rng.getstate()
            rng = f.create_dataset("rng", data=np.asarray(internal, dtype=np.uint32))
            rng.attrs["version"] = version
            rng.attrs["gauss_next"] = np.nan if gauss is None else gauss

            ev = f.create_group("evaluations")
            recs = state.records
            ev["id"] = np.asarray(_column(recs, "id"), dtype=np.int64)
            ev["genome"] = np.asarray(_column(recs, "genome"), dtype=np.float64).reshape(len(recs), n_genes)
            ev["parents"] = np.asarray(_column(recs, "parents"), dtype=np.int64).reshape(len(recs), 2)
            for name in ("val_accuracy", "val_loss", "test_accuracy", "seconds", "started", "finished"):
                ev[name] = np.asarray(_column(recs, name), dtype=np.float64)
            for name in ("epochs_done", "worker"):
                ev[name] = np.asarray(_column(recs, name), dtype=np.int64)
            for name in ("status", "message"):
                ev.create_dataset(name, data=np.asarray(_column(recs, name), dtype=object), dtype=_STR)

            f["population"] = np.asarray(state.population, dtype=np.int64)
            pend = f.create_group("pending")
            pend["id"] = np.asarray([p.id for p in state.pending], dtype=np.int64)
            pend["genome"] = np.asarray([p.genome for p in state.pending], dtype=np.float64).reshape(len(state.pending), n_genes)
            pend["parents"] = np.asarray([p.parents for p in state.pending], dtype=np.int64).reshape(len(state.pending), 2)

            mem = f.create_group("members")
            k = len(state.members)
            mem["id"] = np.asarray([m.id for m in state.members], dtype=np.int64)
            mem["val_accuracy"] = np.asarray([m.val_accuracy for m in state.members], dtype=np.float64)
            n_classes = int(info.data["num_classes"])
            mem["val_probs"] = np.asarray([m.val_probs for m in state.members], dtype=np.float32).reshape(k, len(info.val_labels), n_classes)
            mem["test_probs"] = np.asarray([m.test_probs for m in state.members], dtype=np.float32).reshape(k, len(info.test_labels), n_classes)

            labels = f.create_group("labels")
            labels["val"] = np.asarray(info.val_labels, dtype=np.int64)
            labels["test"] = np.asarray(info.test_labels, dtype=np.int64)
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


def load(path: str) -> tuple[SearchState, RunInfo]:
    """Read a checkpoint written by :func:`save`. Raises :class:`RunDirError` if it is not one."""
    try:
        f = h5py.File(path, "r")
    except (OSError, FileNotFoundError) as exc:
        raise RunDirError(f"{path}: not a readable checkpoint ({exc})") from None
    with f:
        if f.attrs.get("format") != FORMAT:
            raise RunDirError(f"{path}: not an evens checkpoint")
        try:
            if int(f.attrs["format_version"]) > FORMAT_VERSION:
                raise RunDirError(f"{path}: checkpoint format {f.attrs['format_version']} is newer than this evens reads")
            return _read(f)
        except (KeyError, ValueError, TypeError, IndexError, OSError) as exc:
            raise RunDirError(f"{path}: damaged checkpoint ({type(exc).__name__}: {exc})") from None


def _read(f: h5py.File) -> tuple[SearchState, RunInfo]:
    rng = random.Random()
    gauss = float(f["rng"].attrs["gauss_next"])
    rng.setstate((int(f["rng"].attrs["version"]), tuple(int(v) for v in f["rng"][...]), None if np.isnan(gauss) else gauss))

    ev = f["evaluations"]
    cols = {name: ev[name][...] for name in ev if name not in ("status", "message")}
    cols["status"] = ev["status"].asstr()[...]
    cols["message"] = ev["message"].asstr()[...]
    records = []
    for i in range(len(cols["id"])):
        values = {}
        for fld in fields(Record):
            v = cols[fld.name][i]
            if fld.name == "genome":
                v = [float(g) for g in v]
            elif fld.name == "parents":
                v = (int(v[0]), int(v[1]))
            elif fld.name in ("id", "epochs_done", "worker"):
                v = int(v)
            elif fld.name in ("status", "message"):
                v = str(v)
            else:
                v = float(v)
            values[fld.name] = v
        records.append(Record(**values))

    pend = f["pending"]
    pending = [
        Pending(int(i), [float(g) for g in genome], (int(p[0]), int(p[1])))
        for i, genome, p in zip(pend["id"][...], pend["genome"][...], pend["parents"][...])
    ]
    mem = f["members"]
    members = [
        Member(int(i), float(acc), vp, tp)
        for i, acc, vp, tp in zip(mem["id"][...], mem["val_accuracy"][...], mem["val_probs"][...], mem["test_probs"][...])
    ]
    state = SearchState(
        rng=rng,
        records=records,
        population=[int(i) for i in f["population"][...]],
        pending=pending,
        members=members,
        next_id=int(f.attrs["next_id"]),
        busy_seconds=float(f.attrs["busy_seconds"]),
        capacity_seconds=float(f.attrs["capacity_seconds"]),
    )
    info = RunInfo(
        config=json.loads(f.attrs["config"]),
        gene_names=json.loads(f.attrs["gene_names"]),
        data=json.loads(f.attrs["data"]),
        val_labels=f["labels"]["val"][...],
        test_labels=f["labels"]["test"][...],
        wall_seconds=float(f.attrs["wall_seconds"]),
        sessions=int(f.attrs["sessions"]),
        version=str(f.attrs["evens_version"]),
    )
    return state, info
