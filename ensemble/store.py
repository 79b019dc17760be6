"""The ensemble's part of a run file: the hall of fame with weights, and the chosen ensemble.

One HDF5 group (``/ensemble`` in a run's ``checkpoint.h5``) holds everything
needed to apply the ensemble to new data or to choose it again, with nothing but
numbers, strings and JSON, so loading it executes no code (no pickle, no
``torch.load``)::

    /ensemble            attrs: format, format_version, problem (JSON), sample_shape (JSON),
                                x_dtype, capacity, selection (JSON, or "" before the first)
    /ensemble/labels     val, test: the splits' labels or targets, to score members and ensembles
    /ensemble/members/<id>   attrs: fitness, network (JSON), training (JSON), checksums (JSON)
        val_pred, test_pred  float32 (N, outputs): the member's predictions
        weights/<name>       its trained state dict, one dataset per tensor, under its own name

Every array carries HDF5's Fletcher-32, which catches a damaged chunk; ``checksums``
is [CRC-32 of the predictions, CRC-32 of the weights], each over the arrays' names, dtypes, shapes
and bytes, checked as they are read. It catches what Fletcher-32 cannot: damage to the file's
metadata that makes HDF5 miss a chunk (read as zeros, with no error) or read the bytes as another
dtype or shape (found by fuzzing the run file: scripts/tools/fuzz_run_file.py).

Member groups are written once and never change, so a checkpoint can add and
drop them without rewriting the rest.
"""
from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass

import h5py
import numpy as np

from .hall_of_fame import HallOfFame, Member
from .problem import Problem, problem_from_dict
from .select import METHODS, Selection

FORMAT = "evens-ensemble"
FORMAT_VERSION = 4  # the one format this evens reads; any change to the group bumps it (4: the problem names its metric)
GROUP = "ensemble"
RUN_FILE_NAME = "checkpoint.h5"  # the run file in a run directory, which holds GROUP
X_DTYPES = ("float32", "uint8")  # what the data reader produces, and so what networks were trained on


class EnsembleError(ValueError):
    """A stored ensemble, or the inputs given to it, cannot be used: a one-line message for the user."""


@dataclass
class StoredEnsemble:
    """Everything in the ensemble group."""

    problem: Problem
    sample_shape: tuple[int, ...]
    x_dtype: str
    val_y: np.ndarray
    test_y: np.ndarray
    hall_of_fame: HallOfFame
    selection: Selection | None = None


def write_ensemble(group: h5py.Group, stored: StoredEnsemble) -> None:
    """Fill an empty group with ``stored``.

    Refuses a hall of fame read without its weights: writing it would lose them.
    """
    _refuse_unloaded(list(stored.hall_of_fame))
    write_header(group, stored)
    labels = group.create_group("labels")
    checksummed(labels, "val", stored.val_y)
    checksummed(labels, "test", stored.test_y)
    add_members(group.create_group("members"), list(stored.hall_of_fame))


def write_header(group: h5py.Group, stored: StoredEnsemble) -> None:
    """The group's attributes (everything but the labels and the members); those there are replaced."""
    group.attrs.update(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        problem=json.dumps(stored.problem.to_dict()),
        sample_shape=json.dumps(list(stored.sample_shape)),
        x_dtype=stored.x_dtype,
        capacity=stored.hall_of_fame.capacity,
        selection=json.dumps(stored.selection.to_dict()) if stored.selection else "",
    )


def add_members(members: h5py.Group, added: list[Member]) -> None:
    """Write each of ``added`` into ``members`` (the group ``/ensemble/members``), under its id."""
    _refuse_unloaded(added)
    for m in added:
        g = members.create_group(str(m.id))
        val, test = np.asarray(m.val_pred, dtype=np.float32), np.asarray(m.test_pred, dtype=np.float32)
        g.attrs.update(fitness=m.fitness, network=json.dumps(m.network), training=json.dumps(m.training),
                      checksums=json.dumps(member_checksums(val, test, m.weights)))
        checksummed(g, "val_pred", val)
        checksummed(g, "test_pred", test)
        w = g.create_group("weights")
        for name, array in m.weights.items():
            checksummed(w, name, array)


def member_checksums(val_pred: np.ndarray, test_pred: np.ndarray, weights: dict[str, np.ndarray]) -> list[int]:
    """A member's ``checksums`` attribute: [CRC-32 of its predictions, CRC-32 of its weights] (see :func:`_crc`)."""
    return [_crc({"val_pred": val_pred, "test_pred": test_pred}), _crc(weights)]


def _crc(arrays: dict[str, np.ndarray]) -> int:
    """CRC-32 of named arrays, in name order: each one's name, dtype (byte order included), shape and bytes."""
    crc = 0
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        crc = zlib.crc32(f"{name}:{a.dtype.str}:{a.shape}".encode(), crc)
        crc = zlib.crc32(np.ascontiguousarray(a).data, crc)
    return crc


def _refuse_unloaded(members: list[Member]) -> None:
    unloaded = [m.id for m in members if m.weights is None]
    if unloaded:
        raise ValueError(f"members {unloaded} were read without their weights; writing them would lose the weights")


def checksummed(group: h5py.Group, name: str, array) -> None:
    """A dataset with HDF5's Fletcher-32 checksum, which HDF5 verifies on every read: a damaged byte
    is an error, never a changed weight. (Empty arrays cannot be chunked, so they go without.)"""
    array = np.asarray(array)
    group.create_dataset(name, data=array, fletcher32=array.size > 0 and array.ndim > 0)


def read_ensemble(group: h5py.Group, weights_of: str | list[int] = "all") -> StoredEnsemble:
    """Read an ensemble group; ``weights_of`` is "all", "none" or the member ids whose weights to load.

    Raises ``ValueError``, ``KeyError`` or ``OSError`` for a group that is not one or is damaged.
    """
    if group.attrs.get("format") != FORMAT:
        raise ValueError(f"{group.name} is not an evens ensemble")
    version = int(group.attrs["format_version"])
    if version != FORMAT_VERSION:
        raise ValueError(f"ensemble format {version} is not the format this evens reads ({FORMAT_VERSION})")
    problem = problem_from_dict(json.loads(group.attrs["problem"]))
    wanted = None if weights_of == "all" else set() if weights_of == "none" else set(weights_of)
    members = []
    for key, g in group["members"].items():
        ident = int(key)
        weights = None
        if wanted is None or ident in wanted:
            weights = {name: d[...] for name, d in g["weights"].items()}
        val, test = g["val_pred"][...], g["test_pred"][...]
        stored_preds, stored_weights = (int(c) for c in json.loads(g.attrs["checksums"]))
        preds, of_weights = member_checksums(val, test, weights or {})
        if preds != stored_preds:
            raise ValueError(f"member {ident}: its predictions do not match their checksum")
        if weights and of_weights != stored_weights:  # (none at all: refused later, as "no stored weights")
            raise ValueError(f"member {ident}: its weights do not match their checksum")
        members.append(
            Member(id=ident, fitness=float(g.attrs["fitness"]), network=dict(json.loads(g.attrs["network"])),
                   training=dict(json.loads(g.attrs["training"])), val_pred=val, test_pred=test, weights=weights)
        )
    selection = group.attrs["selection"]
    stored = StoredEnsemble(
        problem=problem,
        sample_shape=tuple(int(s) for s in json.loads(group.attrs["sample_shape"])),
        x_dtype=str(group.attrs["x_dtype"]),
        val_y=group["labels"]["val"][...],
        test_y=group["labels"]["test"][...],
        hall_of_fame=HallOfFame(int(group.attrs["capacity"]), members),
        selection=Selection.from_dict(json.loads(selection)) if selection else None,
    )
    check_consistent(stored)
    return stored


def check_consistent(stored: StoredEnsemble) -> None:
    """Raise ``ValueError`` unless the parts of a stored ensemble fit together (a hand-edited or
    damaged file is refused here, in one line, rather than failing somewhere later)."""
    if stored.x_dtype not in X_DTYPES:
        raise ValueError(f"x_dtype {stored.x_dtype!r} is not one of {', '.join(X_DTYPES)}")
    if not stored.sample_shape or min(stored.sample_shape) < 1:
        raise ValueError(f"sample shape {stored.sample_shape} is not a shape")
    problem = stored.problem
    for split, y in (("val", stored.val_y), ("test", stored.test_y)):
        if y.shape[1:] != problem.target_shape or len(y) == 0:
            raise ValueError(f"labels/{split} has shape {y.shape}, which does not fit a {problem.kind} problem")
        if problem.kind == "classification" and (y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= problem.num_classes):
            raise ValueError(f"labels/{split} are not class indices below {problem.num_classes}")
        if problem.kind == "regression" and not np.isfinite(y).all():
            raise ValueError(f"labels/{split} hold NaN or infinite targets")
    for m in stored.hall_of_fame:
        for split, pred, y in (("val", m.val_pred, stored.val_y), ("test", m.test_pred, stored.test_y)):
            if pred.shape != (len(y), problem.outputs):
                raise ValueError(f"member {m.id}: {split}_pred has shape {pred.shape}, expected {(len(y), problem.outputs)}")
        for name, w in (m.weights or {}).items():
            if w.dtype.kind not in "biuf":
                raise ValueError(f"member {m.id}: weight {name!r} holds {w.dtype}, not numbers")
    sel = stored.selection
    if sel is not None:
        if sel.method not in METHODS or not 1 <= sel.picks <= len(sel.path) or not (len(sel.curve_val) == len(sel.curve_test) == len(sel.path)):
            raise ValueError(f"the stored selection is inconsistent (method {sel.method!r}, {sel.picks} picks of {len(sel.path)})")
        missing = set(sel.path) - set(stored.hall_of_fame.ids)
        if missing:
            raise ValueError(f"the stored selection names members {sorted(missing)} that the hall of fame does not hold")


def run_file(path: str) -> str:
    """The run file of a run directory, or ``path`` itself if it names a file."""
    return os.path.join(path, RUN_FILE_NAME) if os.path.isdir(path) else path
