"""The ensemble's part of a run file: the hall of fame with weights, and the chosen ensemble.

One HDF5 group (``/ensemble`` in a run's ``checkpoint.h5``) holds everything
needed to apply the ensemble to new data or to choose it again, with nothing but
numbers, strings and JSON, so loading it executes no code (no pickle, no
``torch.load``)::

    /ensemble            attrs: format, format_version, problem (JSON), sample_shape (JSON),
                                x_dtype, capacity, selection (JSON, or "" before the first),
                                members (JSON: the ids of the members, best first), crc32
    /ensemble/labels     val, test: the splits' labels or targets, to score members and ensembles (attr crc32)
    /ensemble/members/<id>   attrs: fitness, loss (validation log-loss: the tie-break), network (JSON), training (JSON),
                                checksums (JSON), crc32
        val_pred, test_pred  float32 (N, outputs): the member's predictions
        weights/<name>       its trained state dict, one dataset per tensor, under its own name

Every array carries HDF5's Fletcher-32, which catches a damaged chunk; ``checksums``
is [CRC-32 of the predictions, CRC-32 of the weights], each over the arrays' names, dtypes, shapes
and bytes, checked as they are read. It catches what Fletcher-32 cannot: damage to the file's
metadata that makes HDF5 miss a chunk (read as zeros, with no error) or read the bytes as another
dtype or shape (found by fuzzing the run file: scripts/tools/fuzz_run_file.py).

Attributes have no Fletcher-32, so each group carries a *seal* (:func:`seal`): the attribute ``crc32``,
a CRC-32 over its other attributes and the datasets below it (names, dtypes, shapes, bytes), checked
before anything in it is used. Checksums catch damage, not a crafted file: the checks of what the
parts hold (:func:`check_consistent`) still stand behind them.

Member groups are written once and never change, so a checkpoint can add and
drop them without rewriting the rest. A damaged member is named; a run can leave it out
(``read_ensemble(..., dropped=[])``) where prediction refuses the file.
"""
from __future__ import annotations

import dataclasses
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
FORMAT_VERSION = 6  # the one format this evens reads; any change to the group bumps it (6: each member's validation loss, its tie-break)
GROUP = "ensemble"
RUN_FILE_NAME = "checkpoint.h5"  # the run file in a run directory, which holds GROUP
X_DTYPES = ("float32", "uint8")  # what the data reader produces, and so what networks were trained on
SEAL = "crc32"  # the attribute that seals a group (see seal)
HEADER_OWN = ("labels", "members")  # what the ensemble group's seal leaves to their own seals
MEMBER_OWN = ("val_pred", "test_pred", "weights")  # what a member's seal leaves to its ``checksums`` attribute
# What reading a damaged part of a file raises (h5py: OSError for a failed filter, RuntimeError for some headers)
DAMAGE = (KeyError, ValueError, TypeError, AttributeError, OSError, RuntimeError)


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
    made_with: str = ""  # the run's model.path: where its search imported a builder from (named in errors, never imported from)


def write_ensemble(group: h5py.Group, stored: StoredEnsemble) -> None:
    """Fill an empty group with ``stored``.

    Refuses a hall of fame read without its weights: writing it would lose them.
    """
    _refuse_unloaded(list(stored.hall_of_fame))
    labels = group.create_group("labels")
    checksummed(labels, "val", stored.val_y)
    checksummed(labels, "test", stored.test_y)
    seal(labels)
    add_members(group.create_group("members"), list(stored.hall_of_fame))
    write_header(group, stored)


def write_header(group: h5py.Group, stored: StoredEnsemble) -> None:
    """The group's attributes (everything but the labels and the members), sealed; those there are replaced."""
    attrs = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "problem": json.dumps(stored.problem.to_dict()),
        "sample_shape": json.dumps(list(stored.sample_shape)),
        "x_dtype": stored.x_dtype,
        "capacity": stored.hall_of_fame.capacity,
        "selection": json.dumps(stored.selection.to_dict()) if stored.selection else "",
        "members": json.dumps(stored.hall_of_fame.ids),
    }
    group.attrs.update(attrs)
    seal(group, HEADER_OWN, attrs=attrs if set(group.attrs) == set(attrs) | {SEAL} else None)  # (else: read them all)


def add_members(members: h5py.Group, added: list[Member]) -> None:
    """Write each of ``added`` into ``members`` (the group ``/ensemble/members``), under its id."""
    _refuse_unloaded(added)
    for m in added:
        g = members.create_group(str(m.id))
        val, test = np.asarray(m.val_pred, dtype=np.float32), np.asarray(m.test_pred, dtype=np.float32)
        attrs = {"fitness": float(m.fitness), "loss": float(m.loss), "network": json.dumps(m.network), "training": json.dumps(m.training),
                 "checksums": json.dumps(member_checksums(val, test, m.weights))}
        g.attrs.update(attrs)
        checksummed(g, "val_pred", val)
        checksummed(g, "test_pred", test)
        w = g.create_group("weights")
        for name, array in m.weights.items():
            checksummed(w, name, array)
        seal(g, MEMBER_OWN, attrs=attrs)


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


def _value_bytes(value) -> bytes:
    """An attribute's or dataset's value as bytes that differ whenever the value, its type or its shape does."""
    if isinstance(value, str):
        return b"s" + value.encode("utf-8", "surrogateescape")
    if isinstance(value, bytes):
        return b"b" + value
    a = np.asarray(value)
    if a.dtype.kind == "O":  # strings of variable length, element by element
        return b"o" + repr(a.shape).encode() + b"".join(_framed(_value_bytes(v)) for v in a.ravel().tolist())
    return f"{a.dtype.str}{a.shape}".encode() + b"\0" + np.ascontiguousarray(a).tobytes()


def _framed(data: bytes) -> bytes:
    return len(data).to_bytes(8, "little") + data


def _datasets(group: h5py.Group, own: tuple[str, ...], prefix: str = ""):
    """(relative name, dataset) of every dataset below ``group``, in name order, except under the names ``own``."""
    for key in sorted(group):
        if key in own:
            continue
        item = group[key]
        if isinstance(item, h5py.Group):
            yield from _datasets(item, (), f"{prefix}{key}/")
        else:
            yield f"{prefix}{key}", item


def _seal_crc(obj, own: tuple[str, ...], arrays: dict | None, attrs: dict | None = None) -> int:
    """CRC-32 over ``obj``'s attributes but its seal (``attrs``: their values as just written, not read
    back), then each dataset below it (see :func:`seal`): its attributes, dtype, shape and bytes (taken
    from ``arrays`` where given there, already read)."""
    crc = 0
    if attrs is None:
        attrs = {key: obj.attrs[key] for key in obj.attrs if key != SEAL}
    parts = [("", obj)] if isinstance(obj, h5py.Dataset) else [("", None)] + list(_datasets(obj, own))
    for name, dataset in parts:
        values = attrs if dataset is None or dataset is obj else dataset.attrs
        for key in sorted(values):
            if key != SEAL:
                crc = zlib.crc32(_framed(f"{name}@{key}".encode()) + _framed(_value_bytes(values[key])), crc)
        if dataset is not None:
            value = (arrays or {}).get(name)
            crc = zlib.crc32(_framed(name.encode()) + _framed(_value_bytes(dataset[()] if value is None else value)), crc)
    return crc


def seal(obj, own: tuple[str, ...] = (), arrays: dict | None = None, attrs: dict | None = None) -> None:
    """Seal a group or dataset as it is now: its attribute ``crc32`` covers its other attributes and every
    dataset below it but those under the subgroups ``own`` (which carry their own seals or checksums).
    ``arrays``, ``attrs``: datasets' contents by relative name, and all of ``obj``'s attributes, as the
    caller just wrote them (not read back: reading attributes costs h5py about 50 us each)."""
    obj.attrs[SEAL] = _seal_crc(obj, own, arrays, attrs)


def seal_holds(obj, own: tuple[str, ...] = (), arrays: dict | None = None) -> bool:
    """Does ``obj`` still match its seal? (False without one.)"""
    stored = obj.attrs.get(SEAL)
    return stored is not None and int(stored) == _seal_crc(obj, own, arrays)


def check_seal(obj, what: str, own: tuple[str, ...] = (), arrays: dict | None = None) -> None:
    """``ValueError`` naming ``what`` unless ``obj`` matches its seal."""
    if not seal_holds(obj, own, arrays):
        raise ValueError(f"the checksum over {what} does not match (changed or damaged)")


def read_ensemble(group: h5py.Group, weights_of: str | list[int] = "all", dropped: list[str] | None = None) -> StoredEnsemble:
    """Read an ensemble group; ``weights_of`` is "all", "none", "chosen" (the stored selection's members: ids and
    weights from one reading of the group, so a run a job is checkpointing cannot give one version's ids and another's
    weights) or the member ids whose weights to load.

    A damaged member (its attributes, predictions or weights) is an error naming it; with ``dropped`` (a
    list), it is left out of the hall of fame instead and a line saying why is appended there (with the
    stored selection, if that held it). Raises ``ValueError``, ``KeyError`` or ``OSError`` for a group
    that is not one or is damaged elsewhere.
    """
    if group.attrs.get("format") != FORMAT:
        raise ValueError(f"{group.name} is not an evens ensemble")
    version = int(group.attrs["format_version"])
    if version != FORMAT_VERSION:
        raise ValueError(f"ensemble format {version}, from another evens; this evens reads format {FORMAT_VERSION} only")
    check_seal(group, f"the attributes of {group.name}", HEADER_OWN)
    problem = problem_from_dict(json.loads(group.attrs["problem"]))
    labels = {split: group["labels"][split][...] for split in ("val", "test")}
    check_seal(group["labels"], f"{group.name}/labels", arrays=labels)
    selection = group.attrs["selection"]
    selection = Selection.from_dict(json.loads(selection)) if selection else None
    wanted = (None if weights_of == "all" else set() if weights_of == "none"
              else set(selection.ids if selection else ()) if weights_of == "chosen" else set(weights_of))
    members = _read_members(group["members"], [int(i) for i in json.loads(group.attrs["members"])], wanted, dropped,
                            (problem.outputs, len(labels["val"]), len(labels["test"])))
    if selection is not None and dropped and set(selection.path) - {m.id for m in members}:
        dropped.append("the chosen ensemble held it, so it is chosen again (by `evens select`, or the run's next checkpoint)")
        selection = None
    stored = StoredEnsemble(
        problem=problem,
        sample_shape=tuple(int(s) for s in json.loads(group.attrs["sample_shape"])),
        x_dtype=str(group.attrs["x_dtype"]),
        val_y=labels["val"],
        test_y=labels["test"],
        hall_of_fame=HallOfFame(int(group.attrs["capacity"]), members),
        selection=selection,
    )
    check_consistent(stored)
    return stored


def _read_members(group: h5py.Group, listed: list[int], wanted: set | None, dropped: list[str] | None, shape: tuple) -> list[Member]:
    """The members ``listed`` in the header, read from ``group`` (``/ensemble/members``); each damaged one
    (or one there but not listed) raises, or with ``dropped`` is left out and named there."""
    members = []
    unlisted = sorted(set(group) - {str(i) for i in listed})
    for ident in listed + unlisted:
        try:
            if str(ident) in unlisted:
                raise ValueError("it is in the file, but not among the members the ensemble lists")
            members.append(_read_member(group, ident, wanted is None or ident in wanted, shape))
        except DAMAGE as exc:
            why = str(exc) if type(exc) is ValueError else f"{type(exc).__name__}: {exc}"
            if dropped is None:
                raise ValueError(f"member {ident}: {why}; `evens select` on the run leaves it out and chooses again") from None
            dropped.append(f"member {ident} is damaged ({why})")
    return members


def _read_member(group: h5py.Group, ident: int, with_weights: bool, shape: tuple) -> Member:
    """Member ``ident`` of ``group``, checked against its seal and checksums; ``ValueError`` saying what is damaged."""
    if str(ident) not in group:
        raise ValueError("it is missing from the file")
    g = group[str(ident)]
    val, test = g["val_pred"][...], g["test_pred"][...]
    check_seal(g, "its attributes", MEMBER_OWN)
    weights = None
    if with_weights:
        try:
            weights = {}  # (a folded member's are fold<j>/<name>: a group per fold)
            g["weights"].visititems(lambda name, d: weights.__setitem__(name, d[...]) if isinstance(d, h5py.Dataset) else None)
        except (OSError, RuntimeError, KeyError) as exc:
            raise ValueError(f"its weights cannot be read ({type(exc).__name__}: {exc})") from None
    stored_preds, stored_weights = (int(c) for c in json.loads(g.attrs["checksums"]))
    preds, of_weights = member_checksums(val, test, weights or {})
    if preds != stored_preds:
        raise ValueError("its predictions do not match their checksum")
    if weights and of_weights != stored_weights:  # (none at all: refused later, as "no stored weights")
        raise ValueError("its weights do not match their checksum")
    outputs, n_val, n_test = shape
    for split, pred, n in (("val", val, n_val), ("test", test, n_test)):
        if pred.shape != (n, outputs):
            raise ValueError(f"{split}_pred has shape {pred.shape}, expected {(n, outputs)}")
    for name, w in (weights or {}).items():
        if w.dtype.kind not in "biuf":
            raise ValueError(f"weight {name!r} holds {w.dtype}, not numbers")
    return Member(id=ident, fitness=float(g.attrs["fitness"]), network=dict(json.loads(g.attrs["network"])),
                  training=dict(json.loads(g.attrs["training"])), val_pred=val, test_pred=test, weights=weights, loss=float(g.attrs["loss"]))


def check_consistent(stored: StoredEnsemble) -> None:
    """Raise ``ValueError`` unless the parts of a stored ensemble fit together (a hand-edited or
    damaged file is refused here, in one line, rather than failing somewhere later; each member's own
    parts are checked as it is read)."""
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


def read_stored(path: str, weights_of="all") -> StoredEnsemble:
    """The ensemble group of a run file or run directory, as :class:`StoredEnsemble`; one-line errors."""
    file = run_file(path)
    try:
        f = h5py.File(file, "r")
    except FileNotFoundError:
        raise EnsembleError(f"{path}: no run file here (no {file})") from None
    except OSError as exc:
        raise EnsembleError(f"{file}: not a readable run file ({exc})") from None
    with f:
        if GROUP not in f:
            raise EnsembleError(f"{file}: holds no ensemble (a run file from an older evens, or not a run file)")
        try:
            stored = read_ensemble(f[GROUP], weights_of)
        except (KeyError, ValueError, TypeError, AttributeError, OSError, RuntimeError) as exc:  # (h5py: RuntimeError for some damaged headers)
            raise EnsembleError(f"{file}: damaged ensemble ({type(exc).__name__}: {exc})") from None
        return dataclasses.replace(stored, made_with=_model_path(f))


def _model_path(f: h5py.File) -> str:
    """The ``model.path`` in a run file's config (JSON, read as text only), or "" where there is none or it is not text."""
    try:
        path = json.loads(f.attrs["config"])["model"]["path"]
    except (KeyError, ValueError, TypeError, OSError):
        return ""
    return path if isinstance(path, str) else ""


def chosen_members(stored: StoredEnsemble, path: str, need_weights: bool = False) -> list[tuple[Member, float]]:
    """The selected members with their ensemble weights; an error if the run has none yet.

    ``need_weights``: also an error if a member's trained weights were not stored.
    """
    if stored.selection is None:
        raise EnsembleError(f"{path}: the run has no ensemble yet (no network finished successfully)")
    chosen = [(stored.hall_of_fame.by_id(i), w) for i, w in zip(stored.selection.ids, stored.selection.weights)]
    for m, _ in chosen if need_weights else ():
        if not m.weights:
            raise EnsembleError(f"{path}: member #{m.id} has no stored weights; this run cannot predict")
    return chosen


def read_chosen(path: str) -> StoredEnsemble:
    """The stored ensemble with the weights of its chosen members only (the rest stay on disk); an error if the run
    has none yet. One opening of the run file: a job replaces it by rename at each checkpoint, so the selection and
    the weights read are one checkpoint's."""
    stored = read_stored(path, weights_of="chosen")
    chosen_members(stored, path)
    return stored
